// ibv_rereg_mr through the public verbs API (ibv_rereg_mr(3)): a new translation moves where the
// same rkey's RDMA WRITEs land (and the old range is out of bounds for it); an access change lets
// a READ through and refuses a WRITE with a remote access error; a PD change makes the MR
// unusable by a QP of the old PD and keeps the new PD busy; lkey and rkey never change; input
// errors are IBV_REREG_MR_ERR_INPUT with EINVAL and a device refusal IBV_REREG_MR_ERR_CMD with its
// errno, and after either the MR still works as before. A (softhca_0) reads and writes B's
// (softhca_1) MR under test over RC.
#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include <gtest/gtest.h>

#include "verbs_pair.h"

namespace softhca::conformance {
namespace {

constexpr size_t kSrcOff = 0;
constexpr size_t kRangeX = 1 * kMiB;
constexpr size_t kRangeY = 3 * kMiB;
constexpr size_t kRangeBytes = 64 * 1024;
constexpr uint32_t kMsgBytes = 4096;
constexpr unsigned int kRemoteWrite = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

class ReregMr : public VerbsPair {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
    fill_pattern(a_.bytes().first(kMiB), 77);
    mr_ = ibv_reg_mr(b_.pd, b_.buf + kRangeX, kRangeBytes, static_cast<int>(kRemoteWrite));
    ASSERT_NE(mr_, nullptr) << errno_name(errno);
    lkey_ = mr_->lkey;
    rkey_ = mr_->rkey;
  }
  void TearDown() override {
    if (mr_ != nullptr) {
      EXPECT_EQ(ibv_dereg_mr(mr_), 0);
    }
    VerbsPair::TearDown();
  }
  void pair() { ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, QpOptions{}, &p_)); }
  // One RDMA operation from A's bytes at `src` to B's address `remote` through mr_'s rkey; its status.
  ibv_wc_status rdma(ibv_wr_opcode op, size_t src, uint64_t remote, uint64_t wr_id) {
    ibv_sge sge = a_.sge(src, kMsgBytes);
    SendArgs args;
    args.opcode = op;
    args.wr_id = wr_id;
    args.remote_addr = remote;
    args.rkey = rkey_;
    if (post_send(p_.a, args, std::span(&sge, 1)) != 0) return IBV_WC_GENERAL_ERR;
    const ibv_wc wc = poll_one(a_.cq);
    EXPECT_EQ(wc.wr_id, wr_id);
    return wc.status;
  }
  // The MR still takes a WRITE at offset 0 of its current range.
  void expect_usable(size_t range, uint64_t wr_id) {
    ASSERT_EQ(rdma(IBV_WR_RDMA_WRITE, kSrcOff, b_.addr(range), wr_id), IBV_WC_SUCCESS);
    EXPECT_TRUE(same_bytes({b_.buf + range, kMsgBytes}, {a_.buf + kSrcOff, kMsgBytes}));
  }
  void expect_keys_kept() {
    EXPECT_EQ(mr_->lkey, lkey_);
    EXPECT_EQ(mr_->rkey, rkey_);
  }

  ibv_mr* mr_ = nullptr;
  uint32_t lkey_ = 0;
  uint32_t rkey_ = 0;
  QpPair p_;
};

TEST_F(ReregMr, ANewTranslationMovesWhereTheSameRkeyWrites) {
  ASSERT_NO_FATAL_FAILURE(pair());
  ASSERT_NO_FATAL_FAILURE(expect_usable(kRangeX, 1));
  ASSERT_EQ(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, b_.buf + kRangeY, kRangeBytes, 0), 0);
  expect_keys_kept();
  EXPECT_EQ(mr_->addr, b_.buf + kRangeY);
  EXPECT_EQ(mr_->length, kRangeBytes);
  EXPECT_EQ(mr_->pd, b_.pd);
  std::memset(b_.buf + kRangeX, 0, kRangeBytes);
  // Expect: the WRITE at Y's last 4 KiB lands there, X stays as it was.
  ASSERT_EQ(rdma(IBV_WR_RDMA_WRITE, kMsgBytes, b_.addr(kRangeY + kRangeBytes - kMsgBytes), 2), IBV_WC_SUCCESS);
  EXPECT_TRUE(same_bytes({b_.buf + kRangeY + kRangeBytes - kMsgBytes, kMsgBytes}, {a_.buf + kMsgBytes, kMsgBytes}));
  const std::vector<uint8_t> zeros(kRangeBytes, 0);
  EXPECT_TRUE(same_bytes({b_.buf + kRangeX, kRangeBytes}, zeros));
  // Expect: the old range is no longer the key's: out of bounds, a remote access error.
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, kSrcOff, b_.addr(kRangeX), 3), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(same_bytes({b_.buf + kRangeX, kRangeBytes}, zeros));
}

