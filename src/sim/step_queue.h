// The timing model's queue of ready steps: 128-bit keys time << 64 | chain << 32 | step, popped
// in key order (time, then chain, then step). Most steps are scheduled a few nanoseconds to a few
// hundred nanoseconds ahead (PCIe and IB latencies, HCA unit costs), a few dozen at a time: a
// timing wheel of 64 slots of 4.096 ns holds those, each slot a few keys kept sorted, and a 4-ary
// heap holds the rest (later than the wheel's window, or a full slot). Pushing into the wheel
// costs a shift and a store or two, popping a bit scan; a pop compares the wheel's earliest key
// with the heap's, so either may hold any key and the order is exact whatever the times.
// Times are non-negative picoseconds, never before the last popped key's (the model does not
// schedule into the past). Leaves out: removing anything but the earliest key.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace softhca::sim {

class StepQueue {
 public:
  __extension__ using Key = unsigned __int128;  // time << 64 | chain << 32 | step

  static Key key(uint64_t time, uint32_t chain, uint32_t step) {
    // The low half built in 64 bits: GCC builds a 128-bit shift of a 32-bit value poorly.
    return (static_cast<Key>(time) << 64) | ((uint64_t{chain} << 32) | step);
  }
  static uint64_t time_of(Key k) { return static_cast<uint64_t>(k >> 64); }
  static uint32_t chain_of(Key k) { return static_cast<uint32_t>(static_cast<uint64_t>(k) >> 32); }
  static uint32_t step_of(Key k) { return static_cast<uint32_t>(k); }

  [[nodiscard]] bool empty() const { return occupied_ == 0 && heap_front_ == kNoKey; }
  // The earliest key (not empty).
  [[nodiscard]] Key front() const {
    if (occupied_ == 0) return heap_front_;
    const Key k = slot_front(first_slot());
    return k < heap_front_ ? k : heap_front_;
  }

  // A key at or after the last popped key's time.
  void push(Key k) {
    const uint64_t tick = time_of(k) >> kSlotShift;
    if (tick - tick_ < kSlots) {
      const size_t s = tick & (kSlots - 1);
      if (count_[s] < kSlotKeys) {
        insert(s, k);
        return;
      }
    }
    heap_push(k);
  }

  // Removes the earliest key if its time is before `limit`; true if it did.
  bool pop_before(uint64_t limit, Key& out) {
    if (occupied_ != 0) {
      const size_t s = first_slot();
      const Key k = slot_front(s);
      if (k < heap_front_) {
        if (time_of(k) >= limit) return false;
        if (--count_[s] == 0) occupied_ &= ~(uint64_t{1} << s);
        return popped(k, out);
      }
    }
    // The heap's (kNoKey, when empty, is later than any limit).
    if (time_of(heap_front_) >= limit) return false;
    const Key k = heap_front_;
    heap_pop();
    return popped(k, out);
  }

 private:
  static constexpr int kSlotShift = 12;     // a slot covers 2^12 ps (4.096 ns) ...
  static constexpr uint64_t kSlots = 64;    // ... and the wheel 64 of them (262 ns): one bit each
  static constexpr uint32_t kSlotKeys = 4;  // keys a slot holds; more go to the heap

  static constexpr Key kNoKey = ~Key{0};  // heap_front_ of an empty heap: after every key

  bool popped(Key k, Key& out) {
    tick_ = time_of(k) >> kSlotShift;
    out = k;
    return true;
  }
  // A slot's keys are in keys_[s], latest first, so its earliest is the last.
  [[nodiscard]] Key slot_front(size_t s) const { return keys_[s][count_[s] - 1]; }
  void insert(size_t s, Key k) {
    Key* keys = keys_[s];
    uint32_t i = count_[s]++;
    for (; i > 0 && keys[i - 1] < k; --i) keys[i] = keys[i - 1];
    keys[i] = k;
    occupied_ |= uint64_t{1} << s;
  }
  // The slot of the earliest tick in the wheel (occupied_ != 0): the wheel's keys all lie in the
  // 64 ticks from tick_ on (none is before the last popped key), so the first occupied slot from
  // tick_'s, going round, holds the earliest.
  [[nodiscard]] size_t first_slot() const {
    const auto from = static_cast<int>(tick_ & (kSlots - 1));
    return static_cast<size_t>(std::countr_zero(std::rotr(occupied_, from)) + from) & (kSlots - 1);
  }

  void heap_push(Key k);
  void heap_pop();
  void sift_down(size_t i, Key k);

  uint64_t tick_ = 0;      // the last popped key's time >> kSlotShift
  uint64_t occupied_ = 0;  // bit s: slot s holds keys
  uint32_t count_[kSlots] = {};
  Key keys_[kSlots][kSlotKeys] = {};
  std::vector<Key> heap_;  // 4-ary min-heap of the keys not in the wheel
  Key heap_front_ = kNoKey;  // its earliest, kept here: every pop compares with it
};

}  // namespace softhca::sim
