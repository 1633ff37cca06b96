// The host side of the PCIe link as the device sees it: the root complex and its IOMMU. DMA
// addresses resolve to host memory mapped in the executing process, and MSI-X writes become
// interrupts. Live mode across processes (docs/live-mode.md) resolves addresses of other processes
// here; the identity bridge serves a device inside one process.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

namespace softhca::pcie {

// DMA address layout of the live runtimes: (process slot << kDmaSlotShift) | virtual address.
inline constexpr unsigned kDmaSlotShift = 52;
inline constexpr uint64_t kDmaAddressMask = (uint64_t{1} << kDmaSlotShift) - 1;
[[nodiscard]] constexpr uint64_t dma_address(uint32_t slot, uint64_t va) {
  return (uint64_t{slot} << kDmaSlotShift) | (va & kDmaAddressMask);
}
[[nodiscard]] constexpr uint32_t dma_slot(uint64_t dma) { return static_cast<uint32_t>(dma >> kDmaSlotShift); }
[[nodiscard]] constexpr uint64_t dma_va(uint64_t dma) { return dma & kDmaAddressMask; }
// The device's own memory (ibv_alloc_dm) has addresses of its own: the last slot, which no process
// gets and no pointer of a process reaches (user space lies below 2^47). The device port serves
// them from that memory with no TLP; the host bridge never sees them.
inline constexpr uint32_t kDeviceMemorySlot = (uint32_t{1} << (64 - kDmaSlotShift)) - 1;
inline constexpr uint64_t kDeviceMemoryDma = dma_address(kDeviceMemorySlot, 0);

class HostBridge {
 public:
  virtual ~HostBridge() = default;
  // The host memory at dma_addr: at most len bytes, contiguous from dma_addr; shorter when the
  // mapping ends first (the caller asks again for the rest). Empty: nothing mapped there (a DMA
  // fault: the device reports an error instead of touching memory).
  virtual std::span<uint8_t> map(uint64_t dma_addr, size_t len) = 0;
  // An MSI-X write of `vector` (a value the host kernel handed out with alloc_vector).
  virtual void deliver_msi(uint64_t vector) = 0;
};

// One process: a DMA address is a pointer of this process; a vector is the sending end of a
// datagram socket pair (runtime::InprocKernel), one datagram per firing.
class IdentityBridge final : public HostBridge {
 public:
  std::span<uint8_t> map(uint64_t dma_addr, size_t len) override;
  void deliver_msi(uint64_t vector) override;
};

}  // namespace softhca::pcie
