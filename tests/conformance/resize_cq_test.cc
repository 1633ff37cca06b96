// ibv_resize_cq through the public verbs API (ibv_resize_cq(3)): a CQ grown or shrunk with
// completions not yet polled still returns every one of them, in order, with their bytes and
// lengths; a size below those completions, 0, a negative size, one above max_cqe and a NULL CQ are
// EINVAL and leave the CQ working; an armed CQ still raises its event after a resize; and a CQ
// resized over and over while another thread sends into it loses no completion. SENDs from A
// (softhca_0) to B (softhca_1), received into B's CQ under test; wr_ids are sequence numbers.
#include <fcntl.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "verbs_pair.h"

namespace softhca::conformance {
namespace {

constexpr size_t kSrcOff = 0;
constexpr size_t kDstOff = 2 * kMiB;
constexpr uint32_t kSlotBytes = 4096;  // each message's own slot at A and at B
constexpr uint32_t kSlots = 256;
constexpr uint64_t kRecvIdBase = 1000;

class ResizeCq : public VerbsPair {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices)); }

  // B's receive CQ of `cqe` entries (optionally with a channel) and an RC pair using it.
  void make_pair(int cqe, ibv_comp_channel* channel = nullptr, uint32_t depth = 64) {
    cq_ = create_cq(b_, cqe, channel);
    ASSERT_NE(cq_, nullptr) << errno_name(errno);
    QpOptions o;
    o.recv_cq_b = cq_;
    o.max_send_wr = depth;
    o.max_recv_wr = depth;
    ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, o, &p_));
    fill_pattern(a_.bytes().first(kDstOff), 29);
  }
  // Message seq: a receive (wr_id kRecvIdBase + seq) into B's slot seq % kSlots, then a SEND of
  // 100 + seq % 900 bytes from A's slot; A's send completion is waited for, so B's receive
  // completion is in cq_ when this returns.
  void send(uint64_t seq) {
    const uint32_t slot = static_cast<uint32_t>(seq % kSlots);
    ibv_sge recv = b_.sge(kDstOff + slot * kSlotBytes, kSlotBytes);
    ASSERT_EQ(post_recv(p_.b, kRecvIdBase + seq, std::span(&recv, 1)), 0);
    ibv_sge sge = a_.sge(kSrcOff + slot * kSlotBytes, length(seq));
    SendArgs args;
    args.wr_id = seq;
    ASSERT_EQ(post_send(p_.a, args, std::span(&sge, 1)), 0);
    const ibv_wc wc = poll_one(a_.cq);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
    ASSERT_EQ(wc.wr_id, seq);
  }
  static uint32_t length(uint64_t seq) { return 100 + static_cast<uint32_t>(seq % 900); }
  // n completions from cq_, which must be messages first, first + 1, ... with their bytes.
  void expect_received(uint64_t first, size_t n) {
    std::vector<ibv_wc> wcs;
    ASSERT_TRUE(poll_completions(cq_, n, wcs));
    for (size_t i = 0; i < n; ++i) {
      const uint64_t seq = first + i;
      SCOPED_TRACE("message " + std::to_string(seq));
      EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS) << wc_status_name(wcs[i].status);
      EXPECT_EQ(wcs[i].opcode, IBV_WC_RECV);
      EXPECT_EQ(wcs[i].wr_id, kRecvIdBase + seq);
      EXPECT_EQ(wcs[i].byte_len, length(seq));
      const size_t slot = seq % kSlots;
      EXPECT_TRUE(same_bytes({b_.buf + kDstOff + slot * kSlotBytes, length(seq)},
                             {a_.buf + kSrcOff + slot * kSlotBytes, length(seq)}));
    }
  }

  ibv_cq* cq_ = nullptr;
  QpPair p_;
};

