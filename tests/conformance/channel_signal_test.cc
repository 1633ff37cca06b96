// Waiting for events and signals, through the public verbs API: a signal whose handler was
// installed without SA_RESTART ends a blocked ibv_get_cq_event or ibv_get_async_event with -1 and
// errno EINTR, as rdma-core's read() of the channel's (or context's) fd does; with SA_RESTART the
// wait goes on and still returns the event. The signal is sent only once the waiter is blocked
// (it has announced itself and its thread is asleep in the kernel, /proc/self/task/<tid>/stat).
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "verbs_pair.h"

namespace softhca::conformance {
namespace {

std::atomic<int> g_signals{0};
void on_signal(int) { g_signals.fetch_add(1); }

// Installs on_signal for SIGUSR1 with or without SA_RESTART; restores the old action when done.
class SignalAction {
 public:
  explicit SignalAction(bool restart) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &old_);
  }
  ~SignalAction() { sigaction(SIGUSR1, &old_, nullptr); }
  SignalAction(const SignalAction&) = delete;
  SignalAction& operator=(const SignalAction&) = delete;

 private:
  struct sigaction old_ {};
};

// Whether thread `tid` of this process sleeps in the kernel ('S' in its stat), within 10 s.
bool wait_until_sleeping(pid_t tid) {
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
  for (int i = 0; i < 10'000; ++i) {
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);
    const size_t close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'S') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polling another thread's state
  }
  return false;
}

// Runs wait() on a thread, signals it with SIGUSR1 once it sleeps, and returns what wait()
// returned, with its errno. wake(done) runs after the signal, to end a wait the signal did not.
struct WaitResult {
  int rc = 0;
  int err = 0;
  bool slept = false;
};
template <class Wait, class Wake>
WaitResult interrupt(Wait wait, Wake wake) {
  std::atomic<pid_t> tid{0};
  std::atomic<bool> done{false};
  WaitResult r;
  std::thread waiter([&] {
    tid.store(static_cast<pid_t>(::syscall(SYS_gettid)));
    r.rc = wait();
    r.err = errno;
    done.store(true);
  });
  while (tid.load() == 0) std::this_thread::yield();
  r.slept = wait_until_sleeping(tid.load());
  pthread_kill(waiter.native_handle(), SIGUSR1);
  wake(done);
  waiter.join();
  return r;
}

// Waits up to 5 s for the waiter to come back by itself.
bool came_back(const std::atomic<bool>& done) {
  for (int i = 0; i < 5000 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return done.load();
}

class EventWaits : public VerbsPair {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
    channel_ = create_channel(b_);
    ASSERT_NE(channel_, nullptr) << errno_name(errno);
    cq_ = create_cq(b_, 16, channel_, nullptr);
    ASSERT_NE(cq_, nullptr) << errno_name(errno);
    QpOptions o;
    o.recv_cq_b = cq_;
    ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, o, &p_));
    ASSERT_EQ(ibv_req_notify_cq(cq_, 0), 0);
    g_signals.store(0);
  }
  // A SEND from A into a receive of B: an event on B's armed CQ.
  void send_one() {
    ibv_sge recv = b_.sge(kDstOff, 64);
    ASSERT_EQ(post_recv(p_.b, 5, std::span(&recv, 1)), 0);
    ibv_sge sge = a_.sge(kSrcOff, 64);
    SendArgs args;
    ASSERT_EQ(post_send(p_.a, args, std::span(&sge, 1)), 0);
    EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_SUCCESS);
  }

  static constexpr size_t kSrcOff = 0;
  static constexpr size_t kDstOff = 65536;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  QpPair p_;
};

TEST_F(EventWaits, ASignalWithoutSaRestartEndsABlockedGetCqEventWithEintr) {
  SignalAction action(/*restart=*/false);
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  // A waiter the signal did not end is ended by an event (and the test fails on its result).
  const WaitResult r = interrupt([&] { return ibv_get_cq_event(channel_, &ev_cq, &ev_ctx); },
                                 [&](const std::atomic<bool>& done) {
                                   if (!came_back(done)) send_one();
                                 });
  EXPECT_TRUE(r.slept) << "the waiter never blocked";
  EXPECT_EQ(g_signals.load(), 1);
  EXPECT_EQ(r.rc, -1);  // Expect: the wait ends, no event
  EXPECT_EQ(r.err, EINTR);
  // Expect: the next event is still delivered to the next wait.
  ASSERT_NO_FATAL_FAILURE(send_one());
  ASSERT_TRUE(wait_cq_event(channel_, &ev_cq, &ev_ctx));
  EXPECT_EQ(ev_cq, cq_);
  ibv_ack_cq_events(ev_cq, 1);
}

TEST_F(EventWaits, ASignalWithSaRestartLeavesGetCqEventWaitingForItsEvent) {
  SignalAction action(/*restart=*/true);
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  const WaitResult r = interrupt([&] { return ibv_get_cq_event(channel_, &ev_cq, &ev_ctx); },
                                 [&](const std::atomic<bool>&) {
                                   // The handler has run (the signal is taken before the restart).
                                   for (int i = 0; i < 10'000 && g_signals.load() == 0; ++i)
                                     std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                   send_one();
                                 });
  EXPECT_TRUE(r.slept);
  EXPECT_EQ(g_signals.load(), 1);
  EXPECT_EQ(r.rc, 0);  // Expect: the wait went on and returned the event
  EXPECT_EQ(ev_cq, cq_);
  if (r.rc == 0) ibv_ack_cq_events(ev_cq, 1);
}

TEST_F(EventWaits, ASignalWithoutSaRestartEndsABlockedGetAsyncEventWithEintr) {
  SignalAction action(/*restart=*/false);
  ibv_async_event ev{};
  // A waiter the signal did not end is ended by an event (SQ_DRAINED of B's QP, drained at once),
  // and the test fails on its result.
  const WaitResult r = interrupt([&] { return ibv_get_async_event(b_.ctx, &ev); },
                                 [&](const std::atomic<bool>& done) {
                                   if (came_back(done)) return;
                                   ibv_qp_attr a{};
                                   a.qp_state = IBV_QPS_SQD;
                                   a.en_sqd_async_notify = 1;
                                   ibv_modify_qp(p_.b, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY);
                                 });
  EXPECT_TRUE(r.slept);
  EXPECT_EQ(r.rc, -1);  // Expect: the wait ends, no event
  EXPECT_EQ(r.err, EINTR);
  if (r.rc == 0) ibv_ack_async_event(&ev);
}

}  // namespace
}  // namespace softhca::conformance
