// PCIe counters: TLPs, payload bytes and wire bytes per direction, type and cause.
// Updated with relaxed atomics (any thread may be acting as the device); read as a snapshot.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

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
  // Every type and cause together.
  [[nodiscard]] CounterCell total() const;
  // Wire bytes in one direction (MWr by cause: CPU causes are downstream, device causes upstream).
  [[nodiscard]] uint64_t wire_bytes(Direction d) const;
  [[nodiscard]] std::string to_json() const;
  CounterSnapshot operator-(const CounterSnapshot& base) const;
  CounterSnapshot& operator+=(const CounterSnapshot& other);

 private:
  static constexpr size_t idx(TlpType t) { return static_cast<size_t>(t); }
  static constexpr size_t idx(TlpCause c) { return static_cast<size_t>(c); }
  std::array<std::array<CounterCell, kTlpCauseCount>, kTlpTypeCount> cells_{};
};

// The direction a TLP of this type and cause travels.
Direction direction_of(TlpType t, TlpCause c);

// What Counters counts into: plain atomics, no pointers, all-zero bytes are all-zero counts, so
// it may live in memory shared between processes (the host segment keeps one per process, read by
// `softhca stats --live`, docs/observability.md).
struct CounterCells {
  struct Cell {
    std::atomic<uint64_t> tlps{0}, payload_bytes{0}, wire_bytes{0};
  };
  std::array<std::array<Cell, kTlpCauseCount>, kTlpTypeCount> cells{};

  [[nodiscard]] CounterSnapshot snapshot() const;
  void reset();
};
static_assert(std::is_standard_layout_v<CounterCells>);

class Counters final : public TlpSink {
 public:
  Counters() = default;
  Counters(const Counters&) = delete;
  Counters& operator=(const Counters&) = delete;

  void on_tlp(const Tlp& tlp) override;
  // Counting is all it does: a port may hand it runs (same totals, one update per run).
  [[nodiscard]] bool counts_only() const override { return true; }
  void on_tlp_run(const TlpRun& run) override;
  [[nodiscard]] CounterSnapshot snapshot() const { return cells_->snapshot(); }
  void reset() { cells_->reset(); }
  // From now on counts into `storage` (which must outlive this object, or the next call), adding
  // to what it holds; counts made so far stay where they were.
  void count_into(CounterCells& storage) { cells_ = &storage; }
  // Back to its own cells.
  void count_into_own() { cells_ = &own_; }

 private:
  CounterCells own_;
  CounterCells* cells_ = &own_;
};

}  // namespace softhca::pcie
