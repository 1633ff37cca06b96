// The device side of the PCIe link: DMA reads and writes of host memory, atomics on host memory,
// and MSI-X interrupts. Each call moves the real bytes (live mode: host memory is this process's
// address space) and reports its TLPs to the sink.
#pragma once
#include <cstddef>
#include <cstdint>

#include "pcie/pcie_config.h"
#include "pcie/tlp.h"

namespace softhca::pcie {

class DevicePort {
 public:
  DevicePort(TlpSink& sink, const PcieConfig& config) : sink_(sink), config_(config) {}

  void dma_read(uint64_t host_addr, void* dst, size_t len, TlpCause cause);
  void dma_write(uint64_t host_addr, const void* src, size_t len, TlpCause cause);
  // Writes len bytes with the last byte stored last, with release ordering: how the device
  // publishes a CQE or EQE whose final byte carries the ownership bit.
  void dma_write_publish(uint64_t host_addr, const void* src, size_t len, TlpCause cause);
  // Reads a 32-bit doorbell record with acquire ordering (pairs with the driver's release store).
  uint32_t read_dbrec(uint64_t host_addr, TlpCause cause, bool counted);

  // 8-byte atomics on host memory (responder atomics); each is counted as an 8-byte read
  // (MRd + CplD) and an 8-byte write-back (MWr). Returns the original value.
  uint64_t atomic_fetch_add(uint64_t host_addr, uint64_t add);
  uint64_t atomic_compare_swap(uint64_t host_addr, uint64_t compare, uint64_t swap);

  // MSI-X: a 4-byte MWr upstream, delivered as a write to the interrupt's eventfd.
  void raise_interrupt(int irq_fd);

  [[nodiscard]] const PcieConfig& config() const { return config_; }

 private:
  void count_read(uint64_t host_addr, size_t len, TlpCause cause);
  void count_write(uint64_t host_addr, size_t len, TlpCause cause);

  TlpSink& sink_;
  const PcieConfig& config_;
};

}  // namespace softhca::pcie
