// A fake host kernel for the driver's unit tests. It hands out DMA addresses that are NOT
// pointers (process slot kSlot in the live runtimes' layout, pcie/host_bridge.h), so a driver
// that gave the device a pointer instead of a DMA address is caught; it records every call and
// what is outstanding, and can fail the next call of a kind. Vectors are datagram socket pairs
// with numbers unrelated to the fd (kVectorBase + n), as MSI-X vectors are; raise() is the device
// side (one datagram per firing).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "pcie/host_bridge.h"
#include "pcie/host_kernel.h"

namespace softhca::driver::testing {

class FakeKernel final : public pcie::HostKernel {
 public:
  static constexpr uint32_t kSlot = 5;
  static constexpr uint64_t kVectorBase = 0x7000;

  ~FakeKernel() override;

  pcie::DmaMemory alloc_coherent(size_t bytes) override;
  void free_coherent(const pcie::DmaMemory& memory) override;
  uint64_t pin_user(const void* addr, size_t len, pcie::PinAccess access) override;
  void unpin_user(uint64_t dma_addr, size_t len) override;
  int alloc_vector(uint64_t* vector) override;
  void free_vector(uint64_t vector, int fd) override;
  int wait_vector(int fd) override;
  void clear_vector(int fd) override;
  void raise_vector(uint64_t vector, int fd) override;

  // The device's view: the memory behind a DMA address this kernel handed out (a coherent buffer
  // or a pinned range), or nullptr. The MSI-X write of a vector: one firing.
  [[nodiscard]] uint8_t* host(uint64_t dma) const;
  void raise(uint64_t vector);

  // Makes the next call of that kind fail with err.
  int fail_alloc = 0;
  int fail_pin = 0;
  int fail_vector = 0;

  // Calls made, and what is held now.
  struct Calls {
    int alloc = 0, free = 0, pin = 0, unpin = 0, alloc_vector = 0, free_vector = 0, wait = 0, clear = 0;
  };
  Calls calls;
  pcie::PinAccess last_pin_access = pcie::PinAccess::kRead;
  [[nodiscard]] size_t buffers_held() const { return buffers_.size(); }
  [[nodiscard]] size_t pins_held() const;
  [[nodiscard]] size_t vectors_held() const { return vectors_.size(); }
  // Bytes still allocated over all held buffers.
  [[nodiscard]] size_t bytes_held() const;
  // Unbalanced calls seen (an unpin or free of something not held): must stay 0.
  int mismatches = 0;

 private:
  mutable std::mutex lock_;
  std::map<uintptr_t, size_t> buffers_;                    // pointer -> size
  std::map<std::pair<uintptr_t, size_t>, int> pins_;       // (addr, len) -> nesting count
  std::map<uint64_t, std::pair<int, int>> vectors_;        // vector -> (fd, its sending end)
  uint64_t next_vector_ = kVectorBase;
};

}  // namespace softhca::driver::testing
