// The device side of the PCIe link: DMA reads and writes of host memory, atomics on host memory,
// and MSI-X interrupts. Each call reports its TLPs to the sink and moves the real bytes through the
// host bridge, which resolves DMA addresses to memory mapped in this process. Addresses of the
// device's own memory (kDeviceMemoryDma and up, set_device_memory()) never cross the link: they are
// served from that memory, and no TLP is counted for them. A DMA address the
// bridge cannot resolve is a fault: the call returns false having touched nothing at the faulting
// piece (pieces before it may have been written, as with a real completion error mid-transfer).
// TLPs are counted for what the device issued, fault or not.
#pragma once
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "base/units.h"
#include "pcie/counters.h"
#include "pcie/host_bridge.h"
#include "pcie/pcie_config.h"
#include "pcie/tlp.h"

namespace softhca::pcie {

class DevicePort {
 public:
  // The config is fixed for the port's life (its TLP sizes are read once, here).
  DevicePort(TlpSink& sink, const PcieConfig& config, HostBridge& bridge)
      : sink_(sink),
        config_(config),
        bridge_(bridge),
        mps_(config.mps_bytes),
        mrrs_(config.mrrs_bytes),
        completion_(config.completion_bytes) {}
  // A device inside one process: DMA addresses are pointers (IdentityBridge).
  DevicePort(TlpSink& sink, const PcieConfig& config);

  // The device's own memory, reached at DMA addresses [kDeviceMemoryDma, + memory.size()).
  void set_device_memory(std::span<uint8_t> memory) { local_ = memory; }
  [[nodiscard]] bool is_device_memory(uint64_t addr) const { return addr - kDeviceMemoryDma < local_.size(); }

  // false: a DMA fault. (Not [[nodiscard]]: benches and TLP-count tests move bytes they own.)
  bool dma_read(uint64_t host_addr, void* dst, size_t len, TlpCause cause);
  bool dma_write(uint64_t host_addr, const void* src, size_t len, TlpCause cause);
  // A DMA read whose bytes are used where they lie: when [host_addr, +len) is one mapping, counts
  // the read's TLPs and returns that memory (the caller copies it on, e.g. into another host
  // buffer: one memcpy instead of two). Empty, counting nothing, otherwise: use dma_read().
  [[nodiscard]] std::span<const uint8_t> dma_read_in_place(uint64_t host_addr, size_t len, TlpCause cause);
  // Writes len bytes with the last byte stored last, with release ordering: how the device
  // publishes a CQE or EQE whose final byte carries the ownership bit.
  bool dma_write_publish(uint64_t host_addr, const void* src, size_t len, TlpCause cause);
  // Reads a 32-bit doorbell record with acquire ordering (pairs with the driver's release store).
  [[nodiscard]] std::optional<uint32_t> read_dbrec(uint64_t host_addr, TlpCause cause, bool counted);

  // 8-byte atomics on host memory (responder atomics); each is counted as an 8-byte read
  // (MRd + CplD) and an 8-byte write-back (MWr). Returns the original value; nothing on a fault.
  [[nodiscard]] std::optional<uint64_t> atomic_fetch_add(uint64_t host_addr, uint64_t add);
  [[nodiscard]] std::optional<uint64_t> atomic_compare_swap(uint64_t host_addr, uint64_t compare, uint64_t swap);

  // MSI-X: a 4-byte MWr upstream, delivered by the host bridge.
  void raise_interrupt(uint64_t msi_vector);

  [[nodiscard]] const PcieConfig& config() const { return config_; }

  // For a transfer whose bytes move by one copy between two mapped ranges (a looped-back message,
  // hca/transport/express.cc): as much of [host_addr, +len), from its start, as one mapping holds
  // (empty: none), counting nothing; and the TLPs of each DMA the device stands for, counted apart.
  [[nodiscard]] std::span<uint8_t> map_prefix(uint64_t host_addr, size_t len) { return map(host_addr, len); }
  void count_read(uint64_t host_addr, size_t len, TlpCause cause) {
    if (is_device_memory(host_addr)) return;
    if (!defer_ || !reads_cut_whole_) return count_read_now(host_addr, len, cause);
    hold(mrd_run(cause, mrrs_.chunks(host_addr, len)));
    hold(cpld_run(cause, completion_.chunks(host_addr, len), len));
  }
  void count_write(uint64_t host_addr, size_t len, TlpCause cause) {
    if (is_device_memory(host_addr)) return;
    if (!defer_) return count_write_now(host_addr, len, cause);
    hold(mwr_run(cause, mps_.chunks(host_addr, len), len));
  }

  // A TLP size (MPS, MRRS, completion size) by which DMAs are cut: TLPs of [addr, addr + len) cut
  // at its multiples are what for_each_aligned_chunk visits. Counted per DMA, so by a shift where
  // the size is a power of two (MPS, MRRS and RCB always are, PCIe 7.5.3.4), its log2 found once:
  // a 64-bit division costs tens of cycles, four of them per read.
  class TlpCut {
   public:
    explicit TlpCut(uint64_t unit) : unit_(unit), shift_(is_power_of_two(unit) ? std::countr_zero(unit) : -1) {}
    [[nodiscard]] uint64_t chunks(uint64_t addr, uint64_t len) const {
      if (shift_ >= 0) return ((addr + len + unit_ - 1) >> shift_) - (addr >> shift_);
      return (addr + len + unit_ - 1) / unit_ - addr / unit_;
    }

   private:
    uint64_t unit_;
    int shift_;  // -1: not a power of two
  };

