// The host side of the PCIe link as the driver sees it: MMIO writes into the device BAR, and reads
// of its device memory. Each write is counted as MWr TLPs (one per write-combining chunk), each read
// as MRd and CplD TLPs, and then handed to the device.
#pragma once
#include <cstddef>
#include <cstdint>

#include "hwif/device_interface.h"
#include "pcie/pcie_config.h"
#include "pcie/tlp.h"

namespace softhca::pcie {

class HostPort {
 public:
  HostPort(hwif::MmioTarget& bar, TlpSink& sink, const PcieConfig& config)
      : bar_(bar), sink_(sink), config_(config) {}

  // An 8-byte doorbell (mmio_write64_be): one MWr with 8 bytes of payload.
  void write_doorbell(uint64_t bar_offset, const void* value8, TlpCause cause);
  // A BlueFlame copy: len bytes (a multiple of the write-combining size) as one MWr per chunk.
  void write_combined(uint64_t bar_offset, const void* data, size_t len, TlpCause cause);
  // Stores into device memory through its write-combining mapping: one MWr per write-combining
  // chunk of the BAR the bytes touch (chunks aligned in the BAR, as the CPU's WC buffers are).
  void write_memory(uint64_t bar_offset, const void* data, size_t len, TlpCause cause);
  // Loads from device memory: uncached reads, one MRd and its CplD per aligned 8-byte word touched
  // (a 64-bit load each; the CPU waits for every completion).
  void read_memory(uint64_t bar_offset, void* dst, size_t len, TlpCause cause);

 private:
  hwif::MmioTarget& bar_;
  TlpSink& sink_;
  const PcieConfig& config_;
};

}  // namespace softhca::pcie
