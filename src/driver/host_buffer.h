// Host memory the device reaches by DMA: rings and doorbell records. Page-aligned, zeroed,
// owned by one driver object and freed with it. The DMA address of a byte is its process virtual
// address (DESIGN.md: the device model resolves host addresses itself). Sizes in bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace softhca::driver {

inline constexpr size_t kHostPageBytes = 4096;

class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  HostBuffer(HostBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    if (this != &o) {
      std::free(p_);
      p_ = std::exchange(o.p_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~HostBuffer() { std::free(p_); }

  // Allocates bytes (rounded up to whole pages, at least one), zeroed. False on ENOMEM.
  [[nodiscard]] bool allocate(size_t bytes) {
    size_t rounded = (bytes + kHostPageBytes - 1) / kHostPageBytes * kHostPageBytes;
    if (rounded == 0) rounded = kHostPageBytes;
    void* p = std::aligned_alloc(kHostPageBytes, rounded);
    if (p == nullptr) return false;
    std::memset(p, 0, rounded);
    std::free(p_);
    p_ = static_cast<uint8_t*>(p);
    size_ = rounded;
    return true;
  }

  [[nodiscard]] uint8_t* data() const { return p_; }
  [[nodiscard]] size_t size() const { return size_; }
  [[nodiscard]] uint64_t dma_addr() const { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p_)); }

 private:
  uint8_t* p_ = nullptr;
  size_t size_ = 0;
};

}  // namespace softhca::driver
