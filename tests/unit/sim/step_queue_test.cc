// The timing model's step queue: keys come out in (time, chain, step) order wherever they were
// kept (a wheel slot, or the heap behind it), including keys pushed at the current time after a
// later one, keys past the wheel's window and keys that do not fit in their slot.
#include "sim/step_queue.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <random>
#include <vector>

namespace softhca::sim {
namespace {

using Key = StepQueue::Key;
constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();

// Pops everything; the keys in the order they came out.
std::vector<Key> drain(StepQueue& q) {
  std::vector<Key> out;
  Key k{};
  while (q.pop_before(kNoLimit, k)) out.push_back(k);
  return out;
}

TEST(StepQueue, KeysComeOutByTimeThenChainThenStep) {
  StepQueue q;
  q.push(StepQueue::key(5000, 2, 0));
  q.push(StepQueue::key(5000, 1, 7));
  q.push(StepQueue::key(4000, 9, 9));
  q.push(StepQueue::key(5000, 1, 3));
  // Expect: the earliest time first, then by chain, then by step.
  const std::vector<Key> want{StepQueue::key(4000, 9, 9), StepQueue::key(5000, 1, 3), StepQueue::key(5000, 1, 7),
                              StepQueue::key(5000, 2, 0)};
  EXPECT_EQ(drain(q), want);
  EXPECT_TRUE(q.empty());
}

TEST(StepQueue, AKeyPushedAtTheCurrentTimeCanComeBeforeOnesAlreadyWaitingThere) {
  StepQueue q;
  q.push(StepQueue::key(1000, 3, 0));
  q.push(StepQueue::key(1000, 5, 0));
  Key k{};
  ASSERT_TRUE(q.pop_before(kNoLimit, k));
  EXPECT_EQ(k, StepQueue::key(1000, 3, 0));
  // Expect: a step scheduled now by a smaller chain runs before chain 5, still waiting at 1000.
  q.push(StepQueue::key(1000, 4, 1));
  ASSERT_TRUE(q.pop_before(kNoLimit, k));
  EXPECT_EQ(k, StepQueue::key(1000, 4, 1));
  ASSERT_TRUE(q.pop_before(kNoLimit, k));
  EXPECT_EQ(k, StepQueue::key(1000, 5, 0));
}

TEST(StepQueue, KeysPastTheWheelAndBeyondAFullSlotKeepTheirOrder) {
  StepQueue q;
  // Far past the wheel's 262 ns window, and ten keys within one 4 ns slot (more than it holds).
  q.push(StepQueue::key(10'000'000, 0, 0));
  q.push(StepQueue::key(1'000'000, 0, 0));
  for (uint32_t c = 10; c > 0; --c) q.push(StepQueue::key(2000 + c, c, 0));
  std::vector<Key> want;
  for (uint32_t c = 1; c <= 10; ++c) want.push_back(StepQueue::key(2000 + c, c, 0));
  want.push_back(StepQueue::key(1'000'000, 0, 0));
  want.push_back(StepQueue::key(10'000'000, 0, 0));
  // Expect: the wheel's keys and the heap's interleave exactly.
  EXPECT_EQ(drain(q), want);
}

TEST(StepQueue, PopBeforeLeavesAKeyAtTheLimitInPlace) {
  StepQueue q;
  q.push(StepQueue::key(3000, 1, 1));
  Key k{};
  // Expect: not before 3000, so it stays; the front still names it.
  EXPECT_FALSE(q.pop_before(3000, k));
  EXPECT_FALSE(q.empty());
  EXPECT_EQ(q.front(), StepQueue::key(3000, 1, 1));
  EXPECT_TRUE(q.pop_before(3001, k));
  EXPECT_EQ(k, StepQueue::key(3000, 1, 1));
  EXPECT_TRUE(q.empty());
}

TEST(StepQueue, PushesNeverBeforeTheLastPopComeOutAsAPriorityQueueGivesThem) {
  // The timing model's use: each pop may be followed by pushes at or after its time, some at the
  // same time, most a few ns to a few hundred ns later, a few much later; limits cut pops short.
  std::mt19937_64 rng(20240601);
  StepQueue q;
  std::priority_queue<Key, std::vector<Key>, std::greater<>> ref;
  uint64_t now = 0;
  uint32_t next_chain = 0;
  for (int round = 0; round < 200000; ++round) {
    const int pushes = static_cast<int>(rng() % 3);
    for (int i = 0; i < pushes; ++i) {
      const uint64_t r = rng() % 100;
      const uint64_t delay = r < 15 ? 0 : r < 90 ? rng() % 300'000 : rng() % 100'000'000;
      const Key k = StepQueue::key(now + delay, next_chain++ % 64, static_cast<uint32_t>(rng() % 8));
      q.push(k);
      ref.push(k);
    }
    if (ref.empty()) continue;
    ASSERT_EQ(q.front(), ref.top());
    const uint64_t limit = StepQueue::time_of(ref.top()) + (rng() % 4 == 0 ? 0 : 1);
    Key k{};
    const bool popped = q.pop_before(limit, k);
    ASSERT_EQ(popped, StepQueue::time_of(ref.top()) < limit);
    if (!popped) continue;
    ASSERT_EQ(k, ref.top());
    ref.pop();
    now = StepQueue::time_of(k);
  }
  while (!ref.empty()) {
    Key k{};
    ASSERT_TRUE(q.pop_before(kNoLimit, k));
    ASSERT_EQ(k, ref.top());
    ref.pop();
  }
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace softhca::sim
