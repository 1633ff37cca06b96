#include "sim/step_queue.h"

namespace softhca::sim {

namespace {
constexpr size_t kArity = 4;

// a < b as 0 or 1, from the borrow of a - b: keys are below 2^127 (times are never negative), so
// the difference has its top bit set exactly when a < b. Arithmetic, so that the compiler cannot
// turn the heap's unpredictable comparisons into branches.
__extension__ using Key128 = unsigned __int128;
inline size_t before(Key128 a, Key128 b) { return static_cast<size_t>((a - b) >> 127); }
}  // namespace

void StepQueue::heap_push(Key k) {
  size_t i = heap_.size();
  heap_.push_back(k);
  while (i > 0) {
    const size_t parent = (i - 1) / kArity;
    if (!(k < heap_[parent])) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = k;
  heap_front_ = heap_.front();
}

void StepQueue::heap_pop() {
  const Key last = heap_.back();
  heap_.pop_back();
  if (heap_.empty()) {
    heap_front_ = kNoKey;
    return;
  }
  sift_down(0, last);
  heap_front_ = heap_.front();
}

// Places k at hole i or below: moves the earliest child up while it comes before k.
void StepQueue::sift_down(size_t i, Key k) {
  const size_t n = heap_.size();
  for (;;) {
    const size_t first = i * kArity + 1;
    if (first >= n) break;
    // The earliest child, chosen without branches (the comparisons are unpredictable); four
    // children as two pairs and their winners, so the comparisons do not wait for each other.
    size_t best = first;
    Key best_key = heap_[first];
    if (first + kArity <= n) {
      // Indices, not keys, are selected, then the winner is loaded.
      const Key* ch = &heap_[first];
      const size_t ab = before(ch[1], ch[0]);
      const size_t cd = 2 + before(ch[3], ch[2]);
      const size_t m = size_t{0} - before(ch[cd], ch[ab]);
      const size_t win = (cd & m) | (ab & ~m);
      best = first + win;
      best_key = ch[win];
    } else {
      for (size_t c = first + 1; c < n; ++c) {
        const Key key = heap_[c];
        const bool earlier = key < best_key;
        best = earlier ? c : best;
        best_key = earlier ? key : best_key;
      }
    }
    if (!(best_key < k)) break;
    heap_[i] = best_key;
    i = best;
  }
  heap_[i] = k;
}

}  // namespace softhca::sim
