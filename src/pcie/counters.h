// PCIe counters: TLPs, payload bytes and wire bytes per direction, type and cause.
// Updated with relaxed atomics (any thread may be acting as the device); read as a snapshot.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "pcie/tlp.h"

namespace softhca::pcie {

struct CounterCell {
  uint64_t tlps = 0;
  uint64_t payload_bytes = 0;
  uint64_t wire_bytes = 0;
  CounterCell& operator+=(const CounterCell& o) {
    tlps += o.tlps;
    payload_bytes += o.payload_bytes;
    wire_bytes += o.wire_bytes;
    return *this;
  }
};

// A plain copy of the counters at one moment; what tests and tools look at.
class CounterSnapshot {
 public:
  [[nodiscard]] const CounterCell& at(TlpType t, TlpCause c) const { return cells_[idx(t)][idx(c)]; }
  CounterCell& at(TlpType t, TlpCause c) { return cells_[idx(t)][idx(c)]; }
  [[nodiscard]] uint64_t tlps(TlpType t, TlpCause c) const { return at(t, c).tlps; }
  [[nodiscard]] CounterCell by_cause(TlpCause c) const;
  [[nodiscard]] CounterCell by_type(TlpType t) const;
  // Wire bytes in one direction (MWr by cause: CPU causes are downstream, device causes upstream).
  [[nodiscard]] uint64_t wire_bytes(Direction d) const;
  [[nodiscard]] std::string to_json() const;
  CounterSnapshot operator-(const CounterSnapshot& base) const;

 private:
  static constexpr size_t idx(TlpType t) { return static_cast<size_t>(t); }
  static constexpr size_t idx(TlpCause c) { return static_cast<size_t>(c); }
  std::array<std::array<CounterCell, kTlpCauseCount>, kTlpTypeCount> cells_{};
};

// The direction a TLP of this type and cause travels.
Direction direction_of(TlpType t, TlpCause c);

class Counters final : public TlpSink {
 public:
  void on_tlp(const Tlp& tlp) override;
  // Counting is all it does: a port may hand it runs (same totals, one update per run).
  [[nodiscard]] bool counts_only() const override { return true; }
  void on_tlp_run(const TlpRun& run) override;
  [[nodiscard]] CounterSnapshot snapshot() const;
  void reset();

 private:
  struct AtomicCell {
    std::atomic<uint64_t> tlps{0}, payload_bytes{0}, wire_bytes{0};
  };
  std::array<std::array<AtomicCell, kTlpCauseCount>, kTlpTypeCount> cells_{};
};

}  // namespace softhca::pcie
