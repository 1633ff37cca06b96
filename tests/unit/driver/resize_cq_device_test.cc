// resize_cq with the real device model writing the CQEs (device_rig.h): completions pending at the
// resize come out first and in order, the device's later CQEs land in the new ring, an armed CQ
// still raises its event for the first CQE after the switch, the device refuses a size below what
// is outstanding, and the resize itself is no PCIe transaction (a command and host-side copying:
// the later CQEs are one MWr each, as always).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "device_rig.h"
#include "driver/provider.h"
#include "hwif/cmd.h"
#include "hwif/cqe.h"
#include "pcie/host_kernel.h"

namespace softhca::driver::testing {
namespace {


constexpr uint32_t kSendWrs = 64;  // room for every WRITE a test leaves unpolled

// Two RC QPs of one device connected to each other through its looped-back port, sharing one CQ
// (15 entries) with a completion channel; signaled RDMA WRITEs from a to b, wr_id = sequence.
class ResizeCqDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = open_rig_context(r_);
    ASSERT_NE(ctx_, nullptr);
    pd_ = alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    ch_ = create_comp_channel(ctx_);
    ASSERT_NE(ch_, nullptr);
    cq_ = create_cq(ctx_, 15, ch_, 0);
    ASSERT_NE(cq_, nullptr);
    a_ = rc_qp(pd_, cq_, kSendWrs);
    b_ = rc_qp(pd_, cq_);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    ASSERT_EQ(to_rts(a_, b_->qp_num, r_.dev.lid()), 0);
    ASSERT_EQ(to_rts(b_, a_->qp_num, r_.dev.lid()), 0);
    mr_ = reg_mr(pd_, buf_.data(), buf_.size(), reinterpret_cast<uintptr_t>(buf_.data()),
                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(mr_, nullptr);
  }
  void TearDown() override {
    EXPECT_EQ(dereg_mr(mr_), 0);
    EXPECT_EQ(destroy_qp(a_), 0);
    EXPECT_EQ(destroy_qp(b_), 0);
    EXPECT_EQ(destroy_cq(cq_), 0);
    EXPECT_EQ(destroy_comp_channel(ch_), 0);
    EXPECT_EQ(dealloc_pd(pd_), 0);
    EXPECT_EQ(close_context(ctx_), 0);
    EXPECT_EQ(r_.kernel.buffers_held(), 0u);  // every ring, the old ones too, went back once
    EXPECT_EQ(r_.kernel.mismatches, 0);
    EXPECT_EQ(r_.bridge.faults, 0);
  }
  // n signaled WRITEs of 64 bytes from the first half of buf_ into its second half, completed.
  void write(uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data()), 64, mr_->lkey};
      ibv_send_wr wr{};
      wr.wr_id = next_wr_++;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf_.data() + buf_.size() / 2);
      wr.wr.rdma.rkey = mr_->rkey;
      ibv_send_wr* bad = nullptr;
      ASSERT_EQ(post_send(a_, &wr, &bad), 0);
      r_.loop.pump(r_.dev);
    }
  }
  std::vector<uint64_t> poll_all() {
    std::vector<uint64_t> ids;
    ibv_wc wc{};
    while (poll_cq(cq_, 1, &wc) == 1) {
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      EXPECT_EQ(wc.qp_num, a_->qp_num);
      ids.push_back(wc.wr_id);
    }
    return ids;
  }
  static std::vector<uint64_t> range(uint64_t first, uint64_t end) {
    std::vector<uint64_t> v;
    for (uint64_t i = first; i < end; ++i) v.push_back(i);
    return v;
  }

  Rig r_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* ch_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* a_ = nullptr;
  ibv_qp* b_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(8192, 0x5a);
  uint64_t next_wr_ = 0;
};

