// SOFTHCA_TRACE: the taps that record every TLP and packet into a bounded ring of TraceEvents
// (trace_event.h), stamped by a TapClock. Memory is bounded: at most max_events events are kept
// (about 100 bytes each); when the ring is full the oldest event is overwritten and counted as
// dropped, so a long run keeps its most recent max_events events. Storage grows as events come,
// up to the bound. Thread-safe (one mutex, the time is read under it, so times never decrease
// along the ring).
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "runtime/runtime.h"
#include "runtime/tap_clock.h"
#include "runtime/trace_event.h"

namespace softhca::runtime {

class TraceRecorder final : public TlpTap, public PacketTap {
 public:
  static constexpr size_t kDefaultMaxEvents = 1'000'000;

  TraceRecorder(TapClock& clock, size_t max_events = kDefaultMaxEvents);

  void on_tlp(uint64_t seq, uint32_t device, const pcie::Tlp& tlp) override;
  void on_packet(uint64_t seq, uint32_t device, PacketDirection dir, std::span<const uint8_t> packet) override;

  // The kept events, oldest first.
  [[nodiscard]] std::vector<TraceEvent> events();
  // Events overwritten because the ring was full.
  [[nodiscard]] uint64_t dropped();
  [[nodiscard]] size_t max_events() const { return max_events_; }
  // Forgets every event (the clock keeps running).
  void clear();

 private:
  void push_locked(TraceEvent& e);

  std::mutex mu_;
  TapClock& clock_;
  const size_t max_events_;
  std::vector<TraceEvent> ring_;  // grows to max_events_, then wraps
  size_t next_ = 0;               // where the next event goes once the ring is full
  uint64_t dropped_ = 0;
};

}  // namespace softhca::runtime
