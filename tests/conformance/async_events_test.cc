// Asynchronous events through the public verbs API (ibv_get_async_event(3), IBA 11.6.3): each kind
// raised by what raises it on hardware, naming the right QP, CQ or SRQ, on the context that owns
// it and on no other; none raised spuriously; the context's async_fd readable exactly while an
// event waits (poll, epoll, O_NONBLOCK); an async EQ filled past its size delivering every event
// once; destroy waiting for the events it handed out to be acknowledged; and UD/UC send errors
// moving the QP to SQE (flushing its send queue only) until SQE -> RTS.
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "verbs_pair.h"

// Exported by libibverbs (IBVERBS_1.0) but declared only in <infiniband/driver.h>, for providers.
extern "C" const char* ibv_get_sysfs_path(void);

namespace softhca::conformance {
namespace {

using Clock = std::chrono::steady_clock;

bool set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Whether fd polls readable now (no wait).
bool readable(int fd) {
  pollfd pfd{fd, POLLIN, 0};
  return ::poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN) != 0;
}

// The next async event of ctx within kDeadline (async_fd made non-blocking, then poll()).
::testing::AssertionResult next_event(ibv_context* ctx, ibv_async_event* ev) {
  if (!set_nonblocking(ctx->async_fd)) return ::testing::AssertionFailure() << "fcntl: " << errno_name(errno);
  const auto deadline = Clock::now() + kDeadline;
  for (;;) {
    if (ibv_get_async_event(ctx, ev) == 0) return ::testing::AssertionSuccess();
    if (errno != EAGAIN) return ::testing::AssertionFailure() << "ibv_get_async_event: " << errno_name(errno);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return ::testing::AssertionFailure() << "no async event within " << kDeadline.count() << " s";
    pollfd pfd{ctx->async_fd, POLLIN, 0};
    ::poll(&pfd, 1, static_cast<int>(left));
  }
}

// Nothing is waiting on ctx: the fd does not poll readable and a non-blocking get is EAGAIN.
::testing::AssertionResult no_event(ibv_context* ctx) {
  if (!set_nonblocking(ctx->async_fd)) return ::testing::AssertionFailure() << "fcntl: " << errno_name(errno);
  if (readable(ctx->async_fd)) return ::testing::AssertionFailure() << "async_fd polls readable";
  ibv_async_event ev{};
  if (ibv_get_async_event(ctx, &ev) == 0) {
    const int type = ev.event_type;
    ibv_ack_async_event(&ev);
    return ::testing::AssertionFailure() << "an unexpected event: " << ibv_event_type_str(static_cast<ibv_event_type>(type));
  }
  if (errno != EAGAIN) return ::testing::AssertionFailure() << "ibv_get_async_event: " << errno_name(errno);
  return ::testing::AssertionSuccess();
}

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

int to_error(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

class AsyncEvents : public VerbsPair {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices)); }

  // A SEND of 64 bytes from qp (on A) into a receive posted on `recv_qp` or `srq` (on B).
  void send(ibv_qp* qp, ibv_wc_status expect = IBV_WC_SUCCESS) {
    ibv_sge sge = a_.sge(0, 64);
    SendArgs args;
    ASSERT_EQ(post_send(qp, args, std::span(&sge, 1)), 0);
    EXPECT_EQ(poll_one(a_.cq).status, expect);
  }
  void post_recvs(ibv_qp* qp, int n) {
    for (int i = 0; i < n; ++i) {
      ibv_sge r = b_.sge(65536 + static_cast<size_t>(i) * 64, 64);
      ASSERT_EQ(post_recv(qp, static_cast<uint64_t>(i), std::span(&r, 1)), 0);
    }
  }
  void post_srq_recvs(ibv_srq* srq, int n) {
    for (int i = 0; i < n; ++i) {
      ibv_sge r = b_.sge(65536 + static_cast<size_t>(i) * 64, 64);
      ASSERT_EQ(post_srq_recv(srq, static_cast<uint64_t>(i), std::span(&r, 1)), 0);
    }
  }
};