TEST_F(ReregMr, AnAccessChangeTakesEffectForTheNextRequest) {
  ASSERT_NO_FATAL_FAILURE(pair());
  ASSERT_NO_FATAL_FAILURE(expect_usable(kRangeX, 1));
  ASSERT_EQ(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
            0);
  expect_keys_kept();
  fill_pattern({b_.buf + kRangeX, kRangeBytes}, 5);
  // Expect: a READ now passes and brings B's bytes, a WRITE is refused.
  ASSERT_EQ(rdma(IBV_WR_RDMA_READ, 2 * kMsgBytes, b_.addr(kRangeX + kMsgBytes), 2), IBV_WC_SUCCESS);
  EXPECT_TRUE(same_bytes({a_.buf + 2 * kMsgBytes, kMsgBytes}, {b_.buf + kRangeX + kMsgBytes, kMsgBytes}));
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, kSrcOff, b_.addr(kRangeX), 3), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(ReregMr, APdChangeTakesTheMrAwayFromTheOldPdsQps) {
  ibv_pd* pd2 = ibv_alloc_pd(b_.ctx);
  ASSERT_NE(pd2, nullptr);
  ASSERT_EQ(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_PD, pd2, nullptr, 0, 0), 0);
  expect_keys_kept();
  EXPECT_EQ(mr_->pd, pd2);
  EXPECT_EQ(ibv_dealloc_pd(pd2), EBUSY);  // Expect: the MR holds its new PD
  // Back to B's PD: a pair on it (its QPs on b_.pd) writes through the key again.
  ASSERT_EQ(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_PD, b_.pd, nullptr, 0, 0), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd2), 0);
  ASSERT_NO_FATAL_FAILURE(pair());
  ASSERT_NO_FATAL_FAILURE(expect_usable(kRangeX, 1));
}

TEST_F(ReregMr, AQpOfTheOldPdGetsARemoteAccessErrorAfterAPdChange) {
  ASSERT_NO_FATAL_FAILURE(pair());
  ASSERT_NO_FATAL_FAILURE(expect_usable(kRangeX, 1));
  ibv_pd* pd2 = ibv_alloc_pd(b_.ctx);
  ASSERT_NE(pd2, nullptr);
  ASSERT_EQ(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_PD, pd2, nullptr, 0, 0), 0);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, kSrcOff, b_.addr(kRangeX), 2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(mr_), 0);
  mr_ = nullptr;
  EXPECT_EQ(ibv_dealloc_pd(pd2), 0);
}

TEST_F(ReregMr, InputErrorsLeaveTheMrAsItWas) {
  ASSERT_NO_FATAL_FAILURE(pair());
  const auto expect_input_error = [&](int ret) {
    EXPECT_EQ(ret, IBV_REREG_MR_ERR_INPUT);
    EXPECT_EQ(errno, EINVAL);
  };
  errno = 0;
  expect_input_error(ibv_rereg_mr(mr_, IBV_REREG_MR_FLAGS_SUPPORTED + 1, nullptr, nullptr, 0, 0));
  errno = 0;
  expect_input_error(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, nullptr, kRangeBytes, 0));
  errno = 0;
  expect_input_error(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, b_.buf + kRangeY, 0, 0));
  errno = 0;
  expect_input_error(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_PD, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE));
  errno = 0;
  expect_input_error(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_PD, nullptr, nullptr, 0, 0));
  errno = 0;
  expect_input_error(ibv_rereg_mr(nullptr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, 0));
  expect_keys_kept();
  EXPECT_EQ(mr_->addr, b_.buf + kRangeX);
  ASSERT_NO_FATAL_FAILURE(expect_usable(kRangeX, 1));
}

TEST_F(ReregMr, ARefusedChangeIsACommandErrorAndChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(pair());
  errno = 0;
  // Remote write without local write (IBA 10.6.3.1).
  EXPECT_EQ(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_REMOTE_WRITE),
            IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(mr_, 0, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_CMD);  // nothing to change
  EXPECT_EQ(errno, EINVAL);
  // A PD of another context.
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_PD, a_.pd, nullptr, 0, 0), IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, EINVAL);
  // Writable access over pages the process may only read: the pin fails as at registration.
  void* ro = mmap(nullptr, kRangeBytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, ro, kRangeBytes, 0), IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, EFAULT);
  munmap(ro, kRangeBytes);
  expect_keys_kept();
  EXPECT_EQ(mr_->addr, b_.buf + kRangeX);
  EXPECT_EQ(mr_->pd, b_.pd);
  ASSERT_NO_FATAL_FAILURE(expect_usable(kRangeX, 1));
}

}  // namespace
}  // namespace softhca::conformance