TEST_F(ResizeCqDevice, PendingCompletionsComeFirstAndTheDevicesLaterCqesLandInTheNewRing) {
  write(6);
  ibv_wc wc{};
  ASSERT_EQ(poll_cq(cq_, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 0u);
  const pcie::CounterSnapshot before = r_.counters.snapshot();
  ASSERT_EQ(resize_cq(cq_, 100), 0);
  // Expect: the resize costs no TLP (commands are not PCIe traffic, the copy is host memory).
  EXPECT_EQ((r_.counters.snapshot() - before).total().tlps, 0u);
  EXPECT_EQ(cq_->cqe, 127);
  // 20 more: more than the old ring had room for, so only the new ring can hold them all.
  const pcie::CounterSnapshot mid = r_.counters.snapshot();
  write(20);
  EXPECT_EQ((r_.counters.snapshot() - mid).tlps(pcie::TlpType::kMWr, pcie::TlpCause::kCqeWrite), 20u);
  EXPECT_EQ(poll_all(), range(1, 26));
  EXPECT_EQ(r_.dev.stats().cq_overruns, 0u);
}

TEST_F(ResizeCqDevice, AShrunkCqWrapsInItsNewSize) {
  write(10);
  EXPECT_EQ(poll_all(), range(0, 10));
  write(3);
  ASSERT_EQ(resize_cq(cq_, 3), 0);  // 4 entries; consumer index 10 is in its third pass
  EXPECT_EQ(cq_->cqe, 3);
  EXPECT_EQ(poll_all(), range(10, 13));
  for (int round = 0; round < 5; ++round) {
    write(3);
    EXPECT_EQ(poll_all(), range(13 + 3 * round, 16 + 3 * round)) << "round " << round;
  }
  EXPECT_EQ(r_.dev.stats().cq_overruns, 0u);
}

TEST_F(ResizeCqDevice, AnArmedCqRaisesItsEventForTheFirstCqeAfterTheResize) {
  write(2);
  EXPECT_EQ(poll_all(), range(0, 2));
  ASSERT_EQ(req_notify_cq(cq_, 0), 0);  // with everything polled: armed for the next CQE
  ASSERT_EQ(resize_cq(cq_, 50), 0);
  EXPECT_EQ(r_.bridge.msis, 0);  // Expect: the resize raises nothing
  write(1);
  EXPECT_EQ(r_.bridge.msis, 1);
  ibv_cq* got = nullptr;
  void* cq_ctx = nullptr;
  ASSERT_EQ(get_cq_event(ch_, &got, &cq_ctx), 0);
  EXPECT_EQ(got, cq_);
  ack_cq_events(cq_, 1);
  EXPECT_EQ(poll_all(), range(2, 3));
}

TEST_F(ResizeCqDevice, TheDeviceRefusesASizeBelowTheOutstandingCqesAndKeepsTheOldRing) {
  write(5);
  // The driver's own check answers first; the device's, at the switch, is the one that counts
  // when CQEs arrive in between: asked directly, it refuses too and changes nothing.
  EXPECT_EQ(resize_cq(cq_, 4), EINVAL);
  const pcie::DmaMemory ring = r_.kernel.alloc_coherent(8 * hwif::kCqeBytes);
  hwif::ResizeCqIn in;
  in.cqn = cq_->handle;
  in.ring_addr = ring.dma_addr;
  in.log_nent = 3;
  in.cqe = 4;
  hwif::ResizeCqOut out;
  EXPECT_EQ(hwif::exec_cmd(r_.dev, in, out), EINVAL);
  in.cqe = 8;  // not below the ring size
  EXPECT_EQ(hwif::exec_cmd(r_.dev, in, out), EINVAL);
  in.cqn = cq_->handle + 1000;  // names no CQ
  in.cqe = 5;
  EXPECT_EQ(hwif::exec_cmd(r_.dev, in, out), EINVAL);
  r_.kernel.free_coherent(ring);
  EXPECT_EQ(cq_->cqe, 15);
  write(1);
  EXPECT_EQ(poll_all(), range(0, 6));
}

}  // namespace
}  // namespace softhca::driver::testing
