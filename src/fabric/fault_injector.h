// A faulty link (docs/reliability.md): what a carrier puts packets through when faults are on. Per
// packet, in this order: lost; corrupted (one byte the ICRC covers is flipped, and on native IB the
// per-hop VCRC is recomputed, as a switch that corrupted the packet inside would: only the
// end-to-end ICRC can then catch it); duplicated (two copies back to back); held back to arrive
// after the next packet (reordered; released alone after kReorderHold if none follows); and, with
// a delay, everything arrives `delay` later, in order. Deterministic: the same seed, component
// name and sequence of packets give the same faults, whatever the timing.
// Not thread-safe: its carrier serialises calls. Times in picoseconds on the owner's clock.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "base/units.h"
#include "fabric/fault_spec.h"
#include "sim/random_stream.h"

namespace softhca::fabric {

// What the packets on the link look like, so that a corruption hits a byte the ICRC covers.
enum class WireFormat : uint8_t {
  kNativeIb,  // LRH [GRH] BTH ... ICRC VCRC
  kRoceIpv4,  // IPv4 UDP BTH ... ICRC (roce.h)
};

// What the injector did, since it was made.
struct FaultCounters {
  uint64_t offered = 0;     // packets put on the link
  uint64_t lost = 0;
  uint64_t duplicated = 0;  // extra copies made
  uint64_t reordered = 0;   // packets held back behind the next one
  uint64_t corrupted = 0;
  uint64_t delayed = 0;     // packets (copies included) that waited out the delay
  FaultCounters& operator+=(const FaultCounters& o);
  bool operator==(const FaultCounters&) const = default;
};
// Calls fn(name, value) for each counter, with the names of the SOFTHCA_STATS dump ("faults").
void for_each_counter(const FaultCounters& c, const std::function<void(std::string_view, uint64_t)>& fn);

class FaultInjector {
 public:
  // A reordered packet with nothing behind it still arrives, this much later: long enough to be
  // overtaken by a back-to-back packet, far below any RC ACK timeout (IBA 9.7.6.1.3: >= 4.096 us
  // * 2^1; live QPs use 2^8 and up).
  static constexpr Picoseconds kReorderHold = 100_us;

  using Emit = std::function<void(std::span<const uint8_t>)>;

  // `component` names the link for its random streams (sim::RandomStream::for_component).
  FaultInjector(const FaultSpec& spec, WireFormat format, std::string_view component);

  // One packet onto the link at `now`. What leaves the link now goes to emit, in order; emit must
  // not call back into this injector.
  void send(std::span<const uint8_t> packet, Picoseconds now, const Emit& emit);
  // Packets held (delayed, or reordered with none behind them) that are due at `now`, in order.
  void release(Picoseconds now, const Emit& emit);
  // When the earliest held packet is due; Picoseconds::max() when none is held.
  [[nodiscard]] Picoseconds next_due() const;
  [[nodiscard]] size_t held() const { return delayed_.size() + aside_.size(); }
  [[nodiscard]] const FaultCounters& counters() const { return counters_; }
  [[nodiscard]] const FaultSpec& spec() const { return spec_; }

 private:
  struct Held {
    Picoseconds due{0};
    std::vector<uint8_t> bytes;
  };
  // Flips one byte that the ICRC covers (IBA 7.8.1: everything from the BTH, less BTH resv8a).
  void corrupt(std::span<uint8_t> bytes);
  // A packet leaving the link: now, or after the delay.
  void out(std::span<const uint8_t> bytes, Picoseconds now, const Emit& emit);
  void release_aside(Picoseconds now, const Emit& emit);

  FaultSpec spec_;
  WireFormat format_;
  sim::RandomStream decide_;  // four draws per packet: loss, corrupt, dup, reorder
  sim::RandomStream bytes_;   // where and how a corruption hits
  FaultCounters counters_;
  std::vector<Held> aside_;   // the reordered packet (and its duplicate), waiting for the next one
  Picoseconds aside_due_{0};
  std::deque<Held> delayed_;  // in order of due time (the delay is fixed)
  std::vector<uint8_t> scratch_;
};

}  // namespace softhca::fabric
