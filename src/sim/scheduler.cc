#include "sim/scheduler.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace softhca::sim {


EventHandle Scheduler::schedule_at(Picoseconds at, Callback cb) {
  if (at < now_) throw std::invalid_argument("sim::Scheduler: event scheduled in the past");
  if (!cb) throw std::invalid_argument("sim::Scheduler: empty callback");
  uint32_t slot = take_slot();
  uint64_t seq = next_seq_++;
  slots_[slot].seq = seq;
  slots_[slot].cb = std::move(cb);
  heap_.push_back(Entry{at.count(), seq, slot});
  std::push_heap(heap_.begin(), heap_.end(), RunsAfter{});
  ++live_;
  return EventHandle(seq, slot);
}

EventHandle Scheduler::schedule_after(Picoseconds delay, Callback cb) {
  if (delay < Picoseconds::zero()) throw std::invalid_argument("sim::Scheduler: negative delay");
  return schedule_at(now_ + delay, std::move(cb));
}

bool Scheduler::is_pending(EventHandle h) const {
  return h.valid() && h.slot_ < slots_.size() && slots_[h.slot_].seq == h.seq_;
}

bool Scheduler::cancel(EventHandle h) {
  if (!is_pending(h)) return false;
  free_slot(h.slot_);
  --live_;
  drop_stale_top();
  compact_if_mostly_stale();
  return true;
}

bool Scheduler::run_one() {
  if (heap_.empty()) return false;
  std::pop_heap(heap_.begin(), heap_.end(), RunsAfter{});
  Entry e = heap_.back();
  heap_.pop_back();
  // The top is live by the invariant. Free its slot before running, so the callback sees the
  // event as no longer pending and may reuse the slot.
  Callback cb = std::move(slots_[e.slot].cb);
  free_slot(e.slot);
  --live_;
  now_ = Picoseconds(e.at_ps);
  drop_stale_top();
  ++events_run_;
  cb();
  return true;
}

uint64_t Scheduler::step() {
  if (heap_.empty()) return 0;
  const int64_t at = heap_.front().at_ps;
  uint64_t n = 0;
  while (!heap_.empty() && heap_.front().at_ps == at) {
    run_one();
    ++n;
  }
  return n;
}

uint64_t Scheduler::run_until(Picoseconds until) {
  if (until < now_) throw std::invalid_argument("sim::Scheduler: run_until into the past");
  uint64_t n = 0;
  while (!heap_.empty() && heap_.front().at_ps <= until.count()) {
    run_one();
    ++n;
  }
  now_ = until;
  return n;
}

uint64_t Scheduler::run() {
  uint64_t n = 0;
  while (run_one()) ++n;
  return n;
}

std::optional<Picoseconds> Scheduler::next_event_time() const {
  if (heap_.empty()) return std::nullopt;
  return Picoseconds(heap_.front().at_ps);
}

void Scheduler::drop_stale_top() {
  while (!heap_.empty() && !live(heap_.front())) {
    std::pop_heap(heap_.begin(), heap_.end(), RunsAfter{});
    heap_.pop_back();
  }
}

// Lazy deletion keeps cancelled entries in the heap; rebuild once they outnumber the live ones,
// so memory stays O(pending) under cancel-heavy use (retransmit timers re-armed per ACK).
void Scheduler::compact_if_mostly_stale() {
  constexpr size_t kMinHeapForCompaction = 64;
  if (heap_.size() < kMinHeapForCompaction || heap_.size() - live_ <= live_) return;
  std::erase_if(heap_, [this](const Entry& e) { return !live(e); });
  std::make_heap(heap_.begin(), heap_.end(), RunsAfter{});
}

uint32_t Scheduler::take_slot() {
  if (!free_slots_.empty()) {
    uint32_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  slots_.emplace_back();
  return static_cast<uint32_t>(slots_.size() - 1);
}

void Scheduler::free_slot(uint32_t slot) {
  slots_[slot].seq = 0;
  slots_[slot].cb = nullptr;
  free_slots_.push_back(slot);
}

}  // namespace softhca::sim