TEST_F(AsyncEvents, AContextWithNothingHappeningHasNoEventAndANonBlockingGetIsEagain) {
  EXPECT_TRUE(no_event(a_.ctx));
  EXPECT_TRUE(no_event(b_.ctx));
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, QpOptions{}, &p));
  post_recvs(p.b, 1);
  send(p.a);
  EXPECT_TRUE(no_event(a_.ctx));  // Expect: traffic between QPs in RTS raises nothing
  EXPECT_TRUE(no_event(b_.ctx));
}

TEST_F(AsyncEvents, TheFirstPacketAnRcQpInRtrTakesRaisesCommEstOnceOnItsContext) {
  QpOptions o;
  ibv_qp* qa = create_qp(a_, IBV_QPT_RC, o);
  ibv_qp* qb = create_qp(b_, IBV_QPT_RC, o);
  ASSERT_NE(qa, nullptr);
  ASSERT_NE(qb, nullptr);
  ASSERT_EQ(modify_to_init(qa, o), 0);
  ASSERT_EQ(modify_to_init(qb, o), 0);
  ASSERT_EQ(modify_to_rtr(qa, qb->qp_num, b_.lid, kPsnB, o), 0);
  ASSERT_EQ(modify_to_rtr(qb, qa->qp_num, a_.lid, kPsnA, o), 0);
  ASSERT_EQ(modify_to_rts(qa, kPsnA, o), 0);  // B stays in RTR, as a passive side before its RTU
  EXPECT_TRUE(no_event(b_.ctx));
  post_recvs(qb, 2);
  send(qa);
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(b_.ctx, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_COMM_EST);
  EXPECT_EQ(ev.element.qp, qb);
  ibv_ack_async_event(&ev);
  send(qa);
  EXPECT_TRUE(no_event(b_.ctx));  // Expect: once per stay in RTR
  EXPECT_TRUE(no_event(a_.ctx));  // Expect: the sender in RTS hears nothing
}

