#include "sim/random_stream.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <vector>

#include "sim/scheduler.h"

namespace softhca::sim {
namespace {

static_assert(std::uniform_random_bit_generator<RandomStream>);

TEST(RandomStream, Splitmix64MatchesItsPublishedOutputsForSeed1234567) {
  uint64_t state = 1234567;
  const std::array<uint64_t, 5> expected{6457827717110365317ULL, 3203168211198807973ULL,
                                         9817491932198370423ULL, 4593380528125082431ULL,
                                         16408922859458223821ULL};
  for (uint64_t e : expected) EXPECT_EQ(splitmix64_next(state), e);
}

TEST(RandomStream, Xoshiro256StarStarMatchesItsReferenceOutputsFromState1234) {
  RandomStream r = RandomStream::from_state({1, 2, 3, 4});
  EXPECT_EQ(r.next(), 11520u);
  EXPECT_EQ(r.next(), 0u);
  EXPECT_EQ(r.next(), 1509978240u);
  EXPECT_EQ(r.next(), 1215971899390074240ULL);
}

TEST(RandomStream, TheSameSeedAndComponentGiveTheSameSequence) {
  RandomStream a = RandomStream::for_component(42, "hca0.link");
  RandomStream b = RandomStream::for_component(42, "hca0.link");
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a.next(), b.next());
}

TEST(RandomStream, DifferentComponentsOrSeedsGiveDifferentSequences) {
  RandomStream a = RandomStream::for_component(42, "hca0.link");
  RandomStream b = RandomStream::for_component(42, "hca1.link");
  RandomStream c = RandomStream::for_component(43, "hca0.link");
  int same_ab = 0;
  int same_ac = 0;
  for (int i = 0; i < 64; ++i) {
    uint64_t x = a.next();
    same_ab += x == b.next();
    same_ac += x == c.next();
  }
  EXPECT_EQ(same_ab, 0);
  EXPECT_EQ(same_ac, 0);
}

TEST(RandomStream, AnAllZeroStateIsRejected) {
  EXPECT_THROW(RandomStream::from_state({0, 0, 0, 0}), std::invalid_argument);
}

TEST(RandomStream, BelowStaysInRangeAndHitsEveryValue) {
  RandomStream r(7);
  std::array<int, 6> hits{};
  for (int i = 0; i < 6000; ++i) {
    uint64_t v = r.below(6);
    ASSERT_LT(v, 6u);
    ++hits[v];
  }
  for (int h : hits) EXPECT_GT(h, 800);  // Expect: about 1000 each.
  EXPECT_THROW(r.below(0), std::invalid_argument);
}

TEST(RandomStream, BetweenIsInclusiveAtBothEnds) {
  RandomStream r(9);
  bool saw_lo = false;
  bool saw_hi = false;
  for (int i = 0; i < 1000; ++i) {
    uint64_t v = r.between(3, 5);
    ASSERT_GE(v, 3u);
    ASSERT_LE(v, 5u);
    saw_lo |= v == 3;
    saw_hi |= v == 5;
  }
  EXPECT_TRUE(saw_lo);
  EXPECT_TRUE(saw_hi);
}

TEST(RandomStream, UnitIsInTheHalfOpenInterval) {
  RandomStream r(11);
  for (int i = 0; i < 10000; ++i) {
    double u = r.unit();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

// A small lossy-link simulation: per-packet random delay and drop from the link's own stream.
std::vector<int64_t> simulate_lossy_link(uint64_t seed) {
  Scheduler s;
  RandomStream link = RandomStream::for_component(seed, "link0");
  std::vector<int64_t> arrivals;
  for (int i = 0; i < 500; ++i) {
    s.schedule_at(Picoseconds(i * 1000), [&] {
      if (link.chance(0.1)) return;  // dropped
      auto delay = Picoseconds(static_cast<int64_t>(link.between(100, 900)));
      s.schedule_after(delay, [&] { arrivals.push_back(s.now().count()); });
    });
  }
  s.run();
  return arrivals;
}

TEST(RandomStream, ASimulationDrivenByStreamsIsIdenticalForTheSameSeed) {
  auto first = simulate_lossy_link(2024);
  auto second = simulate_lossy_link(2024);
  EXPECT_EQ(first, second);
  EXPECT_GT(first.size(), 400u);
  EXPECT_LT(first.size(), 500u);
  EXPECT_NE(first, simulate_lossy_link(2025));
}

}  // namespace
}  // namespace softhca::sim
