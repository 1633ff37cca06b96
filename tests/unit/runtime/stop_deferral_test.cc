// Job-control stops held back across the device (runtime/stop_deferral.h), in a forked child so
// that the stops land on it: a SIGTSTP that arrives while threads are in the device stops the
// process only when the last of them leaves, exactly once; outside the device it stops at once.
#include "runtime/stop_deferral.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>

#include <gtest/gtest.h>

#include "child_process.h"

namespace softhca::runtime {
namespace {

constexpr int kWaitMs = 10'000;

// Whether pid stops (waitpid WUNTRACED) within timeout_ms; the signal that stopped it, else 0.
int stopped_by(pid_t pid, int timeout_ms) {
  for (int i = 0; i < timeout_ms / 5; ++i) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG | WUNTRACED);
    if (r == pid) return WIFSTOPPED(status) ? WSTOPSIG(status) : -1;
    ::usleep(5'000);  // polling a child's state, not synchronising with it
  }
  return 0;
}

TEST(StopDeferral, ACtrlZInsideTheDeviceStopsTheProcessWhenTheLastThreadLeavesIt) {
  int to_parent[2];
  int to_child[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  ASSERT_EQ(::pipe(to_child), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    // A process group of its own, whose parent is in another group of the session: not orphaned,
    // so the kernel stops it for SIGTSTP (it discards job-control stops in an orphaned group, as a
    // test run in the background may be).
    ::setpgid(0, 0);
    install_stop_deferral();
    device_entered();  // two threads' worth: the count, not a flag
    device_entered();
    ::raise(SIGTSTP);  // held back: this returns
    uint8_t step = 1;
    if (!test::write_all(to_parent[1], &step, 1) || !test::read_bounded(to_child[0], &step, 1, kWaitMs)) ::_exit(2);
    device_exited();  // one still in: no stop yet
    step = 2;
    if (!test::write_all(to_parent[1], &step, 1) || !test::read_bounded(to_child[0], &step, 1, kWaitMs)) ::_exit(3);
    device_exited();  // the last one out: stops here, goes on when continued
    step = static_cast<uint8_t>(stops_deferred());
    if (!test::write_all(to_parent[1], &step, 1)) ::_exit(4);
    ::raise(SIGTSTP);  // outside the device: stops at once
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  uint8_t step = 0;
  // Expect: the SIGTSTP inside the device did not stop the child.
  ASSERT_TRUE(test::read_bounded(to_parent[0], &step, 1, kWaitMs));
  EXPECT_EQ(step, 1);
  EXPECT_EQ(stopped_by(child, 200), 0);
  ASSERT_TRUE(test::write_all(to_child[1], &step, 1));
  // Expect: one thread leaving, one still in: still running.
  ASSERT_TRUE(test::read_bounded(to_parent[0], &step, 1, kWaitMs));
  EXPECT_EQ(step, 2);
  EXPECT_EQ(stopped_by(child, 200), 0);
  ASSERT_TRUE(test::write_all(to_child[1], &step, 1));
  // Expect: the last one leaving stops it, by SIGTSTP, once.
  EXPECT_EQ(stopped_by(child, kWaitMs), SIGTSTP);
  ::kill(child, SIGCONT);
  ASSERT_TRUE(test::read_bounded(to_parent[0], &step, 1, kWaitMs));
  EXPECT_EQ(step, 1) << "stops carried out late";
  // Expect: outside the device a SIGTSTP stops it at once, with the default action's signal.
  EXPECT_EQ(stopped_by(child, kWaitMs), SIGTSTP);
  ::kill(child, SIGCONT);
  EXPECT_EQ(test::reap_bounded(child, kWaitMs), 0);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) ::close(fd);
}

}  // namespace
}  // namespace softhca::runtime
