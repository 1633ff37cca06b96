// Discrete-event scheduler: virtual time in integer picoseconds, events run in (time, sequence)
// order, so two events at the same time run in the order they were scheduled. Cancel by handle.
// Single-threaded and self-contained: no wall clock, no globals, nothing shared between instances.
// Leaves out resources and queues (built on top of it: timing_model.h) and parallel simulation.
// Speed: a 4-ary heap of 16-byte entries and callbacks stored inline (inline_callback.h), so an
// event costs no allocation; bench/sim_bench.cc measures events per second.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "base/units.h"
#include "sim/inline_callback.h"

namespace softhca::sim {

// Names one scheduled event. A handle stays harmless after its event ran or was cancelled:
// cancel() then returns false and is_pending() false. A default handle names no event.
class EventHandle {
 public:
  constexpr EventHandle() = default;
  [[nodiscard]] constexpr bool valid() const { return seq_ != 0; }
  constexpr bool operator==(const EventHandle&) const = default;

 private:
  friend class Scheduler;
  constexpr EventHandle(uint64_t seq, uint32_t slot) : seq_(seq), slot_(slot) {}
  uint64_t seq_ = 0;   // the event's sequence number, unique within its scheduler; 0 = none
  uint32_t slot_ = 0;  // where its callback is stored
};

class Scheduler {
 public:
  // Any void() callable; small ones are stored without allocation. std::function converts.
  using Callback = InlineCallback;

  Scheduler() = default;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Virtual time: the time of the event running now, or the last run_until() bound.
  [[nodiscard]] Picoseconds now() const { return now_; }

  // Schedules cb to run at `at` (>= now()) or `delay` (>= 0) from now. Throws
  // std::invalid_argument for a time in the past or an empty callback. A callback may schedule
  // and cancel events, including at the current time (they run after the current one).
  // Any callable is stored in place (no intermediate moves); nullptr and empty std::functions
  // are rejected like an empty Callback.
  template <class F>
  EventHandle schedule_at(Picoseconds at, F&& cb) {
    if constexpr (std::is_same_v<std::decay_t<F>, std::nullptr_t>) {
      throw_empty_callback();
    } else {
      check_callable(cb);
      const EventHandle h = enqueue(at);
      if constexpr (std::is_same_v<std::decay_t<F>, Callback>) {
        slots_[h.slot_].cb = std::move(cb);
      } else {
        slots_[h.slot_].cb.emplace(std::forward<F>(cb));
      }
      return h;
    }
  }
  template <class F>
  EventHandle schedule_after(Picoseconds delay, F&& cb) {
    check_delay(delay);
    return schedule_at(now_ + delay, std::forward<F>(cb));
  }

  // Removes a pending event; returns false if it already ran, was cancelled, or is the one
  // running now. O(1); the heap entry is dropped lazily.
  bool cancel(EventHandle h);
  [[nodiscard]] bool is_pending(EventHandle h) const;

  // Runs the next event, advancing now() to its time. Returns false when nothing is pending.
  bool run_one();
  // Runs every event at the next event time (including ones scheduled for that same time while
  // running). Returns how many ran.
  uint64_t step();
  // Runs every event with time <= until (which must be >= now()), then sets now() = until.
  uint64_t run_until(Picoseconds until);
  // Runs until nothing is pending.
  uint64_t run();

  [[nodiscard]] std::optional<Picoseconds> next_event_time() const;
  // The next event's time in ps, or INT64_MAX when nothing is pending (cheap, for run loops).
  [[nodiscard]] int64_t next_event_ps() const {
    settle();
    return heap_.empty() ? std::numeric_limits<int64_t>::max() : heap_.front().at_ps();
  }
  [[nodiscard]] size_t pending() const { return live_; }
  [[nodiscard]] bool empty() const { return live_ == 0; }
  [[nodiscard]] uint64_t events_run() const { return events_run_; }

 private:
  // 16 bytes, so four children share one cache line of the 4-ary heap: one 128-bit key, the
  // event time (never negative) over its sequence number (kSeqBits) over its slot (kSlotBits).
  // Sequence numbers are unique, so comparing keys is the (time, sequence) order, branch-free.
  static constexpr int kSlotBits = 24;             // at most 16 M events pending at once
  static constexpr int kSeqBits = 64 - kSlotBits;  // 2^40 events per scheduler (hours at full speed)
  __extension__ using Key = unsigned __int128;
  struct Entry {
    Key key;
    [[nodiscard]] int64_t at_ps() const { return static_cast<int64_t>(key >> 64); }
    [[nodiscard]] uint64_t seq() const { return static_cast<uint64_t>(key) >> kSlotBits; }
    [[nodiscard]] uint32_t slot() const {
      return static_cast<uint32_t>(static_cast<uint64_t>(key) & ((uint64_t{1} << kSlotBits) - 1));
    }
  };
  struct Slot {
    uint64_t seq = 0;  // the event stored here; 0 = free
    Callback cb;
  };

  template <class F>
  static void check_callable(const F& cb) {
    using D = std::decay_t<F>;
    if constexpr (std::is_pointer_v<D> || std::is_same_v<D, std::function<void()>> ||
                         std::is_same_v<D, Callback>) {
      if (!cb) throw_empty_callback();
    }
  }
  [[noreturn]] static void throw_empty_callback();
  static void check_delay(Picoseconds delay);
  // Takes a slot and a sequence number for an event at `at` and pushes it; the caller stores the
  // callback in the slot.
  EventHandle enqueue(Picoseconds at);

  static bool runs_before(const Entry& a, const Entry& b) { return a.key < b.key; }
  [[nodiscard]] bool live(const Entry& e) const { return slots_[e.slot()].seq == e.seq(); }
  void heap_push(Entry e);
  void heap_pop() const;  // removes the top entry
  void sift_down(size_t i, Entry e) const;
  // Invariant after every public call: the heap is empty or its top entry is live, except that
  // while an event runs its own (already freed) entry stays at the root (running_root_) until
  // the first event it schedules replaces it or settle() pops it. Observers call settle() first;
  // it is const because it changes no observable state.
  void drop_stale_top() const;
  void settle() const;
  void compact_if_mostly_stale();
  uint32_t take_slot();
  void free_slot(uint32_t slot);

  Picoseconds now_{0};
  uint64_t next_seq_ = 1;
  size_t live_ = 0;
  uint64_t events_run_ = 0;
  mutable std::vector<Entry> heap_;  // 4-ary min-heap on (time, sequence); the earliest at index 0
  mutable bool running_root_ = false;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
};

}  // namespace softhca::sim
