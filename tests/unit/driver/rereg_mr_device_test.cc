// rereg_mr with the real device model (device_rig.h, DMA addresses that are not pointers): the
// device switches the key to the new translation, so a looped-back RDMA WRITE through the same
// rkey lands in the new range; the new range is pinned before the switch and the old one unpinned
// after, a refused change gives the new pin back and keeps the old; an access change repins only
// when the pages must become writable; and re-registration is no PCIe transaction.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "device_rig.h"
#include "driver/objects.h"
#include "driver/provider.h"
#include "pcie/counters.h"

namespace softhca::driver::testing {
namespace {

constexpr size_t kRange = 4096;


// One RC QP connected to itself; src_ registered for local reads, the MR under test over range X
// of buf_ (then Y) for remote writes.
class ReregMrDevice : public ::testing::Test {
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
    for (size_t i = 0; i < kRange; ++i) src_[i] = static_cast<uint8_t>(i * 7 + 1);
    src_mr_ = reg_mr(pd_, src_.data(), src_.size(), reinterpret_cast<uintptr_t>(src_.data()), 0);
    ASSERT_NE(src_mr_, nullptr);
    mr_ = reg_mr(pd_, x(), kRange, reinterpret_cast<uintptr_t>(x()), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(mr_, nullptr);
    mr_->addr = x();  // what the verbs layer sets
    mr_->length = kRange;
  }
  void TearDown() override {
    EXPECT_EQ(dereg_mr(mr_), 0);
    EXPECT_EQ(dereg_mr(src_mr_), 0);
    EXPECT_EQ(destroy_qp(qp_), 0);
    EXPECT_EQ(destroy_cq(cq_), 0);
    EXPECT_EQ(dealloc_pd(pd_), 0);
    EXPECT_EQ(close_context(ctx_), 0);
    EXPECT_EQ(r_.kernel.pins_held(), 0u);  // every pin, the replaced ones too, went back once
    EXPECT_EQ(r_.kernel.mismatches, 0);
    EXPECT_EQ(r_.bridge.faults, 0);
  }
  uint8_t* x() { return buf_.data(); }
  uint8_t* y() { return buf_.data() + 2 * kRange; }
  // A signaled RDMA WRITE of kRange bytes of src_ to `remote` through mr_'s rkey; its status.
  ibv_wc_status write_to(const uint8_t* remote) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(src_.data()), static_cast<uint32_t>(kRange), src_mr_->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(remote);
    wr.wr.rdma.rkey = mr_->rkey;
    ibv_send_wr* bad = nullptr;
    if (post_send(qp_, &wr, &bad) != 0) return IBV_WC_GENERAL_ERR;
    r_.loop.pump(r_.dev);
    ibv_wc wc{};
    if (poll_cq(cq_, 1, &wc) != 1) return IBV_WC_GENERAL_ERR;
    return wc.status;
  }

