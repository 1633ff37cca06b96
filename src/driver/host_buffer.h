// Host memory the device reaches by DMA: rings, doorbell records and event queues. It comes from
// the host kernel (pcie::HostKernel::alloc_coherent: zeroed, cache-line aligned, at least the
// size asked for), or from a parent domain's allocator (ibv_alloc_parent_domain: the caller's
// memory, zeroed and pinned for the device as a registration's pages are), and is owned by one
// driver object and freed with it. The device is told dma_addr(), never a pointer:
// across processes the two differ (docs/live-mode.md, "Addresses the device uses"). Sizes in bytes.
#pragma once
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <utility>

#include <infiniband/verbs.h>

#include <cstring>

#include "pcie/host_kernel.h"

namespace softhca::driver {

// The allocators of a parent domain (ibv_parent_domain_init_attr alloc/free/pd_context) and the
// resource type a buffer is asked for with (ExternalAllocator::kQp, ...: mlx5dv's values, since
// the queues have mlx5's formats). The caller's alloc may answer IBV_ALLOCATOR_USE_DEFAULT.
struct ExternalAllocator {
  static constexpr uint64_t kDriverMlx5 = 1;  // RDMA_DRIVER_MLX5 (rdma/ib_user_ioctl_verbs.h)
  static constexpr uint64_t kQp = kDriverMlx5 << 32 | 1;   // MLX5DV_RES_TYPE_QP: send and receive rings
  static constexpr uint64_t kDbr = kDriverMlx5 << 32 | 3;  // MLX5DV_RES_TYPE_DBR: doorbell records
  static constexpr uint64_t kSrq = kDriverMlx5 << 32 | 4;  // MLX5DV_RES_TYPE_SRQ
  static constexpr uint64_t kCq = kDriverMlx5 << 32 | 5;   // MLX5DV_RES_TYPE_CQ
  static constexpr size_t kAlignment = 4096;  // what the rings need: whole pages, as alloc_coherent's
  ibv_pd* pd = nullptr;  // the parent domain, handed back to the callbacks
  void* pd_context = nullptr;
  void* (*alloc)(ibv_pd* pd, void* pd_context, size_t size, size_t alignment, uint64_t resource_type) = nullptr;
  void (*free)(ibv_pd* pd, void* pd_context, void* ptr, uint64_t resource_type) = nullptr;
};

class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  HostBuffer(HostBuffer&& o) noexcept
      : kernel_(std::exchange(o.kernel_, nullptr)),
        mem_(std::exchange(o.mem_, pcie::DmaMemory{})),
        ext_(std::exchange(o.ext_, ExternalAllocator{})),
        ext_type_(o.ext_type_) {}
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    if (this != &o) {
      release();
      kernel_ = std::exchange(o.kernel_, nullptr);
      mem_ = std::exchange(o.mem_, pcie::DmaMemory{});
      ext_ = std::exchange(o.ext_, ExternalAllocator{});
      ext_type_ = o.ext_type_;
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

  // The same from `ext` when it is a parent domain's allocator (else as above): bytes rounded up to
  // whole pages are asked of its alloc with `resource_type`, zeroed and pinned writable; the
  // default allocation when it answers IBV_ALLOCATOR_USE_DEFAULT. False with errno (ENOMEM when
  // alloc returned NULL; the pin's errno, the memory then given back to its free).
  [[nodiscard]] bool allocate(pcie::HostKernel& kernel, size_t bytes, const ExternalAllocator* ext,
                              uint64_t resource_type) {
    if (ext == nullptr || ext->alloc == nullptr) return allocate(kernel, bytes);
    const size_t len = (std::max<size_t>(bytes, 1) + ExternalAllocator::kAlignment - 1) &
                       ~(ExternalAllocator::kAlignment - 1);
    void* p = ext->alloc(ext->pd, ext->pd_context, len, ExternalAllocator::kAlignment, resource_type);
    if (p == IBV_ALLOCATOR_USE_DEFAULT) return allocate(kernel, bytes);
    if (p == nullptr) {
      errno = ENOMEM;
      return false;
    }
    std::memset(p, 0, len);
    errno = 0;
    const uint64_t dma = kernel.pin_user(p, len, pcie::PinAccess::kWrite);
    if (dma == 0 && errno != 0) {
      const int err = errno;
      ext->free(ext->pd, ext->pd_context, p, resource_type);
      errno = err;
      return false;
    }
    release();
    kernel_ = &kernel;
    mem_ = pcie::DmaMemory{static_cast<uint8_t*>(p), len, dma};
    ext_ = *ext;
    ext_type_ = resource_type;
    return true;
  }

  [[nodiscard]] uint8_t* data() const { return mem_.data; }
  [[nodiscard]] size_t size() const { return mem_.size; }
  // What the device is told: the DMA address of data()[0].
  [[nodiscard]] uint64_t dma_addr() const { return mem_.dma_addr; }

 private:
  void release() {
    if (mem_.valid()) {
      if (ext_.alloc != nullptr) {
        kernel_->unpin_user(mem_.dma_addr, mem_.size);  // the device no longer reaches it
        ext_.free(ext_.pd, ext_.pd_context, mem_.data, ext_type_);
      } else {
        kernel_->free_coherent(mem_);
      }
    }
    mem_ = pcie::DmaMemory{};
    kernel_ = nullptr;
    ext_ = ExternalAllocator{};
  }

  pcie::HostKernel* kernel_ = nullptr;
  pcie::DmaMemory mem_;
  ExternalAllocator ext_;  // alloc != nullptr: mem_ came from it and is pinned
  uint64_t ext_type_ = 0;
};

}  // namespace softhca::driver
