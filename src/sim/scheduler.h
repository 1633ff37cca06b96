// Discrete-event scheduler: virtual time in integer picoseconds, events run in (time, sequence)
// order, so two events at the same time run in the order they were scheduled. Cancel by handle.
// Single-threaded and self-contained: no wall clock, no globals, nothing shared between instances.
// Leaves out resources and queues (built on top of it) and parallel simulation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "base/units.h"

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
  using Callback = std::function<void()>;

  Scheduler() = default;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Virtual time: the time of the event running now, or the last run_until() bound.
  [[nodiscard]] Picoseconds now() const { return now_; }

  // Schedules cb to run at `at` (>= now()) or `delay` (>= 0) from now. Throws
  // std::invalid_argument for a time in the past or an empty callback. A callback may schedule
  // and cancel events, including at the current time (they run after the current one).
  EventHandle schedule_at(Picoseconds at, Callback cb);
  EventHandle schedule_after(Picoseconds delay, Callback cb);

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
  [[nodiscard]] size_t pending() const { return live_; }
  [[nodiscard]] bool empty() const { return live_ == 0; }
  [[nodiscard]] uint64_t events_run() const { return events_run_; }

 private:
  struct Entry {
    int64_t at_ps;
    uint64_t seq;
    uint32_t slot;
  };
  struct Slot {
    uint64_t seq = 0;  // the event stored here; 0 = free
    Callback cb;
  };

  // Heap order: std::*_heap keep the "largest" on top, so "a runs after b" puts the earliest there.
  struct RunsAfter {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.at_ps != b.at_ps ? a.at_ps > b.at_ps : a.seq > b.seq;
    }
  };
  [[nodiscard]] bool live(const Entry& e) const { return slots_[e.slot].seq == e.seq; }
  // Invariant after every public call: the heap is empty or its top entry is live.
  void drop_stale_top();
  void compact_if_mostly_stale();
  uint32_t take_slot();
  void free_slot(uint32_t slot);

  Picoseconds now_{0};
  uint64_t next_seq_ = 1;
  size_t live_ = 0;
  uint64_t events_run_ = 0;
  std::vector<Entry> heap_;  // binary heap, earliest (time, seq) on top
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
};

}  // namespace softhca::sim
