// resize_cq against the fake device: the CQEs not yet polled move to the new ring in order, each
// at its slot of the new size with that size's owner bit; the sizes it refuses (and that it
// refuses them before any command); a device error leaving the old ring in place; and a resize
// as one command and no PCIe transaction (the copy is host-side work).
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <vector>

#include "fake_device.h"
#include "test_util.h"

namespace softhca::driver::testing {
namespace {

constexpr uint8_t kInvalidOpOwn = 0xf0;  // opcode 0xF (invalid), owner 0: a slot never written

hwif::Cqe64 send_cqe(ibv_qp* qp, uint16_t wqe_counter) {
  hwif::Cqe64 c{};
  c.sop_drop_qpn = (uint32_t{static_cast<uint8_t>(hwif::WqeOpcode::kSend)} << 24) | qp->qp_num;
  c.wqe_counter = wqe_counter;
  return c;
}


size_t resize_commands(const FakeDevice& dev) {
  size_t n = 0;
  for (hwif::CmdOpcode op : dev.log) n += op == hwif::CmdOpcode::kResizeCq ? 1 : 0;
  return n;
}

// A CQ of 15 (16 entries) and an RC QP in RTS whose signaled sends are numbered by wr_id = the
// WQE index; the test plays the device, writing a CQE per send at the producer index pi_.
class ResizeCq : public ::testing::Test {
 protected:
  void SetUp() override {
    cq_ = h_.cq(15);
    qp_ = h_.qp(IBV_QPT_RC, 16, 1, 0, 0, false, cq_);
    h_.to_rts(qp_);
  }
  void post(uint64_t id) {
    ibv_send_wr wr = send_wr(id, &sge_, 1, IBV_WR_SEND, IBV_SEND_SIGNALED);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(post_send(qp_, &wr, &bad), 0);
  }
  // Posts n sends and completes them: CQEs at pi_, pi_+1, ... of the ring of 2^log_nent entries.
  void complete(uint32_t n, uint32_t log_nent) {
    for (uint32_t i = 0; i < n; ++i) {
      post(next_wr_);
      write_cqe(h_.cqes(cq_), log_nent, pi_++, send_cqe(qp_, static_cast<uint16_t>(next_wr_)), hwif::CqeOpcode::kReq);
      ++next_wr_;
    }
    h_.dev.cq_pi[cq_->handle] = pi_;
  }
  // Polls one at a time until empty; the wr_ids in order.
  std::vector<uint64_t> poll_all() {
    std::vector<uint64_t> ids;
    ibv_wc wc{};
    while (poll_cq(cq_, 1, &wc) == 1) {
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      ids.push_back(wc.wr_id);
    }
    return ids;
  }
  static std::vector<uint64_t> range(uint64_t first, uint64_t end) {
    std::vector<uint64_t> v;
    for (uint64_t i = first; i < end; ++i) v.push_back(i);
    return v;
  }