TEST_F(ResizeCq, GrowingAndShrinkingWithCompletionsPendingKeepsThemAllInOrder) {
  ASSERT_NO_FATAL_FAILURE(make_pair(16));
  EXPECT_EQ(cq_->cqe, 31);  // 16 + 1 rounded up to 32 entries
  for (uint64_t s = 0; s < 10; ++s) ASSERT_NO_FATAL_FAILURE(send(s));
  ASSERT_NO_FATAL_FAILURE(expect_received(0, 2));

  // Expect: 8 pending, grown to 200 (256 entries).
  ASSERT_EQ(ibv_resize_cq(cq_, 200), 0);
  EXPECT_EQ(cq_->cqe, 255);
  for (uint64_t s = 10; s < 15; ++s) ASSERT_NO_FATAL_FAILURE(send(s));
  // Expect: 13 pending, shrunk to exactly 13 (16 entries).
  ASSERT_EQ(ibv_resize_cq(cq_, 13), 0);
  EXPECT_EQ(cq_->cqe, 15);
  ASSERT_NO_FATAL_FAILURE(expect_received(2, 13));
  EXPECT_TRUE(cq_is_empty(cq_));
  // The shrunk CQ goes on through its wrap.
  for (uint64_t s = 15; s < 50; ++s) {
    ASSERT_NO_FATAL_FAILURE(send(s));
    if (s % 5 == 4) {
      ASSERT_NO_FATAL_FAILURE(expect_received(s - 4, 5));
    }
  }
  EXPECT_TRUE(cq_is_empty(cq_));
}

TEST_F(ResizeCq, ASizeBelowTheCompletionsPendingIsEinvalAndTheCqKeepsItsSizeAndCompletions) {
  ASSERT_NO_FATAL_FAILURE(make_pair(16));
  for (uint64_t s = 0; s < 6; ++s) ASSERT_NO_FATAL_FAILURE(send(s));
  // Expect: 5 < 6 pending is refused, though 5 would round up to 8 entries.
  EXPECT_EQ(ibv_resize_cq(cq_, 5), EINVAL);
  EXPECT_EQ(cq_->cqe, 31);
  ASSERT_NO_FATAL_FAILURE(expect_received(0, 6));
  ASSERT_NO_FATAL_FAILURE(send(6));
  ASSERT_NO_FATAL_FAILURE(expect_received(6, 1));
  EXPECT_TRUE(cq_is_empty(cq_));
  // Expect: with nothing pending, 1 is a valid size (2 entries).
  ASSERT_EQ(ibv_resize_cq(cq_, 1), 0);
  EXPECT_EQ(cq_->cqe, 1);
  ASSERT_NO_FATAL_FAILURE(send(7));
  ASSERT_NO_FATAL_FAILURE(expect_received(7, 1));
}

TEST_F(ResizeCq, ZeroNegativeAboveMaxCqeAndANullCqAreEinvalAndTheCqStillWorks) {
  ASSERT_NO_FATAL_FAILURE(make_pair(16));
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(b_.ctx, &attr), 0);
  ASSERT_NO_FATAL_FAILURE(send(0));
  EXPECT_EQ(ibv_resize_cq(cq_, 0), EINVAL);
  EXPECT_EQ(ibv_resize_cq(cq_, -1), EINVAL);
  EXPECT_EQ(ibv_resize_cq(cq_, -1000000), EINVAL);
  EXPECT_EQ(ibv_resize_cq(cq_, attr.max_cqe + 1), EINVAL);
  EXPECT_EQ(ibv_resize_cq(nullptr, 16), EINVAL);
  EXPECT_EQ(cq_->cqe, 31);
  ASSERT_NO_FATAL_FAILURE(send(1));
  ASSERT_NO_FATAL_FAILURE(expect_received(0, 2));
  EXPECT_TRUE(cq_is_empty(cq_));
}