TEST_F(AsyncEvents, RtsToSqdWithEnSqdAsyncNotifyRaisesSqDrainedAndWithoutItNothing) {
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, QpOptions{}, &p));
  post_recvs(p.b, 1);
  send(p.a);  // completed: nothing outstanding, the SQ drains at once
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_SQD;
  ASSERT_EQ(ibv_modify_qp(p.a, &a, IBV_QP_STATE), 0);
  EXPECT_TRUE(no_event(a_.ctx));  // Expect: not asked for
  a.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(ibv_modify_qp(p.a, &a, IBV_QP_STATE), 0);
  a.qp_state = IBV_QPS_SQD;
  a.en_sqd_async_notify = 1;
  ASSERT_EQ(ibv_modify_qp(p.a, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(a_.ctx, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_SQ_DRAINED);
  EXPECT_EQ(ev.element.qp, p.a);
  ibv_ack_async_event(&ev);
  ibv_qp_attr q{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(p.a, &q, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(q.qp_state, IBV_QPS_SQD);
  EXPECT_EQ(q.sq_draining, 0);  // Expect: drained
  EXPECT_TRUE(no_event(a_.ctx));
  EXPECT_TRUE(no_event(b_.ctx));
}

TEST_F(AsyncEvents, AQpOnAnSrqEnteringErrRaisesLastWqeReachedAndOneWithoutAnSrqDoesNot) {
  ibv_srq* srq = create_srq(b_, 16, 1);
  ASSERT_NE(srq, nullptr);
  QpOptions o;
  ibv_qp* on_srq = create_qp(b_, IBV_QPT_RC, o, srq);
  ibv_qp* plain = create_qp(b_, IBV_QPT_RC, o);
  ASSERT_NE(on_srq, nullptr);
  ASSERT_NE(plain, nullptr);
  ASSERT_EQ(modify_to_init(on_srq, o), 0);
  ASSERT_EQ(to_error(plain), 0);
  EXPECT_TRUE(no_event(b_.ctx));
  ASSERT_EQ(to_error(on_srq), 0);
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(b_.ctx, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(ev.element.qp, on_srq);
  ibv_ack_async_event(&ev);
  EXPECT_TRUE(no_event(b_.ctx));
  EXPECT_TRUE(no_event(a_.ctx));  // Expect: only the owning context hears of its QP
}

TEST_F(AsyncEvents, AnArmedSrqLimitFiresOnceWhenItsWqesDropBelowItAndIsThenDisarmed) {
  ibv_srq* srq = create_srq(b_, 16, 1);
  ASSERT_NE(srq, nullptr);
  QpOptions o;
  o.srq_b = srq;
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, o, &p));
  post_srq_recvs(srq, 8);
  ibv_srq_attr attr{};
  attr.srq_limit = 4;
  ASSERT_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT), 0);
  for (int i = 0; i < 4; ++i) send(p.a);
  EXPECT_TRUE(no_event(b_.ctx));  // Expect: 4 left, not below the limit of 4
  send(p.a);
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(b_.ctx, &ev));  // Expect: 3 left
  EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(ev.element.srq, srq);
  ibv_ack_async_event(&ev);
  ibv_srq_attr now{};
  ASSERT_EQ(ibv_query_srq(srq, &now), 0);
  EXPECT_EQ(now.srq_limit, 0u);  // Expect: disarmed
  send(p.a);
  EXPECT_TRUE(no_event(b_.ctx));  // Expect: no second event without a new arm
  attr.srq_limit = 3;
  ASSERT_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT), 0);
  send(p.a);  // 1 left
  ASSERT_TRUE(next_event(b_.ctx, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  ibv_ack_async_event(&ev);
}

TEST_F(AsyncEvents, AWriteWithABadRkeyGivesTheResponderQpAccessErrAndTheRequesterOnlyItsCqe) {
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, QpOptions{}, &p));
  ibv_sge sge = a_.sge(0, 64);
  SendArgs w;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.remote_addr = b_.addr(0);
  w.rkey = b_.mr->rkey ^ 0x55;
  ASSERT_EQ(post_send(p.a, w, std::span(&sge, 1)), 0);
  EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_REM_ACCESS_ERR);
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(b_.ctx, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(ev.element.qp, p.b);
  ibv_ack_async_event(&ev);
  EXPECT_EQ(query_state(p.b), IBV_QPS_ERR);
  EXPECT_TRUE(no_event(b_.ctx));
  EXPECT_TRUE(no_event(a_.ctx));  // Expect: a requester's remote error is its completion's alone
}

TEST_F(AsyncEvents, ACqOverrunPutsTheCqInErrorWithCqErrAndItsQpGetsQpFatal) {
  ibv_cq* small = create_cq(b_, 1);  // 2 entries
  ASSERT_NE(small, nullptr);
  QpOptions o;
  o.recv_cq_b = small;
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, o, &p));
  post_recvs(p.b, 4);
  for (int i = 0; i < 2; ++i) send(p.a);
  EXPECT_TRUE(no_event(b_.ctx));  // Expect: full, not overrun
  send(p.a);  // its receive completion finds no room
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(b_.ctx, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.element.cq, small);
  ibv_ack_async_event(&ev);
  ASSERT_TRUE(next_event(b_.ctx, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(ev.element.qp, p.b);
  ibv_ack_async_event(&ev);
  EXPECT_EQ(query_state(p.b), IBV_QPS_ERR);
  std::vector<ibv_wc> wcs;
  EXPECT_TRUE(poll_completions(small, 2, wcs));  // Expect: the two CQEs that fit, nothing after
  EXPECT_TRUE(cq_is_empty(small));
  EXPECT_TRUE(no_event(b_.ctx));
}

TEST_F(AsyncEvents, AsyncFdPollsAndEpollsReadableExactlyWhileAnEventWaits) {
  ibv_srq* srq = create_srq(b_, 16, 1);
  ASSERT_NE(srq, nullptr);
  QpOptions o;
  ibv_qp* q1 = create_qp(b_, IBV_QPT_RC, o, srq);
  ibv_qp* q2 = create_qp(b_, IBV_QPT_RC, o, srq);
  ASSERT_NE(q1, nullptr);
  ASSERT_NE(q2, nullptr);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  epoll_event want{};
  want.events = EPOLLIN;  // level-triggered
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, b_.ctx->async_fd, &want), 0);
  epoll_event got{};
  EXPECT_FALSE(readable(b_.ctx->async_fd));
  EXPECT_EQ(epoll_wait(ep, &got, 1, 0), 0);
  ASSERT_EQ(to_error(q1), 0);
  ASSERT_EQ(to_error(q2), 0);
  EXPECT_TRUE(readable(b_.ctx->async_fd));
  EXPECT_EQ(epoll_wait(ep, &got, 1, 0), 1);
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(b_.ctx, &ev));
  EXPECT_EQ(ev.element.qp, q1);
  ibv_ack_async_event(&ev);
  EXPECT_TRUE(readable(b_.ctx->async_fd));  // Expect: one more waits
  EXPECT_EQ(epoll_wait(ep, &got, 1, 0), 1);
  ASSERT_TRUE(next_event(b_.ctx, &ev));
  EXPECT_EQ(ev.element.qp, q2);
  ibv_ack_async_event(&ev);
  EXPECT_FALSE(readable(b_.ctx->async_fd));  // Expect: none left, no stale wake-up
  EXPECT_EQ(epoll_wait(ep, &got, 1, 0), 0);
  ::close(ep);
}

