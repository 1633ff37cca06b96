// What the host kernel does for the user-space driver (the part of mlx5_ib/ib_uverbs the data path
// relies on): DMA-coherent memory for rings and doorbell records, pinning of registered memory
// (which yields its DMA address), and interrupt vectors that user space can poll. The driver uses
// it; the runtimes implement it (in one process: plain memory and socket pairs; across processes:
// shared memory and sockets, docs/live-mode.md). A vector's fd is a datagram socket: each firing
// is one datagram, so the driver can make it readable exactly while an event waits (clear_vector,
// raise_vector), as the kernel's event file is.
#pragma once
#include <cstddef>
#include <cstdint>

namespace softhca::pcie {

struct DmaMemory {
  uint8_t* data = nullptr;  // zeroed; 64-byte aligned, page-aligned when size is a page or more
  size_t size = 0;          // at least what was asked for
  uint64_t dma_addr = 0;    // what the device is told
  [[nodiscard]] bool valid() const { return data != nullptr; }
};

// What a registration lets the device do to its pages. kWrite for any access that lets the device
// store into them (IBV_ACCESS_LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC, and MW_BIND, which may
// grant those to a window: what the kernel's ib_access_writable() counts), kRead otherwise.
enum class PinAccess : uint8_t { kRead, kWrite };

class HostKernel {
 public:
  virtual ~HostKernel() = default;

  // Memory the device can reach, zeroed: at least `bytes`, rounded up as the implementation
  // chooses (small buffers may share a page, on cache lines of their own). Invalid with errno set
  // on failure.
  virtual DmaMemory alloc_coherent(size_t bytes) = 0;
  virtual void free_coherent(const DmaMemory& memory) = 0;

  // Memory registration: makes [addr, addr + len) reachable by the device and returns the DMA
  // address of addr (the range is contiguous in DMA space), or 0 with errno set. len may be 0.
  // As on hardware, the device then reaches the pages that were mapped at registration through
  // that address until unpin, whatever the application does to its own mapping meanwhile (unmaps
  // it, maps other memory there, changes its protection). Errors as the kernel's pin of user pages
  // gives them: EFAULT when a page is not mapped, not readable, or, for PinAccess::kWrite, not
  // writable. Each pin is undone by one unpin of the DMA address it returned and the same length.
  virtual uint64_t pin_user(const void* addr, size_t len, PinAccess access) = 0;
  virtual void unpin_user(uint64_t dma_addr, size_t len) = 0;

  // An interrupt vector: returns a file descriptor that becomes readable when the device raises
  // *vector (HostBridge::deliver_msi), or -1 with errno. The fd is what applications poll.
  virtual int alloc_vector(uint64_t* vector) = 0;
  virtual void free_vector(uint64_t vector, int fd) = 0;
  // Waits for the vector behind fd to fire and consumes one firing (or all pending ones). Blocks
  // unless fd is non-blocking (O_NONBLOCK set by the application): then 0 or -1 with errno EAGAIN.
  // Returns 0 when it fired, -1 with errno otherwise (EINTR included).
  virtual int wait_vector(int fd) = 0;
  // Consumes every pending firing of the vector behind fd, never blocking (whatever O_NONBLOCK).
  virtual void clear_vector(int fd) = 0;
  // Makes fd readable as a firing of `vector` would: the driver's own re-raise of an event it
  // left in the ring when it consumed the firings of several.
  virtual void raise_vector(uint64_t vector, int fd) = 0;
};

}  // namespace softhca::pcie