TEST_F(ResizeCq, AnArmedCqStillRaisesItsEventForTheFirstCompletionAfterTheResize) {
  ibv_comp_channel* channel = create_channel(b_);
  ASSERT_NE(channel, nullptr) << errno_name(errno);
  ASSERT_EQ(fcntl(channel->fd, F_SETFL, fcntl(channel->fd, F_GETFL) | O_NONBLOCK), 0);
  ASSERT_NO_FATAL_FAILURE(make_pair(8, channel));
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  // A completion pending across both resizes: the arm after them still sees it (the consumer
  // index behind it) and fires at once.
  ASSERT_NO_FATAL_FAILURE(send(0));
  ASSERT_EQ(ibv_resize_cq(cq_, 100), 0);
  ASSERT_EQ(ibv_resize_cq(cq_, 3), 0);
  EXPECT_EQ(cq_->cqe, 3);
  ASSERT_EQ(ibv_req_notify_cq(cq_, 0), 0);
  ASSERT_TRUE(wait_cq_event(channel, &ev_cq, &ev_ctx));
  EXPECT_EQ(ev_cq, cq_);
  ibv_ack_cq_events(ev_cq, 1);
  ASSERT_NO_FATAL_FAILURE(expect_received(0, 1));
  // Armed with nothing pending, then resized twice: no event until the next completion, then one.
  ASSERT_EQ(ibv_req_notify_cq(cq_, 0), 0);
  ASSERT_EQ(ibv_resize_cq(cq_, 100), 0);
  ASSERT_EQ(ibv_resize_cq(cq_, 3), 0);
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_ctx), -1);
  EXPECT_EQ(errno, EAGAIN);
  ASSERT_NO_FATAL_FAILURE(send(1));
  ASSERT_TRUE(wait_cq_event(channel, &ev_cq, &ev_ctx));  // Expect: one for the new completion
  EXPECT_EQ(ev_cq, cq_);
  ibv_ack_cq_events(ev_cq, 1);
  ASSERT_NO_FATAL_FAILURE(expect_received(1, 1));
  EXPECT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_ctx), -1);  // and only one
  EXPECT_EQ(errno, EAGAIN);
}

// Another thread sends (and so runs the devices, writing B's CQEs) while this one polls and resizes
// B's CQ after every few completions. The sender keeps at most kWindow messages unpolled, so every
// size tried (>= kWindow) holds them and the CQ never overruns.
TEST_F(ResizeCq, ACqResizedOverAndOverWhileAnotherThreadSendsLosesNoCompletion) {
  constexpr uint64_t kMessages = 2000;
  constexpr uint64_t kWindow = 16;
  constexpr int kSizes[] = {16, 17, 255, 31, 1000, 20, 64, 16, 127, 40};
  ASSERT_NO_FATAL_FAILURE(make_pair(16, nullptr, 2 * kWindow));
  std::atomic<uint64_t> polled{0};
  std::atomic<bool> sender_failed{false};
  std::thread sender([&] {
    for (uint64_t s = 0; s < kMessages && !sender_failed.load(); ++s) {
      const auto deadline = std::chrono::steady_clock::now() + kDeadline;
      while (s - polled.load() >= kWindow) {
        if (std::chrono::steady_clock::now() > deadline) {
          sender_failed.store(true);
          return;
        }
        std::this_thread::yield();
      }
      send(s);
      if (::testing::Test::HasFatalFailure()) sender_failed.store(true);
    }
  });
  uint64_t next = 0;
  size_t resizes = 0;
  while (next < kMessages && !sender_failed.load()) {
    std::vector<ibv_wc> wcs;
    if (!poll_completions(cq_, 1, wcs)) break;
    ASSERT_EQ(wcs[0].status, IBV_WC_SUCCESS) << "message " << next;
    ASSERT_EQ(wcs[0].wr_id, kRecvIdBase + next) << "lost or repeated";
    ASSERT_EQ(wcs[0].byte_len, length(next));
    polled.store(++next);
    if (next % 7 == 0) {
      const int size = kSizes[resizes % std::size(kSizes)];
      ASSERT_EQ(ibv_resize_cq(cq_, size), 0) << "to " << size << " after message " << next;
      ++resizes;
    }
  }
  if (next < kMessages) sender_failed.store(true);
  sender.join();
  EXPECT_FALSE(sender_failed.load());
  EXPECT_EQ(next, kMessages);
  EXPECT_EQ(resizes, kMessages / 7);
  EXPECT_TRUE(cq_is_empty(cq_));
}

}  // namespace
}  // namespace softhca::conformance