TEST_F(AsyncEvents, MoreEventsThanTheAsyncEqHoldsAreEachDeliveredExactlyOnce) {
  // 300 QPs on an SRQ go to ERR before any event is taken: more LAST_WQE_REACHED events than the
  // async EQ's 256 entries. The device holds the rest until the consumer index frees room.
  constexpr int kQps = 300;
  ibv_srq* srq = create_srq(b_, 16, 1);
  ASSERT_NE(srq, nullptr);
  QpOptions o;
  o.max_send_wr = 1;
  o.max_send_sge = 1;
  std::map<ibv_qp*, int> seen;
  for (int i = 0; i < kQps; ++i) {
    ibv_qp* qp = create_qp(b_, IBV_QPT_UD, o, srq);
    ASSERT_NE(qp, nullptr) << i << ": " << errno_name(errno);
    seen[qp] = 0;
    ASSERT_EQ(to_error(qp), 0);
  }
  for (int i = 0; i < kQps; ++i) {
    ibv_async_event ev{};
    ASSERT_TRUE(next_event(b_.ctx, &ev)) << i;
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
    auto it = seen.find(ev.element.qp);
    ASSERT_NE(it, seen.end()) << i;
    ++it->second;
    ibv_ack_async_event(&ev);
  }
  for (const auto& [qp, n] : seen) EXPECT_EQ(n, 1) << qp->qp_num;
  EXPECT_TRUE(no_event(b_.ctx));
}

TEST_F(AsyncEvents, DestroyQpWaitsUntilEveryEventItHandedOutIsAcknowledged) {
  ibv_srq* srq = create_srq(b_, 16, 1);
  ASSERT_NE(srq, nullptr);
  ibv_qp_init_attr init{};
  init.send_cq = b_.cq;
  init.recv_cq = b_.cq;
  init.srq = srq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 1;
  init.cap.max_send_sge = 1;
  ibv_qp* qp = ibv_create_qp(b_.pd, &init);  // destroyed here, not by the fixture
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(to_error(qp), 0);
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(b_.ctx, &ev));
  ASSERT_EQ(ev.element.qp, qp);
  std::atomic<pid_t> tid{0};
  std::atomic<bool> returned{false};
  int rc = -1;
  std::thread destroyer([&] {
    tid.store(static_cast<pid_t>(::syscall(SYS_gettid)));
    rc = ibv_destroy_qp(qp);
    returned.store(true);
  });
  while (tid.load() == 0) std::this_thread::yield();
  EXPECT_TRUE(wait_until_sleeping(tid.load()));
  EXPECT_FALSE(returned.load());  // Expect: blocked on the unacknowledged event
  ibv_ack_async_event(&ev);
  destroyer.join();
  EXPECT_EQ(rc, 0);
}

