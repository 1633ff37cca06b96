#include "sim/scheduler.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace softhca::sim {
namespace {

TEST(Scheduler, EventsRunInTimeOrderRegardlessOfScheduleOrder) {
  Scheduler s;
  std::vector<int> order;
  s.schedule_at(30_ns, [&] { order.push_back(3); });
  s.schedule_at(10_ns, [&] { order.push_back(1); });
  s.schedule_at(20_ns, [&] { order.push_back(2); });
  EXPECT_EQ(s.run(), 3u);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(s.now(), 30_ns);
}

TEST(Scheduler, EventsAtTheSameTimeRunInTheOrderTheyWereScheduled) {
  Scheduler s;
  std::vector<int> order;
  for (int i = 0; i < 10; ++i) s.schedule_at(5_ns, [&order, i] { order.push_back(i); });
  s.run();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(Scheduler, AnEventScheduledForNowFromACallbackRunsAfterTheOthersAlreadyDueNow) {
  Scheduler s;
  std::vector<std::string> order;
  s.schedule_at(1_ns, [&] {
    order.push_back("a");
    s.schedule_after(Picoseconds::zero(), [&] { order.push_back("c"); });
  });
  s.schedule_at(1_ns, [&] { order.push_back("b"); });
  s.run();
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(Scheduler, ScheduleAfterIsRelativeToTheCurrentEventTime) {
  Scheduler s;
  Picoseconds seen{-1};
  s.schedule_at(100_ps, [&] { s.schedule_after(25_ps, [&] { seen = s.now(); }); });
  s.run();
  EXPECT_EQ(seen, 125_ps);
}

TEST(Scheduler, ACancelledEventNeverRunsAndItsHandleReportsNotPending) {
  Scheduler s;
  int ran = 0;
  EventHandle h = s.schedule_at(10_ns, [&] { ++ran; });
  s.schedule_at(20_ns, [&] { ran += 10; });
  EXPECT_TRUE(s.is_pending(h));
  EXPECT_TRUE(s.cancel(h));
  EXPECT_FALSE(s.is_pending(h));
  EXPECT_FALSE(s.cancel(h));  // Expect: a second cancel is a no-op.
  EXPECT_EQ(s.pending(), 1u);
  EXPECT_EQ(s.run(), 1u);
  EXPECT_EQ(ran, 10);
}

TEST(Scheduler, CancellingAnEventThatAlreadyRanReturnsFalse) {
  Scheduler s;
  EventHandle h = s.schedule_at(1_ns, [] {});
  s.run();
  EXPECT_FALSE(s.cancel(h));
  EXPECT_FALSE(s.cancel(EventHandle()));
}

TEST(Scheduler, AStaleHandleDoesNotCancelTheEventThatReusedItsSlot) {
  Scheduler s;
  int ran = 0;
  EventHandle old = s.schedule_at(1_ns, [] {});
  ASSERT_TRUE(s.cancel(old));
  EventHandle fresh = s.schedule_at(2_ns, [&] { ++ran; });
  EXPECT_FALSE(s.cancel(old));
  EXPECT_TRUE(s.is_pending(fresh));
  s.run();
  EXPECT_EQ(ran, 1);
}

TEST(Scheduler, AnEventCanCancelALaterOne) {
  Scheduler s;
  int later_ran = 0;
  EventHandle later = s.schedule_at(20_ns, [&] { ++later_ran; });
  s.schedule_at(10_ns, [&] { EXPECT_TRUE(s.cancel(later)); });
  s.run();
  EXPECT_EQ(later_ran, 0);
  EXPECT_TRUE(s.empty());
}

TEST(Scheduler, TheRunningEventIsNoLongerPending) {
  Scheduler s;
  EventHandle self;
  bool was_pending = true;
  self = s.schedule_at(1_ns, [&] { was_pending = s.is_pending(self); });
  s.run();
  EXPECT_FALSE(was_pending);
}

TEST(Scheduler, RunUntilRunsEventsUpToAndIncludingTheBoundAndMovesTheClockThere) {
  Scheduler s;
  std::vector<int> order;
  s.schedule_at(10_ns, [&] { order.push_back(10); });
  s.schedule_at(20_ns, [&] { order.push_back(20); });
  s.schedule_at(21_ns, [&] { order.push_back(21); });
  EXPECT_EQ(s.run_until(20_ns), 2u);
  EXPECT_EQ(order, (std::vector<int>{10, 20}));
  EXPECT_EQ(s.now(), 20_ns);
  EXPECT_EQ(s.run_until(50_ns), 1u);
  EXPECT_EQ(s.now(), 50_ns);
  EXPECT_TRUE(s.empty());
}

TEST(Scheduler, RunOneRunsExactlyOneEvent) {
  Scheduler s;
  int ran = 0;
  s.schedule_at(1_ns, [&] { ++ran; });
  s.schedule_at(1_ns, [&] { ++ran; });
  EXPECT_TRUE(s.run_one());
  EXPECT_EQ(ran, 1);
  EXPECT_TRUE(s.run_one());
  EXPECT_FALSE(s.run_one());
  EXPECT_EQ(s.events_run(), 2u);
}

TEST(Scheduler, StepRunsEveryEventOfTheNextInstantOnly) {
  Scheduler s;
  std::vector<int> order;
  s.schedule_at(5_ns, [&] {
    order.push_back(1);
    s.schedule_after(Picoseconds::zero(), [&] { order.push_back(2); });
  });
  s.schedule_at(5_ns, [&] { order.push_back(3); });
  s.schedule_at(6_ns, [&] { order.push_back(4); });
  EXPECT_EQ(s.step(), 3u);
  EXPECT_EQ(order, (std::vector<int>{1, 3, 2}));
  EXPECT_EQ(s.now(), 5_ns);
  EXPECT_EQ(s.next_event_time(), 6_ns);
}

TEST(Scheduler, NextEventTimeSkipsCancelledEvents) {
  Scheduler s;
  EventHandle first = s.schedule_at(1_ns, [] {});
  s.schedule_at(2_ns, [] {});
  s.cancel(first);
  EXPECT_EQ(s.next_event_time(), 2_ns);
  s.run();
  EXPECT_EQ(s.next_event_time(), std::nullopt);
}

TEST(Scheduler, SchedulingInThePastIsRejected) {
  Scheduler s;
  s.run_until(10_ns);
  EXPECT_THROW(s.schedule_at(9_ns, [] {}), std::invalid_argument);
  EXPECT_THROW(s.schedule_after(-1_ps, [] {}), std::invalid_argument);
  EXPECT_THROW(s.run_until(5_ns), std::invalid_argument);
  EXPECT_THROW(s.schedule_at(10_ns, nullptr), std::invalid_argument);
}

TEST(Scheduler, ARescheduledTimerPatternRunsOnlyTheEventsThatWereNotCancelled) {
  Scheduler s;
  // A retransmit timer re-armed per ACK: schedule, cancel, repeat.
  for (int i = 0; i < 100000; ++i) {
    EventHandle h = s.schedule_after(1_us, [] {});
    s.schedule_after(1_ps, [] {});
    s.cancel(h);
    s.run_one();
  }
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.events_run(), 100000u);
}

}  // namespace
}  // namespace softhca::sim
