#include "runtime/irq_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>

namespace softhca::runtime {

IrqSockets::IrqSockets(uint64_t instance, uint32_t my_slot, uint64_t my_start_time,
                       std::function<uint64_t(uint32_t)> start_time_of)
    : uid_(::getuid()),
      instance_(instance),
      my_slot_(my_slot),
      my_start_time_(my_start_time),
      start_time_of_(std::move(start_time_of)),
      send_fd_(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {}

IrqSockets::~IrqSockets() {
  if (send_fd_ >= 0) ::close(send_fd_);
}

size_t IrqSockets::socket_name(char* out, size_t cap, uint32_t slot, uint64_t start_time, uint32_t id) const {
  // Abstract namespace: sun_path starts with NUL and the name is the given length, not a C string.
  const int n = std::snprintf(out + 1, cap - 1, "softhca-irq-%x-%016llx-%u-%llx-%x", static_cast<unsigned>(uid_),
                              static_cast<unsigned long long>(instance_), slot,
                              static_cast<unsigned long long>(start_time), id);
  out[0] = '\0';
  return n < 0 ? 0 : static_cast<size_t>(n) + 1 < cap ? static_cast<size_t>(n) + 1 : cap;
}

int IrqSockets::alloc_vector(uint64_t* vector) {
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const uint32_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t len = socket_name(addr.sun_path, sizeof(addr.sun_path), my_slot_, my_start_time_, id);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len)) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  *vector = irq_vector(my_slot_, id);
  return fd;
}

void IrqSockets::free_vector(uint64_t /*vector*/, int fd) {
  if (fd >= 0) ::close(fd);  // unbinds the abstract name: later firings find nobody
}

void IrqSockets::deliver(uint64_t vector) {
  const uint32_t slot = irq_vector_slot(vector);
  const uint64_t start = slot == my_slot_ ? my_start_time_ : start_time_of_(slot);
  if (start == 0 || send_fd_ < 0) {
    undeliverable_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t len = socket_name(addr.sun_path, sizeof(addr.sun_path), slot, start, irq_vector_id(vector));
  const char byte = 1;
  const ssize_t n = ::sendto(send_fd_, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&addr),
                             static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len));
  // EAGAIN: the queue is full, so the vector is already pending; ECONNREFUSED: nobody bound it.
  (n == 1 ? delivered_ : undeliverable_).fetch_add(1, std::memory_order_relaxed);
}

int IrqSockets::wait_vector(int fd) {
  char buf[16];
  // recv honours O_NONBLOCK on the fd: a non-blocking channel gives EAGAIN as an eventfd would.
  if (::recv(fd, buf, sizeof(buf), 0) < 0) return -1;
  clear_vector(fd);
  return 0;
}

void IrqSockets::clear_vector(int fd) {
  char buf[16];
  while (::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
}

}  // namespace softhca::runtime
