#include "runtime/inproc_kernel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "pcie/host_bridge.h"
#include "runtime/irq_socket.h"
#include "runtime/pinned_pages.h"

namespace softhca::runtime {

namespace {
constexpr size_t kCacheLineBytes = 64;
constexpr size_t kSmallestPageBuffer = InprocKernel::kPageBytes;  // small blocks: up to half of it
}  // namespace

// Heap memory rather than mmap: the address sanitizer then checks the driver's ring accesses.
pcie::DmaMemory InprocKernel::alloc_coherent(size_t bytes) {
  if (bytes > SIZE_MAX - kPageBytes) {
    errno = ENOMEM;
    return {};
  }
  // Small buffers (doorbell records, the rings of small queues) as a power of two from a cache
  // line, as the shared runtime's pool places them (coherent_pool.h); the rest in whole pages.
  size_t rounded = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  size_t align = kPageBytes;
  if (bytes <= kSmallestPageBuffer / 2) {
    rounded = std::bit_ceil(std::max<size_t>(bytes, kCacheLineBytes));
    align = kCacheLineBytes;
  }
  if (rounded == 0) rounded = kPageBytes;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) {
    errno = ENOMEM;
    return {};
  }
  std::memset(p, 0, rounded);
  buffers_.fetch_add(1, std::memory_order_relaxed);
  pcie::DmaMemory m;
  m.data = static_cast<uint8_t*>(p);
  m.size = rounded;
  m.dma_addr = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
  return m;
}

void InprocKernel::free_coherent(const pcie::DmaMemory& memory) {
  if (!memory.valid()) return;
  std::free(memory.data);
  buffers_.fetch_sub(1, std::memory_order_relaxed);
}

// The device could reach any memory of this process through the application's own address, but
// then an unmap or a new mapping there would reach the device too: it gets the window instead.
uint64_t InprocKernel::pin_user(const void* addr, size_t len, pcie::PinAccess access) {
  uint64_t dma = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(addr));
  if (len != 0) {
    const Window w = PinnedPages::pin(addr, len, access);
    if (w.device == nullptr) return 0;
    dma = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(w.device));
  }
  pins_.fetch_add(1, std::memory_order_relaxed);
  return dma;
}

void InprocKernel::unpin_user(uint64_t dma_addr, size_t len) {
  if (len != 0 && !PinnedPages::unpin(reinterpret_cast<const void*>(static_cast<uintptr_t>(dma_addr)), len)) return;
  pins_.fetch_sub(1, std::memory_order_relaxed);
}

int InprocKernel::alloc_vector(uint64_t* vector) {
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, ends) != 0) return -1;
  vectors_.fetch_add(1, std::memory_order_relaxed);
  *vector = static_cast<uint64_t>(ends[1]);
  return ends[0];
}

void InprocKernel::free_vector(uint64_t vector, int fd) {
  if (fd < 0) return;
  ::close(fd);
  if (vector <= static_cast<uint64_t>(INT_MAX)) ::close(static_cast<int>(vector));
  vectors_.fetch_sub(1, std::memory_order_relaxed);
}

// One wait takes every firing sent so far, as IrqSockets::wait_vector.
int InprocKernel::wait_vector(int fd) { return IrqSockets::wait_vector(fd); }

void InprocKernel::clear_vector(int fd) { IrqSockets::clear_vector(fd); }

void InprocKernel::raise_vector(uint64_t vector, int /*fd*/) { pcie::IdentityBridge().deliver_msi(vector); }

InprocKernel::Outstanding InprocKernel::outstanding() const {
  return {buffers_.load(std::memory_order_relaxed), pins_.load(std::memory_order_relaxed),
          vectors_.load(std::memory_order_relaxed)};
}

}  // namespace softhca::runtime
