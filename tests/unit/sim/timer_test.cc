#include "sim/timer.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace softhca::sim {
namespace {

TEST(Timer, AnArmedTimerFiresAtItsDeadline) {
  Scheduler s;
  std::vector<Picoseconds> fired;
  Timer t(s, [&] { fired.push_back(s.now()); });
  t.arm_after(5_us);
  EXPECT_TRUE(t.armed());
  EXPECT_EQ(t.deadline(), 5_us);
  s.run();
  EXPECT_EQ(fired, (std::vector<Picoseconds>{5_us}));
  EXPECT_FALSE(t.armed());
  EXPECT_EQ(t.deadline(), std::nullopt);
}

TEST(Timer, ReArmingReplacesTheEarlierDeadline) {
  Scheduler s;
  std::vector<Picoseconds> fired;
  Timer t(s, [&] { fired.push_back(s.now()); });
  t.arm_at(10_ns);
  t.arm_at(30_ns);
  s.run();
  EXPECT_EQ(fired, (std::vector<Picoseconds>{30_ns}));
}

TEST(Timer, ACancelledTimerDoesNotFire) {
  Scheduler s;
  int fired = 0;
  Timer t(s, [&] { ++fired; });
  t.arm_after(1_ns);
  EXPECT_TRUE(t.cancel());
  EXPECT_FALSE(t.cancel());
  s.run();
  EXPECT_EQ(fired, 0);
}

TEST(Timer, AnExpiryCallbackMayReArmTheTimer) {
  Scheduler s;
  std::vector<Picoseconds> fired;
  std::unique_ptr<Timer> t;
  t = std::make_unique<Timer>(s, [&] {
    fired.push_back(s.now());
    if (fired.size() < 3) t->arm_after(2_ns);
  });
  t->arm_after(2_ns);
  s.run();
  EXPECT_EQ(fired, (std::vector<Picoseconds>{2_ns, 4_ns, 6_ns}));
}

TEST(Timer, DestroyingAnArmedTimerCancelsIt) {
  Scheduler s;
  int fired = 0;
  {
    Timer t(s, [&] { ++fired; });
    t.arm_after(1_ns);
  }
  EXPECT_TRUE(s.empty());
  s.run();
  EXPECT_EQ(fired, 0);
}

}  // namespace
}  // namespace softhca::sim
