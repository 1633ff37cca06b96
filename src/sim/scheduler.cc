#include "sim/scheduler.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace softhca::sim {

namespace {
constexpr size_t kArity = 4;  // children of heap node i: 4i+1 .. 4i+4
}  // namespace

void Scheduler::throw_empty_callback() { throw std::invalid_argument("sim::Scheduler: empty callback"); }

void Scheduler::check_delay(Picoseconds delay) {
  if (delay < Picoseconds::zero()) throw std::invalid_argument("sim::Scheduler: negative delay");
}

EventHandle Scheduler::enqueue(Picoseconds at) {
  if (at < now_) throw std::invalid_argument("sim::Scheduler: event scheduled in the past");
  if (next_seq_ >> kSeqBits != 0) throw std::length_error("sim::Scheduler: sequence numbers exhausted");
  const uint32_t slot = take_slot();
  const uint64_t seq = next_seq_++;
  slots_[slot].seq = seq;
  const Entry e{(static_cast<Key>(at.count()) << 64) | ((seq << kSlotBits) | slot)};
  if (running_root_) {
    // The running event still sits at the root: the first event it schedules takes its place,
    // one sift down instead of a pop and a push (a chain of events costs half the heap work).
    running_root_ = false;
    sift_down(0, e);
    drop_stale_top();
  } else {
    heap_push(e);
  }
  ++live_;
  return EventHandle(seq, slot);
}

void Scheduler::settle() const {
  if (!running_root_) return;
  running_root_ = false;
  heap_pop();
  drop_stale_top();
}

bool Scheduler::is_pending(EventHandle h) const {
  return h.valid() && h.slot_ < slots_.size() && slots_[h.slot_].seq == h.seq_;
}

bool Scheduler::cancel(EventHandle h) {
  if (!is_pending(h)) return false;
  settle();
  free_slot(h.slot_);
  --live_;
  drop_stale_top();
  compact_if_mostly_stale();
  return true;
}

bool Scheduler::run_one() {
  settle();
  if (heap_.empty()) return false;
  const Entry e = heap_.front();
  // The top is live by the invariant. Move the callback out and free its slot before running, so
  // the callback sees the event as no longer pending and may reuse the slot (and slots_ may grow).
  // Its entry stays at the root while it runs (running_root_), for enqueue() to replace.
  Callback cb = std::move(slots_[e.slot()].cb);
  free_slot(e.slot());
  --live_;
  now_ = Picoseconds(e.at_ps());
  ++events_run_;
  running_root_ = true;
  cb();
  settle();
  return true;
}

uint64_t Scheduler::step() {
  settle();
  if (heap_.empty()) return 0;
  const int64_t at = heap_.front().at_ps();
  uint64_t n = 0;
  while (!heap_.empty() && heap_.front().at_ps() == at) {
    run_one();
    ++n;
  }
  return n;
}

uint64_t Scheduler::run_until(Picoseconds until) {
  if (until < now_) throw std::invalid_argument("sim::Scheduler: run_until into the past");
  settle();
  uint64_t n = 0;
  while (!heap_.empty() && heap_.front().at_ps() <= until.count()) {
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
  settle();
  if (heap_.empty()) return std::nullopt;
  return Picoseconds(heap_.front().at_ps());
}

void Scheduler::heap_push(Entry e) {
  size_t i = heap_.size();
  heap_.push_back(e);
  while (i > 0) {
    const size_t parent = (i - 1) / kArity;
    if (!runs_before(e, heap_[parent])) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = e;
}

void Scheduler::heap_pop() const {
  const Entry last = heap_.back();
  heap_.pop_back();
  if (!heap_.empty()) sift_down(0, last);
}

// Places e at hole i or below: moves the earliest child up while it runs before e.
void Scheduler::sift_down(size_t i, Entry e) const {
  const size_t n = heap_.size();
  for (;;) {
    const size_t first = i * kArity + 1;
    if (first >= n) break;
    // The earliest child, chosen without branches (the comparisons are unpredictable).
    size_t best = first;
    Key best_key = heap_[first].key;
    const size_t end = std::min(first + kArity, n);
    for (size_t c = first + 1; c < end; ++c) {
      const Key k = heap_[c].key;
      const bool earlier = k < best_key;
      best = earlier ? c : best;
      best_key = earlier ? k : best_key;
    }
    if (!(best_key < e.key)) break;
    heap_[i].key = best_key;
    i = best;
  }
  heap_[i] = e;
}

void Scheduler::drop_stale_top() const {
  while (!heap_.empty() && !live(heap_.front())) heap_pop();
}

// Lazy deletion keeps cancelled entries in the heap; rebuild once they outnumber the live ones,
// so memory stays O(pending) under cancel-heavy use (retransmit timers re-armed per ACK).
void Scheduler::compact_if_mostly_stale() {
  constexpr size_t kMinHeapForCompaction = 64;
  settle();
  if (heap_.size() < kMinHeapForCompaction || heap_.size() - live_ <= live_) return;
  std::erase_if(heap_, [this](const Entry& e) { return !live(e); });
  // Floyd's heap construction: sift down every inner node, last first.
  for (size_t i = heap_.size() / kArity + 1; i-- > 0;) {
    if (i < heap_.size()) sift_down(i, heap_[i]);
  }
}

uint32_t Scheduler::take_slot() {
  if (!free_slots_.empty()) {
    const uint32_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  if (slots_.size() >> kSlotBits != 0) throw std::length_error("sim::Scheduler: too many pending events");
  slots_.emplace_back();
  return static_cast<uint32_t>(slots_.size() - 1);
}

void Scheduler::free_slot(uint32_t slot) {
  slots_[slot].seq = 0;
  slots_[slot].cb = nullptr;
  free_slots_.push_back(slot);
}

}  // namespace softhca::sim
