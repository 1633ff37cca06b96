// The timing model's resources: a server works first come first served; a pool lends units that
// come back at known times, and serves waiting takers in order.
#include "sim/resource.h"

#include <gtest/gtest.h>

namespace softhca::sim {
namespace {

TEST(Server, ARequestWhileBusyStartsWhenThePreviousOneEnds) {
  Server s;
  EXPECT_EQ(s.reserve(10_ns, 5_ns), 10_ns);
  // Expect: busy until 15 ns, so a request ready at 12 ns starts at 15 ns.
  EXPECT_EQ(s.reserve(12_ns, 5_ns), 15_ns);
  // Expect: an idle server starts at once.
  EXPECT_EQ(s.reserve(100_ns, 1_ns), 100_ns);
  EXPECT_EQ(s.busy(), 11_ns);
  EXPECT_EQ(s.operations(), 3u);
}

TEST(Pool, UnitsTakenComeBackAtTheTimeTheyWereGivenBack) {
  Pool p(2);
  EXPECT_TRUE(p.try_take(0_ns, 1, 0));
  EXPECT_TRUE(p.try_take(0_ns, 1, 0));
  EXPECT_FALSE(p.try_take(0_ns, 1, 0));  // Expect: both lent out.
  p.give_back(50_ns, 1, 0);
  Picoseconds at{0};
  ASSERT_TRUE(p.earliest(10_ns, 1, 0, at));
  EXPECT_EQ(at, 50_ns);                   // Expect: available when the return is due.
  EXPECT_FALSE(p.try_take(49_ns, 1, 0));  // Expect: not before.
  EXPECT_TRUE(p.try_take(50_ns, 1, 0));
}

TEST(Pool, DataCreditsAreTakenWithHeaderCredits) {
  Pool p(8, 4);  // e.g. 8 header credits, 4 data credits (64 bytes)
  EXPECT_TRUE(p.try_take(0_ns, 1, 4));
  EXPECT_FALSE(p.try_take(0_ns, 1, 1));  // Expect: headers left, but no data credit.
  EXPECT_TRUE(p.try_take(0_ns, 1, 0));   // Expect: a TLP with no data needs none.
}

TEST(Pool, EarliestCountsOnlyTheReturnsKnownSoFar) {
  Pool p(1);
  ASSERT_TRUE(p.try_take(0_ns, 1, 0));
  Picoseconds at{0};
  EXPECT_FALSE(p.earliest(0_ns, 1, 0, at));  // Expect: nothing comes back yet.
  p.give_back(30_ns, 1, 0);
  p.give_back(20_ns, 1, 0);  // registered out of order: kept sorted
  ASSERT_TRUE(p.earliest(0_ns, 2, 0, at));
  EXPECT_EQ(at, 30_ns);
  ASSERT_TRUE(p.earliest(0_ns, 1, 0, at));
  EXPECT_EQ(at, 20_ns);
}

TEST(Pool, AnUnlimitedPoolNeverRefuses) {
  Pool p;
  EXPECT_TRUE(p.unlimited());
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(p.try_take(0_ns, 1, 1000));
}

}  // namespace
}  // namespace softhca::sim
