// The host kernel services for a device inside this one process (SOFTHCA_NUM_DEVICES mode, sim
// mode, tests): DMA addresses are pointers of this process (what pcie::IdentityBridge resolves);
// a pin's pointer is into its window (pinned_pages.h), the device's own mapping of the pinned
// pages, never the application's address; an interrupt vector is a datagram socket pair: the fd
// is one end, the vector the number of the other (IdentityBridge::deliver_msi sends on it). Page size 4096 bytes (x86-64, arm64 base pages).
// Thread-safe: every call may come from any thread; the counts are for tests and diagnostics.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "pcie/host_kernel.h"

namespace softhca::runtime {

class InprocKernel final : public pcie::HostKernel {
 public:
  static constexpr size_t kPageBytes = 4096;

  pcie::DmaMemory alloc_coherent(size_t bytes) override;
  void free_coherent(const pcie::DmaMemory& memory) override;
  // Errors of PinnedPages::pin. len 0 pins nothing and gives addr itself.
  uint64_t pin_user(const void* addr, size_t len, pcie::PinAccess access) override;
  void unpin_user(uint64_t dma_addr, size_t len) override;
  int alloc_vector(uint64_t* vector) override;
  void free_vector(uint64_t vector, int fd) override;
  int wait_vector(int fd) override;
  void clear_vector(int fd) override;
  void raise_vector(uint64_t vector, int fd) override;

  // What is outstanding now: coherent buffers, pins and vectors not yet released.
  struct Outstanding {
    int64_t buffers = 0;
    int64_t pins = 0;
    int64_t vectors = 0;
  };
  [[nodiscard]] Outstanding outstanding() const;

 private:
  std::atomic<int64_t> buffers_{0};
  std::atomic<int64_t> pins_{0};
  std::atomic<int64_t> vectors_{0};
};

}  // namespace softhca::runtime
