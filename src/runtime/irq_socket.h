// Interrupt vectors across the processes of a host (docs/live-mode.md "Interrupts"): a vector is
// (process slot << 32) | id, and its file descriptor is an abstract-namespace AF_UNIX datagram
// socket in the process that allocated it. Raising a vector from any process is one sendto() of a
// 1-byte datagram; waiting is recv(). The socket's name holds the uid, the host segment's random
// instance (one per incarnation of the fabric/host's segment, which stands for the fabric and host
// names and keeps the name within sun_path's 107 bytes), the slot, the slot's process start time
// and the id, so a stale vector of a dead process never reaches a process that reuses its slot.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace softhca::runtime {

[[nodiscard]] constexpr uint64_t irq_vector(uint32_t slot, uint32_t id) { return (uint64_t{slot} << 32) | id; }
[[nodiscard]] constexpr uint32_t irq_vector_slot(uint64_t vector) { return static_cast<uint32_t>(vector >> 32); }
[[nodiscard]] constexpr uint32_t irq_vector_id(uint64_t vector) { return static_cast<uint32_t>(vector); }

class IrqSockets {
 public:
  // start_time_of(slot): the start time recorded for an occupied slot, 0 when free (the vector is
  // then dropped). my_start_time: this process's.
  IrqSockets(uint64_t instance, uint32_t my_slot, uint64_t my_start_time,
             std::function<uint64_t(uint32_t)> start_time_of);
  ~IrqSockets();
  IrqSockets(const IrqSockets&) = delete;
  IrqSockets& operator=(const IrqSockets&) = delete;

  // A new vector of this process: a bound socket (close-on-exec), returned as the fd to poll, or -1
  // with errno.
  int alloc_vector(uint64_t* vector);
  void free_vector(uint64_t vector, int fd);
  // Raises a vector of any process of the host, from any thread: never blocks. A full socket queue
  // or a vector whose process is gone is not an error (the vector is already pending / nobody
  // listens any more).
  void deliver(uint64_t vector);
  // Blocks until the vector behind fd fired (unless fd is O_NONBLOCK: then -1 with EAGAIN when it
  // has not), then consumes every pending firing. 0, or -1 with errno (EINTR included).
  static int wait_vector(int fd);
  // Consumes every pending firing without blocking.
  static void clear_vector(int fd);

  // Counters (this process): datagrams sent, and those refused because the queue was full or
  // nobody listens.
  [[nodiscard]] uint64_t delivered() const { return delivered_.load(std::memory_order_relaxed); }
  [[nodiscard]] uint64_t undeliverable() const { return undeliverable_.load(std::memory_order_relaxed); }

 private:
  // The abstract socket name (leading NUL included) and its length.
  size_t socket_name(char* out, size_t cap, uint32_t slot, uint64_t start_time, uint32_t id) const;

  uid_t uid_;
  uint64_t instance_;
  uint32_t my_slot_;
  uint64_t my_start_time_;
  std::function<uint64_t(uint32_t)> start_time_of_;
  int send_fd_ = -1;  // unbound datagram socket used to raise every vector
  std::atomic<uint32_t> next_id_{1};
  std::atomic<uint64_t> delivered_{0};
  std::atomic<uint64_t> undeliverable_{0};
};

}  // namespace softhca::runtime