  DeviceHarness h_;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  std::array<uint8_t, 64> buf_{};
  ibv_sge sge_{addr_of(buf_.data()), 64, 0x100};
  uint32_t pi_ = 0;
  uint64_t next_wr_ = 0;
};

TEST_F(ResizeCq, GrowingMovesTheUnpolledCqesInOrderAndIsOneCommandAndNoTlp) {
  complete(12, 4);
  std::array<ibv_wc, 3> wc{};
  ASSERT_EQ(poll_cq(cq_, 3, wc.data()), 3);  // consumer index 3: CQEs 3..11 are outstanding
  const uint64_t old_ring = h_.dev.cqs.at(cq_->handle).ring_addr;
  const size_t buffers = h_.kernel.buffers_held();
  const size_t mmio = h_.dev.mmio.size();
  const pcie::CounterSnapshot before = h_.counters.snapshot();

  ASSERT_EQ(resize_cq(cq_, 40), 0);
  // Expect: 40 rounds up to 64 entries, reported as 63 usable.
  EXPECT_EQ(cq_->cqe, 63);
  ASSERT_EQ(h_.dev.resizes.size(), 1u);
  const hwif::ResizeCqIn& cmd = h_.dev.resizes[0];
  EXPECT_EQ(cmd.cqn, cq_->handle);
  EXPECT_EQ(cmd.log_nent, 6u);
  EXPECT_EQ(cmd.cqe, 40u);
  EXPECT_NE(cmd.ring_addr, old_ring);
  // Expect: one command, no MMIO write, no TLP at all; the old ring went back to the kernel.
  EXPECT_EQ(resize_commands(h_.dev), 1u);
  EXPECT_EQ(h_.dev.mmio.size(), mmio);
  EXPECT_EQ((h_.counters.snapshot() - before).total().tlps, 0u);
  EXPECT_EQ(h_.kernel.buffers_held(), buffers);

  // Expect: the new ring holds CQEs 3..11 at slots 3..11 (first pass: owner 0); 12 on are unwritten.
  const hwif::Cqe64* ring = h_.cqes(cq_);
  for (uint32_t i = 3; i < 12; ++i) {
    EXPECT_EQ(ring[i].wqe_counter.get(), i) << "slot " << i;
    EXPECT_EQ(ring[i].op_own, static_cast<uint8_t>(hwif::CqeOpcode::kReq) << 4) << "slot " << i;
  }
  for (uint32_t i = 12; i < 64; ++i) EXPECT_EQ(ring[i].op_own, kInvalidOpOwn) << "slot " << i;
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(ring[i].op_own, kInvalidOpOwn) << "slot " << i;

  // The device goes on at pi 12 in the new ring: polled after the moved ones, nothing twice.
  complete(2, 6);
  EXPECT_EQ(poll_all(), range(3, 14));
  EXPECT_EQ(h_.cq_dbrec(cq_)->set_ci.get(), 14u);
}

TEST_F(ResizeCq, ShrinkingAcrossAWrapGivesEachCqeTheOwnerBitOfItsIndexInTheNewSize) {
  complete(14, 4);
  EXPECT_EQ(poll_all(), range(0, 14));
  complete(6, 4);  // indices 14..19: slots 14, 15 (owner 0) and 0..3 (owner 1) of 16
  ASSERT_EQ(resize_cq(cq_, 7), 0);
  EXPECT_EQ(cq_->cqe, 7);
  EXPECT_EQ(h_.dev.resizes.at(0).log_nent, 3u);
  // Expect: index i at slot i & 7 with owner (i >> 3) & 1: 14, 15 -> slots 6, 7 owner 1;
  // 16..19 -> slots 0..3 owner 0.
  const hwif::Cqe64* ring = h_.cqes(cq_);
  for (uint32_t i = 14; i < 20; ++i) {
    const hwif::Cqe64& c = ring[i & 7];
    EXPECT_EQ(c.wqe_counter.get(), i) << "index " << i;
    EXPECT_EQ(c.owner(), (i >> 3) & 1) << "index " << i;
  }
  EXPECT_EQ(ring[4].op_own, kInvalidOpOwn);
  EXPECT_EQ(ring[5].op_own, kInvalidOpOwn);
  // The device's next CQE, index 20, goes to slot 4 with owner 0; then all seven come out in order.
  complete(1, 3);
  EXPECT_EQ(poll_all(), range(14, 21));
}

TEST_F(ResizeCq, FewerEntriesThanCqesNotYetPolledIsEinvalBeforeAnyCommandAndExactlyAsManyWorks) {
  complete(5, 4);
  // Expect: 4 < 5 outstanding, although 4 rounds up to 8 entries (judged by what was asked for).
  EXPECT_EQ(resize_cq(cq_, 4), EINVAL);
  EXPECT_EQ(resize_commands(h_.dev), 0u);
  EXPECT_EQ(cq_->cqe, 15);
  // Expect: 5 fits them.
  ASSERT_EQ(resize_cq(cq_, 5), 0);
  EXPECT_EQ(cq_->cqe, 7);
  EXPECT_EQ(poll_all(), range(0, 5));
}

TEST_F(ResizeCq, ZeroNegativeAboveMaxCqeAndNullAreEinvalAndTheSameRingSizeIsNoCommand) {
  EXPECT_EQ(resize_cq(nullptr, 16), EINVAL);
  EXPECT_EQ(resize_cq(cq_, 0), EINVAL);
  EXPECT_EQ(resize_cq(cq_, -1), EINVAL);
  EXPECT_EQ(resize_cq(cq_, static_cast<int>(h_.dev.caps.max_cqe) + 1), EINVAL);
  EXPECT_EQ(resize_commands(h_.dev), 0u);
  EXPECT_EQ(cq_->cqe, 15);
  // Expect: 9..15 all round up to the 16 entries the CQ has: success, nothing moves.
  const size_t buffers = h_.kernel.buffers_held();
  EXPECT_EQ(resize_cq(cq_, 9), 0);
  EXPECT_EQ(resize_cq(cq_, 15), 0);
  EXPECT_EQ(resize_commands(h_.dev), 0u);
  EXPECT_EQ(cq_->cqe, 15);
  EXPECT_EQ(h_.kernel.buffers_held(), buffers);
}

TEST_F(ResizeCq, ADeviceErrorLeavesTheCqOnItsOldRingWithItsCqes) {
  complete(3, 4);
  const uint64_t old_ring = h_.dev.cqs.at(cq_->handle).ring_addr;
  const size_t buffers = h_.kernel.buffers_held();
  h_.dev.fail_op = hwif::CmdOpcode::kResizeCq;
  h_.dev.fail_err = ENOMEM;
  EXPECT_EQ(resize_cq(cq_, 100), ENOMEM);
  EXPECT_EQ(cq_->cqe, 15);
  EXPECT_EQ(h_.kernel.buffers_held(), buffers);  // the new ring was given back
  EXPECT_EQ(h_.dev.cqs.at(cq_->handle).ring_addr, old_ring);
  complete(1, 4);
  EXPECT_EQ(poll_all(), range(0, 4));
}

TEST_F(ResizeCq, ResizingOverAndOverKeepsEveryCompletionOnceAndInOrder) {
  // Sizes up and down, each resize with CQEs pending that straddle the old ring's end.
  constexpr std::array<int, 8> kSizes = {63, 7, 30, 200, 12, 4, 1000, 15};  // 64, 8, 32, 256, 16, 8, 1024, 16 entries
  uint32_t log_nent = 4;
  uint64_t polled = 0;
  for (int size : kSizes) {
    complete(5, log_nent);
    ibv_wc wc{};
    ASSERT_EQ(poll_cq(cq_, 1, &wc), 1);
    EXPECT_EQ(wc.wr_id, polled++);
    ASSERT_EQ(resize_cq(cq_, size), 0) << "to " << size;
    log_nent = h_.dev.cqs.at(cq_->handle).log_nent;
    EXPECT_EQ(cq_->cqe, (1 << log_nent) - 1);
    // Expect: the 4 still pending come next; the QP's 16 WRs are all free again afterwards.
    for (int i = 0; i < 4; ++i) {
      ASSERT_EQ(poll_cq(cq_, 1, &wc), 1) << "after resizing to " << size;
      EXPECT_EQ(wc.wr_id, polled++);
    }
    EXPECT_EQ(poll_cq(cq_, 1, &wc), 0);
  }
  EXPECT_EQ(polled, 5 * kSizes.size());
  EXPECT_EQ(resize_commands(h_.dev), kSizes.size());
}

}  // namespace
}  // namespace softhca::driver::testing