  Rig r_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_mr* src_mr_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::vector<uint8_t> src_ = std::vector<uint8_t>(kRange);
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(4 * kRange, 0);
};

TEST_F(ReregMrDevice, TheSameRkeyWritesIntoTheNewTranslation) {
  const uint32_t lkey = mr_->lkey;
  const uint32_t rkey = mr_->rkey;
  const FakeKernel::Calls before = r_.kernel.calls;
  const pcie::CounterSnapshot tlps_before = r_.counters.snapshot();
  ASSERT_EQ(rereg_mr(mr_, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, y(), kRange, 0), 0);
  // Expect: no TLP (a command and the host kernel), one new pin, the old one given back, same keys.
  EXPECT_EQ((r_.counters.snapshot() - tlps_before).total().tlps, 0u);
  EXPECT_EQ(r_.kernel.calls.pin - before.pin, 1);
  EXPECT_EQ(r_.kernel.calls.unpin - before.unpin, 1);
  EXPECT_EQ(r_.kernel.pins_held(), 2u);  // src_mr_ and mr_'s new range
  EXPECT_EQ(mr_->lkey, lkey);
  EXPECT_EQ(mr_->rkey, rkey);
  ASSERT_EQ(write_to(y()), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(y(), src_.data(), kRange), 0);
  const std::vector<uint8_t> zeros(kRange, 0);
  EXPECT_EQ(std::memcmp(x(), zeros.data(), kRange), 0);  // Expect: nothing reached the old range
}

TEST_F(ReregMrDevice, ARefusedChangeGivesTheNewPinBackAndKeepsTheOld) {
  const FakeKernel::Calls before = r_.kernel.calls;
  // Remote write without local write: refused by the driver before any pin. A PD the device does
  // not know: refused by the device, after the new range was pinned.
  EXPECT_EQ(rereg_mr(mr_, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_REMOTE_WRITE), EINVAL);
  EXPECT_EQ(r_.kernel.calls.pin, before.pin);
  Pd bogus{};
  bogus.pd.context = ctx_;
  bogus.pdn = 0xfffff;
  EXPECT_EQ(rereg_mr(mr_, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD, &bogus.pd, y(), kRange, 0),
            EINVAL);
  EXPECT_EQ(r_.kernel.calls.pin - before.pin, 1);
  EXPECT_EQ(r_.kernel.calls.unpin - before.unpin, 1);  // the new range's pin
  EXPECT_EQ(r_.kernel.pins_held(), 2u);
  ASSERT_EQ(write_to(x()), IBV_WC_SUCCESS);  // Expect: the old registration still holds
  EXPECT_EQ(std::memcmp(x(), src_.data(), kRange), 0);
  r_.kernel.fail_pin = EFAULT;
  EXPECT_EQ(rereg_mr(mr_, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, y(), kRange, 0), EFAULT);
  EXPECT_EQ(r_.kernel.pins_held(), 2u);
}

TEST_F(ReregMrDevice, AnAccessChangeRepinsOnlyWhenThePagesMustBecomeWritable) {
  ibv_mr* ro = reg_mr(pd_, y(), kRange, reinterpret_cast<uintptr_t>(y()), IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(ro, nullptr);
  ro->addr = y();
  ro->length = kRange;
  FakeKernel::Calls before = r_.kernel.calls;
  ASSERT_EQ(rereg_mr(ro, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, 0), 0);  // read only still
  EXPECT_EQ(r_.kernel.calls.pin, before.pin);
  ASSERT_EQ(rereg_mr(ro, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
            0);
  EXPECT_EQ(r_.kernel.calls.pin - before.pin, 1);
  EXPECT_EQ(r_.kernel.calls.unpin - before.unpin, 1);
  EXPECT_EQ(r_.kernel.last_pin_access, pcie::PinAccess::kWrite);
  EXPECT_EQ(dereg_mr(ro), 0);
}

TEST_F(ReregMrDevice, APdChangeMovesThePdsUsers) {
  ibv_pd* pd2 = alloc_pd(ctx_);
  ASSERT_NE(pd2, nullptr);
  ASSERT_EQ(rereg_mr(mr_, IBV_REREG_MR_CHANGE_PD, pd2, nullptr, 0, 0), 0);
  mr_->pd = pd2;  // what the verbs layer sets
  EXPECT_EQ(dealloc_pd(pd2), EBUSY);
  // Expect: the QP's PD no longer owns the key: the responder refuses the WRITE and nothing lands.
  // (Its requester is the same QP, which the responder's error moved to ERR: the WQE completes
  // flushed; tests/conformance/rereg_mr_test.cc sees the remote access error between two QPs.)
  EXPECT_EQ(write_to(x()), IBV_WC_WR_FLUSH_ERR);
  const std::vector<uint8_t> zeros(kRange, 0);
  EXPECT_EQ(std::memcmp(x(), zeros.data(), kRange), 0);
  ASSERT_EQ(rereg_mr(mr_, IBV_REREG_MR_CHANGE_PD, pd_, nullptr, 0, 0), 0);
  mr_->pd = pd_;
  EXPECT_EQ(dealloc_pd(pd2), 0);
}

}  // namespace
}  // namespace softhca::driver::testing
