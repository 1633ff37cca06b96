// Memory windows with the real device model (device_rig.h): a bind is a WQE and nothing more (the
// doorbell, the WQE's fetch and its CQE: no payload DMA, no packet), and a WRITE through the
// window moves the bytes its MR's key would, with the same payload TLPs.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <numeric>
#include <vector>

#include "device_rig.h"
#include "driver/provider.h"
#include "pcie/counters.h"

namespace softhca::driver::testing {
namespace {

using pcie::TlpCause;
using pcie::TlpType;

class MwDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = open_rig_context(r_);
    ASSERT_NE(ctx_, nullptr);
    pd_ = alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    cq_ = create_cq(ctx_, 15, nullptr, 0);
    ASSERT_NE(cq_, nullptr);
    qp_ = rc_qp(pd_, cq_);
    ASSERT_NE(qp_, nullptr);
    ASSERT_EQ(to_rts(qp_, qp_->qp_num, r_.dev.lid()), 0);
    std::iota(buf_.begin(), buf_.begin() + 4096, uint8_t{3});
    mr_ = reg_mr(pd_, buf_.data(), buf_.size(), reinterpret_cast<uintptr_t>(buf_.data()),
                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
    ASSERT_NE(mr_, nullptr);
    mw_ = alloc_mw(pd_, IBV_MW_TYPE_1);
    ASSERT_NE(mw_, nullptr) << errno;
  }
  void TearDown() override {
    EXPECT_EQ(dealloc_mw(mw_), 0);
    EXPECT_EQ(dereg_mr(mr_), 0);
    EXPECT_EQ(destroy_qp(qp_), 0);
    EXPECT_EQ(destroy_cq(cq_), 0);
    EXPECT_EQ(dealloc_pd(pd_), 0);
    EXPECT_EQ(close_context(ctx_), 0);
    EXPECT_EQ(r_.dev.object_counts().mkeys, 0u);
    EXPECT_EQ(r_.bridge.faults, 0);
  }
  uint64_t at(size_t offset) const { return reinterpret_cast<uintptr_t>(buf_.data() + offset); }
  // One signaled WR, completed; its completion.
  ibv_wc run(ibv_send_wr& wr) {
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(post_send(qp_, &wr, &bad), 0);
    r_.loop.pump(r_.dev);
    ibv_wc wc{};
    EXPECT_EQ(poll_cq(cq_, 1, &wc), 1);
    return wc;
  }
  ibv_wc write(uint32_t rkey, size_t from, size_t to, uint32_t len) {
    ibv_sge sge{at(from), len, mr_->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = len > 0 ? 1 : 0;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = at(to);
    wr.wr.rdma.rkey = rkey;
    return run(wr);
  }

  Rig r_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_mr* mr_ = nullptr;
  ibv_mw* mw_ = nullptr;
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(16384);
};

TEST_F(MwDevice, ABindCostsTheTlpsOfAnEmptyWqeAndNoneOfItsOwn) {
  // Reference: a zero-length WRITE (doorbell, WQE fetch, CQE; its packet and ACK move no DMA).
  const pcie::CounterSnapshot t0 = r_.counters.snapshot();
  ASSERT_EQ(write(mr_->rkey, 0, 8192, 0).status, IBV_WC_SUCCESS);
  const pcie::CounterSnapshot empty = r_.counters.snapshot() - t0;
  ASSERT_EQ(empty.tlps(TlpType::kMWr, TlpCause::kDoorbell), 1u);

  ibv_mw_bind b{};
  b.wr_id = 9;
  b.send_flags = IBV_SEND_SIGNALED;
  b.bind_info = ibv_mw_bind_info{mr_, at(8192), 4096, IBV_ACCESS_REMOTE_WRITE};
  const pcie::CounterSnapshot t1 = r_.counters.snapshot();
  ASSERT_EQ(mw_->context->ops.bind_mw(qp_, mw_, &b), 0);
  r_.loop.pump(r_.dev);
  ibv_wc wc{};
  ASSERT_EQ(poll_cq(cq_, 1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wc.wr_id, 9u);
  const pcie::CounterSnapshot bind = r_.counters.snapshot() - t1;
  for (size_t c = 0; c < pcie::kTlpCauseCount; ++c) {
    const auto cause = static_cast<TlpCause>(c);
    EXPECT_EQ(bind.by_cause(cause).tlps, empty.by_cause(cause).tlps) << pcie::to_string(cause);
  }
  EXPECT_EQ(bind.by_cause(TlpCause::kPayloadRead).tlps + bind.by_cause(TlpCause::kPayloadWrite).tlps, 0u);

  // Through the window: the bytes and the payload TLPs of the same WRITE through the MR.
  const pcie::CounterSnapshot t2 = r_.counters.snapshot();
  ASSERT_EQ(write(mr_->rkey, 0, 4096, 2048).status, IBV_WC_SUCCESS);
  const pcie::CounterSnapshot via_mr = r_.counters.snapshot() - t2;
  const pcie::CounterSnapshot t3 = r_.counters.snapshot();
  ASSERT_EQ(write(mw_->rkey, 0, 8192, 2048).status, IBV_WC_SUCCESS);
  const pcie::CounterSnapshot via_mw = r_.counters.snapshot() - t3;
  EXPECT_EQ(std::vector<uint8_t>(buf_.begin() + 8192, buf_.begin() + 8192 + 2048),
            std::vector<uint8_t>(buf_.begin(), buf_.begin() + 2048));
  EXPECT_EQ(via_mw.by_cause(TlpCause::kPayloadWrite).tlps, via_mr.by_cause(TlpCause::kPayloadWrite).tlps);
  EXPECT_EQ(via_mw.by_cause(TlpCause::kPayloadRead).tlps, via_mr.by_cause(TlpCause::kPayloadRead).tlps);
  EXPECT_GT(via_mw.by_cause(TlpCause::kPayloadWrite).tlps, 0u);

  // The MR is held while the window is bound; unbound, it may go (TearDown).
  EXPECT_EQ(dereg_mr(mr_), EBUSY);
  b.bind_info = ibv_mw_bind_info{nullptr, 0, 0, 0};
  ASSERT_EQ(mw_->context->ops.bind_mw(qp_, mw_, &b), 0);
  r_.loop.pump(r_.dev);
  ASSERT_EQ(poll_cq(cq_, 1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace softhca::driver::testing
