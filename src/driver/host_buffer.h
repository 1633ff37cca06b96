// Host memory the device reaches by DMA: rings, doorbell records and event queues. It comes from
// the host kernel (pcie::HostKernel::alloc_coherent: zeroed, cache-line aligned, at least the
// size asked for) and is
// owned by one driver object and freed with it. The device is told dma_addr(), never a pointer:
// across processes the two differ (docs/live-mode.md, "Addresses the device uses"). Sizes in bytes.
#pragma once
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "pcie/host_kernel.h"

namespace softhca::driver {

class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  HostBuffer(HostBuffer&& o) noexcept
      : kernel_(std::exchange(o.kernel_, nullptr)), mem_(std::exchange(o.mem_, pcie::DmaMemory{})) {}
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    if (this != &o) {
      release();
      kernel_ = std::exchange(o.kernel_, nullptr);
      mem_ = std::exchange(o.mem_, pcie::DmaMemory{});
    }
    return *this;
  }
  ~HostBuffer() { release(); }

  // Allocates bytes from kernel (rounded up as the kernel chooses), zeroed, replacing what
  // this buffer held. kernel must outlive the buffer. False with errno set on failure (ENOMEM
  // when the kernel did not say).
  [[nodiscard]] bool allocate(pcie::HostKernel& kernel, size_t bytes) {
    errno = 0;
    pcie::DmaMemory m = kernel.alloc_coherent(bytes);
    if (!m.valid()) {
      if (errno == 0) errno = ENOMEM;
      return false;
    }
    release();
    kernel_ = &kernel;
    mem_ = m;
    return true;
  }

  [[nodiscard]] uint8_t* data() const { return mem_.data; }
  [[nodiscard]] size_t size() const { return mem_.size; }
  // What the device is told: the DMA address of data()[0].
  [[nodiscard]] uint64_t dma_addr() const { return mem_.dma_addr; }

 private:
  void release() {
    if (mem_.valid()) kernel_->free_coherent(mem_);
    mem_ = pcie::DmaMemory{};
    kernel_ = nullptr;
  }

  pcie::HostKernel* kernel_ = nullptr;
  pcie::DmaMemory mem_;
};

}  // namespace softhca::driver