  // A batch of DMAs whose TLPs the caller adds up (add_write(), add_read(): arithmetic only, on a
  // copy of the port's TLP sizes that a local batch keeps in registers) and holds at once
  // (hold_batch()): the counts a count_write() or count_read() of each would give. Only while
  // counts are held and reads are cut whole (batches_counts()).
  class DmaBatch {
   public:
    void add_write(uint64_t host_addr, size_t len) {
      if (host_addr - kDeviceMemoryDma < local_bytes_) return;  // device memory: no TLP
      mwr_ += mps_.chunks(host_addr, len);
      written_ += len;
    }
    void add_read(uint64_t host_addr, size_t len) {
      if (host_addr - kDeviceMemoryDma < local_bytes_) return;
      mrd_ += mrrs_.chunks(host_addr, len);
      cpld_ += completion_.chunks(host_addr, len);
      read_ += len;
    }

   private:
    friend class DevicePort;
    DmaBatch(TlpCut mps, TlpCut mrrs, TlpCut completion, uint64_t local_bytes)
        : mps_(mps), mrrs_(mrrs), completion_(completion), local_bytes_(local_bytes) {}
    TlpCut mps_, mrrs_, completion_;
    uint64_t local_bytes_;  // the device memory's size (its DMAs count nothing)
    uint64_t mwr_ = 0, written_ = 0;          // writes: TLPs, payload bytes
    uint64_t mrd_ = 0, cpld_ = 0, read_ = 0;  // reads: requests, completions, payload bytes
  };
  [[nodiscard]] bool batches_counts() const { return defer_ && reads_cut_whole_; }
  [[nodiscard]] DmaBatch batch() const { return DmaBatch(mps_, mrrs_, completion_, local_.size()); }
  void hold_batch(const DmaBatch& b, TlpCause read_cause, TlpCause write_cause) {
    if (b.mwr_ != 0) hold(mwr_run(write_cause, b.mwr_, b.written_));
    if (b.mrd_ == 0) return;
    hold(mrd_run(read_cause, b.mrd_));
    hold(cpld_run(read_cause, b.cpld_, b.read_));
  }

  // With a counts-only sink, the DMA counts may be held back: each run adds up here, in plain
  // cells, and reaches the sink at flush_counts(), one run per (type, cause) touched — no locked
  // add per DMA. The device holds them for one entry point (Device::end_entry() flushes); off by
  // default, and never with a sink that looks at single TLPs (traces, the timing model).
  void defer_counts(bool on) {
    defer_ = on && sink_.counts_only();
    reads_cut_whole_ = reads_cut_whole(config_);
  }
  void flush_counts();

 private:
  void emit(const TlpRun& run);  // to the sink, or held back
  // Runs of `tlps` TLPs of each type carrying `bytes` of payload in all, with their overheads.
  [[nodiscard]] TlpRun mwr_run(TlpCause cause, uint64_t tlps, uint64_t bytes) const {
    return {TlpType::kMWr, cause, tlps, bytes, bytes + tlps * config_.mwr_overhead_bytes};
  }
  [[nodiscard]] TlpRun mrd_run(TlpCause cause, uint64_t tlps) const {
    return {TlpType::kMRd, cause, tlps, 0, tlps * config_.mrd_overhead_bytes};
  }
  [[nodiscard]] TlpRun cpld_run(TlpCause cause, uint64_t tlps, uint64_t bytes) const {
    return {TlpType::kCplD, cause, tlps, bytes, bytes + tlps * config_.cpld_overhead_bytes};
  }
  void count_write_now(uint64_t host_addr, size_t len, TlpCause cause);
  void count_read_now(uint64_t host_addr, size_t len, TlpCause cause);
  // Read completions are cut at completion_bytes boundaries inside each MRRS-aligned request;
  // when completion_bytes (a power of two) divides MRRS that is the same as cutting the whole
  // range at them, and a read's TLPs can be counted without visiting them.
  [[nodiscard]] static bool reads_cut_whole(const PcieConfig& c) {
    return is_power_of_two(c.completion_bytes) && (c.mrrs_bytes & (c.completion_bytes - 1)) == 0;
  }
  void hold(const TlpRun& run) {  // adds a run to the held counts
    CounterCell& c = held_.at(run.type, run.cause);
    c.tlps += run.tlps;
    c.payload_bytes += run.payload_bytes;
    c.wire_bytes += run.wire_bytes;
    held_cells_ |= uint64_t{1} << (static_cast<unsigned>(run.type) * kTlpCauseCount + static_cast<unsigned>(run.cause));
  }
  // The host memory of an aligned 4- or 8-byte word, or nullptr on a fault.
  uint8_t* map_word(uint64_t host_addr, size_t len);
  // What the host bridge maps at host_addr, or the device memory there (all of the rest of it).
  [[nodiscard]] std::span<uint8_t> map(uint64_t host_addr, size_t len) {
    if (!is_device_memory(host_addr)) return bridge_.map(host_addr, len);
    const uint64_t off = host_addr - kDeviceMemoryDma;
    return local_.subspan(off, std::min<uint64_t>(len, local_.size() - off));
  }

  TlpSink& sink_;
  const PcieConfig& config_;
  HostBridge& bridge_;
  std::span<uint8_t> local_;  // the device's own memory (empty: none)
  TlpCut mps_, mrrs_, completion_;
  bool defer_ = false;
  bool reads_cut_whole_ = false;  // reads_cut_whole(config_), as defer_counts() found
  CounterSnapshot held_;
  uint64_t held_cells_ = 0;  // bit type * kTlpCauseCount + cause: cells of held_ with counts
  static_assert(kTlpTypeCount * kTlpCauseCount <= 64);
};

}  // namespace softhca::pcie