// ---- completion channels: the same fd rules ---------------------------------------------------

class ChannelFd : public VerbsPair {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
    channel_ = create_channel(b_);
    ASSERT_NE(channel_, nullptr);
    for (ibv_cq*& cq : cqs_) {
      cq = create_cq(b_, 16, channel_);
      ASSERT_NE(cq, nullptr);
    }
    for (int i = 0; i < 2; ++i) {
      QpOptions o;
      o.recv_cq_b = cqs_[static_cast<size_t>(i)];
      ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, o, &pairs_[static_cast<size_t>(i)]));
      ibv_sge r = b_.sge(65536, 64);
      ASSERT_EQ(post_recv(pairs_[static_cast<size_t>(i)].b, 1, std::span(&r, 1)), 0);
      ASSERT_EQ(ibv_req_notify_cq(cqs_[static_cast<size_t>(i)], 0), 0);
    }
  }
  // A SEND into pair i's receive: one event for its CQ.
  void send(size_t i) {
    ibv_sge sge = a_.sge(0, 64);
    ASSERT_EQ(post_send(pairs_[i].a, SendArgs{}, std::span(&sge, 1)), 0);
    EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_SUCCESS);
  }

  ibv_comp_channel* channel_ = nullptr;
  std::array<ibv_cq*, 2> cqs_{};
  std::array<QpPair, 2> pairs_{};
};

TEST_F(ChannelFd, TheChannelFdIsReadableExactlyWhileACompletionEventWaits) {
  EXPECT_FALSE(readable(channel_->fd));
  send(0);
  send(1);
  EXPECT_TRUE(readable(channel_->fd));
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  ASSERT_TRUE(wait_cq_event(channel_, &cq, &ctx));
  EXPECT_EQ(cq, cqs_[0]);
  EXPECT_TRUE(readable(channel_->fd));  // Expect: the second event still waits
  ASSERT_TRUE(wait_cq_event(channel_, &cq, &ctx));
  EXPECT_EQ(cq, cqs_[1]);
  EXPECT_FALSE(readable(channel_->fd));  // Expect: no stale wake-up left behind
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(channel_, &cq, &ctx), -1);  // wait_cq_event made it non-blocking
  EXPECT_EQ(errno, EAGAIN);
  ibv_ack_cq_events(cqs_[0], 1);
  ibv_ack_cq_events(cqs_[1], 1);
}

TEST_F(ChannelFd, TwoBlockedWaitersAreBothWokenByTwoEventsThoughOneWakeUpCameFirst) {
  std::array<std::atomic<pid_t>, 2> tids{};
  std::array<ibv_cq*, 2> got{};
  std::array<std::atomic<bool>, 2> done{};
  std::vector<std::thread> waiters;
  for (size_t i = 0; i < 2; ++i) {
    waiters.emplace_back([&, i] {
      tids[i].store(static_cast<pid_t>(::syscall(SYS_gettid)));
      void* ctx = nullptr;
      if (ibv_get_cq_event(channel_, &got[i], &ctx) != 0) got[i] = nullptr;
      done[i].store(true);
    });
  }
  for (size_t i = 0; i < 2; ++i) {
    while (tids[i].load() == 0) std::this_thread::yield();
    EXPECT_TRUE(wait_until_sleeping(tids[i].load()));
  }
  // Both events come before either waiter runs again: the first waiter's wake-up takes both
  // firings, and the second must be woken for the second EQE all the same.
  send(0);
  send(1);
  for (int i = 0; i < 5000 && !(done[0].load() && done[1].load()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool both = done[0].load() && done[1].load();
  EXPECT_TRUE(both) << "a waiter stayed blocked with an event waiting";
  if (!both) {
    // Unblock the test: a third event for whoever still waits.
    ibv_req_notify_cq(cqs_[0], 0);
    ibv_sge r = b_.sge(65536, 64);
    post_recv(pairs_[0].b, 2, std::span(&r, 1));
    send(0);
  }
  for (std::thread& t : waiters) t.join();
  ASSERT_NE(got[0], nullptr);
  ASSERT_NE(got[1], nullptr);
  EXPECT_NE(got[0], got[1]);  // Expect: each event once
  for (ibv_cq* cq : got) ibv_ack_cq_events(cq, 1);
}

// ---- UD and UC send errors: SQE -----------------------------------------------------------------

class SendQueueError : public VerbsPair, public ::testing::WithParamInterface<ibv_qp_type> {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices)); }
  SendArgs args_to_b(const QpPair& p) const {
    SendArgs s;
    s.ah = p.ah_to_b;
    s.remote_qpn = p.b->qp_num;
    return s;
  }
};

