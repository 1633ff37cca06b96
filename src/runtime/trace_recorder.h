// SOFTHCA_TRACE: the taps that record every TLP and packet into a bounded ring of TraceEvents
// (trace_event.h), stamped by a TapClock. Memory is bounded: at most max_events events are kept
// (about 100 bytes each); when the ring is full the oldest event is overwritten and counted as
// dropped, so a long run keeps its most recent max_events events. Storage grows as events come,
// up to the bound. Thread-safe (one mutex, the time is read under it, so times never decrease
// along the ring).
// With CPU events on (SOFTHCA_TRACE), it also records what each CPU thread did in the library:
// post_send and poll_cq hits (from the verbs layer, through CpuTap) and doorbell rings and
// BlueFlame writes (the doorbell's TLP tap runs on the posting thread), each with the thread's id,
// for the per-thread tracks of the timeline.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "runtime/runtime.h"
#include "runtime/tap_clock.h"
#include "runtime/trace_event.h"

namespace softhca::runtime {

// Observer of the CPU side of the data path: the verbs layer calls it on the calling thread, at
// the start of ibv_post_send (before any doorbell) and after an ibv_poll_cq that found completions.
// Thread-safe; must not call back into verbs.
class CpuTap {
 public:
  virtual ~CpuTap() = default;
  virtual void on_cpu(CpuEventKind what, uint32_t object, uint32_t count) = 0;
};
// The process's CpuTap (SOFTHCA_TRACE's recorder), or null: the verbs layer looks once per opened
// context and wraps its post_send and poll_cq only when there is one, so no trace costs nothing.
[[nodiscard]] CpuTap* process_cpu_tap();
void set_process_cpu_tap(CpuTap* tap);
// The calling thread's Linux thread id (cached per thread).
[[nodiscard]] uint32_t current_tid();

class TraceRecorder final : public TlpTap, public PacketTap, public CpuTap {
 public:
  static constexpr size_t kDefaultMaxEvents = 1'000'000;

  // cpu_events: also record CPU-thread events (on_cpu, and a doorbell or BlueFlame event on the
  // ringing thread before each doorbell or BlueFlame TLP).
  TraceRecorder(TapClock& clock, size_t max_events = kDefaultMaxEvents, bool cpu_events = false);

  void on_tlp(uint64_t seq, uint32_t device, const pcie::Tlp& tlp) override;
  void on_packet(uint64_t seq, uint32_t device, PacketDirection dir, std::span<const uint8_t> packet) override;
  void on_cpu(CpuEventKind what, uint32_t object, uint32_t count) override;

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
  const bool cpu_events_;
  std::vector<TraceEvent> ring_;  // grows to max_events_, then wraps
  size_t next_ = 0;               // where the next event goes once the ring is full
  uint64_t dropped_ = 0;
};

}  // namespace softhca::runtime