TEST_P(SendQueueError, ALocalSendErrorMovesTheQpToSqeFlushingOnlyItsSendQueueUntilSqeToRts) {
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(GetParam(), QpOptions{}, &p));
  const size_t grh = GetParam() == IBV_QPT_UD ? kGrhBytes : 0;
  // A's receive, for a message from B while A is in SQE.
  ibv_sge ra = a_.sge(8192, static_cast<uint32_t>(64 + grh));
  ASSERT_EQ(post_recv(p.a, 7, std::span(&ra, 1)), 0);
  // Expect: a bad lkey fails the WQE with its status, the QP goes to SQE (not ERR).
  ibv_sge bad{a_.addr(0), 64, a_.mr->lkey ^ 0x100};
  ASSERT_EQ(post_send(p.a, args_to_b(p), std::span(&bad, 1)), 0);
  EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(query_state(p.a), IBV_QPS_SQE);
  // Expect: a send posted in SQE is flushed.
  ibv_sge good = a_.sge(0, 64);
  ASSERT_EQ(post_send(p.a, args_to_b(p), std::span(&good, 1)), 0);
  EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_WR_FLUSH_ERR);
  // Expect: the receive queue goes on: B's message lands in A's receive.
  SendArgs back;
  back.ah = p.ah_to_a;
  back.remote_qpn = p.a->qp_num;
  ibv_sge sb = b_.sge(0, 64);
  ASSERT_EQ(post_send(p.b, back, std::span(&sb, 1)), 0);
  EXPECT_EQ(poll_one(b_.cq).status, IBV_WC_SUCCESS);
  const ibv_wc rw = poll_one(a_.cq);
  EXPECT_EQ(rw.status, IBV_WC_SUCCESS);
  EXPECT_EQ(rw.wr_id, 7u);
  // Expect: SQE -> RTS recovers; the next send arrives.
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(ibv_modify_qp(p.a, &a, IBV_QP_STATE), 0);
  ibv_sge rb = b_.sge(65536, static_cast<uint32_t>(64 + grh));
  ASSERT_EQ(post_recv(p.b, 9, std::span(&rb, 1)), 0);
  ASSERT_EQ(post_send(p.a, args_to_b(p), std::span(&good, 1)), 0);
  EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(poll_one(b_.cq).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(no_event(a_.ctx));  // Expect: a send error is its CQE's alone
}

INSTANTIATE_TEST_SUITE_P(UdAndUc, SendQueueError, ::testing::Values(IBV_QPT_UD, IBV_QPT_UC),
                         [](const ::testing::TestParamInfo<ibv_qp_type>& i) {
                           return std::string(i.param == IBV_QPT_UD ? "Ud" : "Uc");
                         });

// ---- SYSFS_PATH ---------------------------------------------------------------------------------

TEST(SysfsPath, IbvGetSysfsPathHonoursSysfsPathWithoutItsTrailingSlashes) {
  // In a child, where the path has not been looked up yet.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("SYSFS_PATH", "/tmp/softhca-sysfs//", 1);
    _exit(std::strcmp(ibv_get_sysfs_path(), "/tmp/softhca-sysfs") == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const pid_t plain = fork();
  ASSERT_GE(plain, 0);
  if (plain == 0) {
    unsetenv("SYSFS_PATH");
    _exit(std::strcmp(ibv_get_sysfs_path(), "/sys") == 0 ? 0 : 1);
  }
  ASSERT_EQ(waitpid(plain, &status, 0), plain);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace softhca::conformance
