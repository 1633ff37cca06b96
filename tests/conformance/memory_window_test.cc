// Memory windows through the public verbs API (IBA 10.6.7; ibv_alloc_mw(3), ibv_bind_mw(3),
// ibv_post_send(3)): B (softhca_1) binds windows onto part of its MR and A (softhca_0) reaches B's
// memory through them over RC. A type 1 window opens exactly its range with exactly its rights,
// takes a new rkey at each bind (the old one is then refused), and is unbound by a bind of no MR;
// a type 2 window is bound by a BIND_MW WQE to one QP, refused on any other QP of the PD, bound
// again only once invalidated, and invalidated by LOCAL_INV or by A's SEND with invalidate (B's
// receive says IBV_WC_WITH_INV and the key). A bind the MR cannot give is IBV_WC_MW_BIND_ERR; an
// MR with a window bound is not deregistered (EBUSY); a PD with a window is not deallocated.
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <gtest/gtest.h>

#include "verbs_pair.h"

namespace softhca::conformance {
namespace {

constexpr size_t kMrOff = 1 * kMiB;      // B's MR under test: [kMrOff, + kMrBytes) of B's buffer
constexpr size_t kMrBytes = 256 * 1024;
constexpr size_t kWinOff = kMrOff + 8192;  // the window's first byte
constexpr uint32_t kWinBytes = 16384;
constexpr uint32_t kMsgBytes = 4096;
constexpr unsigned int kBindable = kAllAccess | IBV_ACCESS_MW_BIND;
constexpr unsigned int kRemoteRw = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

class MemoryWindow : public VerbsPair {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
    fill_pattern(a_.bytes().first(kMiB), 19);
    mr_ = ibv_reg_mr(b_.pd, b_.buf + kMrOff, kMrBytes, static_cast<int>(kBindable));
    ASSERT_NE(mr_, nullptr) << errno_name(errno);
    ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, QpOptions{}, &p_));
  }
  void TearDown() override {
    for (ibv_mw* mw : mws_) EXPECT_EQ(ibv_dealloc_mw(mw), 0);
    if (mr_ != nullptr) {
      EXPECT_EQ(ibv_dereg_mr(mr_), 0);
    }
    VerbsPair::TearDown();
  }
  ibv_mw* alloc(ibv_mw_type type) {
    ibv_mw* mw = ibv_alloc_mw(b_.pd, type);
    EXPECT_NE(mw, nullptr) << errno_name(errno);
    if (mw != nullptr) mws_.push_back(mw);
    return mw;
  }
  static ibv_mw_bind_info info(ibv_mr* mr, size_t offset_in_buf, uint64_t base, uint64_t length, unsigned int access) {
    return ibv_mw_bind_info{mr, base + offset_in_buf, length, access};
  }
  // Binds a type 1 window with ibv_bind_mw on B's QP; the bind's completion status.
  ibv_wc_status bind1(ibv_mw* mw, const ibv_mw_bind_info& bi, uint64_t wr_id) {
    ibv_mw_bind b{};
    b.wr_id = wr_id;
    b.send_flags = IBV_SEND_SIGNALED;
    b.bind_info = bi;
    if (int err = ibv_bind_mw(p_.b, mw, &b); err != 0) {
      ADD_FAILURE() << "ibv_bind_mw: " << errno_name(err);
      return IBV_WC_GENERAL_ERR;
    }
    return completion_of(b_.cq, wr_id, IBV_WC_BIND_MW);
  }
  // A BIND_MW (type 2) or LOCAL_INV WR posted on `qp`; its completion status.
  ibv_wc_status post_window_op(ibv_qp* qp, ibv_wr_opcode op, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* bi,
                               uint64_t wr_id) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (op == IBV_WR_BIND_MW) {
      wr.bind_mw.mw = mw;
      wr.bind_mw.rkey = rkey;
      wr.bind_mw.bind_info = *bi;
    } else {
      wr.invalidate_rkey = rkey;
    }
    ibv_send_wr* bad = nullptr;
    if (int err = ibv_post_send(qp, &wr, &bad); err != 0) {
      ADD_FAILURE() << "ibv_post_send: " << errno_name(err);
      return IBV_WC_GENERAL_ERR;
    }
    return completion_of(b_.cq, wr_id, op == IBV_WR_BIND_MW ? IBV_WC_BIND_MW : IBV_WC_LOCAL_INV);
  }
  static ibv_wc_status completion_of(ibv_cq* cq, uint64_t wr_id, ibv_wc_opcode op) {
    const ibv_wc wc = poll_one(cq);
    EXPECT_EQ(wc.wr_id, wr_id);
    if (wc.status == IBV_WC_SUCCESS) {
      EXPECT_EQ(wc.opcode, op) << wc_opcode_name(wc.opcode);
    }
    return wc.status;
  }
  // One RDMA op of `len` bytes between A's buffer at `src` and B's address `remote` via `rkey`.
  ibv_wc_status rdma(ibv_wr_opcode op, uint64_t remote, uint32_t rkey, uint32_t len, uint64_t wr_id, size_t src = 0) {
    ibv_sge sge = a_.sge(src, len);
    SendArgs args;
    args.opcode = op;
    args.wr_id = wr_id;
    args.remote_addr = remote;
    args.rkey = rkey;
    if (post_send(p_.a, args, std::span(&sge, 1)) != 0) return IBV_WC_GENERAL_ERR;
    const ibv_wc wc = poll_one(a_.cq);
    EXPECT_EQ(wc.wr_id, wr_id);
    return wc.status;
  }

  ibv_mr* mr_ = nullptr;
  QpPair p_;
  std::vector<ibv_mw*> mws_;
};

TEST_F(MemoryWindow, TheDeviceSaysItHasWindowsOfBothTypes) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(b_.ctx, &attr), 0);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  EXPECT_GT(attr.max_mw, 0);
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(b_.pd, static_cast<ibv_mw_type>(3)), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(MemoryWindow, AType1WindowOpensItsRangeAndEachBindGivesItANewKey) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const uint32_t unbound = mw->rkey;
  const uint64_t base = reinterpret_cast<uintptr_t>(b_.buf);
  ASSERT_EQ(bind1(mw, info(mr_, kWinOff, base, kWinBytes, kRemoteRw), 1), IBV_WC_SUCCESS);
  EXPECT_EQ(mw->rkey, ibv_inc_rkey(unbound));
  EXPECT_NE(mw->rkey, mr_->rkey);
  // The MR is busy while the window is bound to it.
  EXPECT_EQ(ibv_dereg_mr(mr_), EBUSY);

  // A WRITE into the window lands; a READ of it returns the bytes.
  ASSERT_EQ(rdma(IBV_WR_RDMA_WRITE, base + kWinOff, mw->rkey, kMsgBytes, 2), IBV_WC_SUCCESS);
  EXPECT_TRUE(same_bytes({b_.buf + kWinOff, kMsgBytes}, {a_.buf, kMsgBytes}));
  std::memset(a_.buf + 2 * kMsgBytes, 0, kMsgBytes);
  ASSERT_EQ(rdma(IBV_WR_RDMA_READ, base + kWinOff, mw->rkey, kMsgBytes, 3, 2 * kMsgBytes), IBV_WC_SUCCESS);
  EXPECT_TRUE(same_bytes({a_.buf + 2 * kMsgBytes, kMsgBytes}, {a_.buf, kMsgBytes}));

  // Bound again further on: the new key writes there; the old key is refused.
  const uint32_t old_key = mw->rkey;
  ASSERT_EQ(bind1(mw, info(mr_, kWinOff + kWinBytes, base, kWinBytes, kRemoteRw), 4), IBV_WC_SUCCESS);
  EXPECT_EQ(mw->rkey, ibv_inc_rkey(old_key));
  ASSERT_EQ(rdma(IBV_WR_RDMA_WRITE, base + kWinOff + kWinBytes, mw->rkey, kMsgBytes, 5, kMsgBytes), IBV_WC_SUCCESS);
  EXPECT_TRUE(same_bytes({b_.buf + kWinOff + kWinBytes, kMsgBytes}, {a_.buf + kMsgBytes, kMsgBytes}));
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, base + kWinOff + kWinBytes, old_key, kMsgBytes, 6), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindow, AType1WindowRefusesBytesPastItsEnd) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const uint64_t base = reinterpret_cast<uintptr_t>(b_.buf);
  ASSERT_EQ(bind1(mw, info(mr_, kWinOff, base, kWinBytes, kRemoteRw), 1), IBV_WC_SUCCESS);
  const std::vector<uint8_t> before(b_.buf + kWinOff, b_.buf + kWinOff + kWinBytes + kMsgBytes);
  // The MR goes on past the window; the window does not.
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, base + kWinOff + kWinBytes - kMsgBytes / 2, mw->rkey, kMsgBytes, 2),
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(same_bytes({b_.buf + kWinOff, before.size()}, before));
}

TEST_F(MemoryWindow, AType1WindowGrantsOnlyTheRightsOfItsBindAndNothingOnceUnbound) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const uint64_t base = reinterpret_cast<uintptr_t>(b_.buf);
  ASSERT_EQ(bind1(mw, info(mr_, kWinOff, base, kWinBytes, IBV_ACCESS_REMOTE_READ), 1), IBV_WC_SUCCESS);
  ASSERT_EQ(rdma(IBV_WR_RDMA_READ, base + kWinOff, mw->rkey, kMsgBytes, 2, 2 * kMsgBytes), IBV_WC_SUCCESS);
  // Unbound (no MR, no length): the MR may go, and the key opens nothing.
  ASSERT_EQ(bind1(mw, ibv_mw_bind_info{nullptr, 0, 0, 0}, 3), IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_dereg_mr(mr_), 0);
  mr_ = nullptr;
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, base + kWinOff, mw->rkey, kMsgBytes, 4, 2 * kMsgBytes), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindow, AReadOnlyWindowRefusesAWrite) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const uint64_t base = reinterpret_cast<uintptr_t>(b_.buf);
  ASSERT_EQ(bind1(mw, info(mr_, kWinOff, base, kWinBytes, IBV_ACCESS_REMOTE_READ), 1), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, base + kWinOff, mw->rkey, kMsgBytes, 2), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindow, AType2WindowIsInvalidatedBySendWithInvalidateAndSaysSoAtTheReceiver) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const uint64_t base = reinterpret_cast<uintptr_t>(b_.buf);
  const uint32_t key = ibv_inc_rkey(mw->rkey);
  const ibv_mw_bind_info bi = info(mr_, kWinOff, base, kWinBytes, kRemoteRw);
  ASSERT_EQ(post_window_op(p_.b, IBV_WR_BIND_MW, mw, key, &bi, 1), IBV_WC_SUCCESS);
  ASSERT_EQ(rdma(IBV_WR_RDMA_WRITE, base + kWinOff, key, kMsgBytes, 2), IBV_WC_SUCCESS);
  EXPECT_TRUE(same_bytes({b_.buf + kWinOff, kMsgBytes}, {a_.buf, kMsgBytes}));

  ibv_sge rsge = b_.sge(0, 256);
  ASSERT_EQ(post_recv(p_.b, 10, std::span(&rsge, 1)), 0);
  ibv_sge ssge = a_.sge(0, 64);
  ibv_send_wr wr{};
  wr.wr_id = 11;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &ssge;
  wr.num_sge = 1;
  wr.invalidate_rkey = key;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p_.a, &wr, &bad), 0);
  const ibv_wc sent = poll_one(a_.cq);
  EXPECT_EQ(sent.status, IBV_WC_SUCCESS) << wc_status_name(sent.status);
  EXPECT_EQ(sent.opcode, IBV_WC_SEND);
  const ibv_wc got = poll_one(b_.cq);
  ASSERT_EQ(got.status, IBV_WC_SUCCESS) << wc_status_name(got.status);
  EXPECT_EQ(got.wr_id, 10u);
  EXPECT_EQ(got.opcode, IBV_WC_RECV);
  EXPECT_EQ(got.byte_len, 64u);
  EXPECT_TRUE(got.wc_flags & IBV_WC_WITH_INV);
  EXPECT_EQ(got.invalidated_rkey, key);
  EXPECT_TRUE(same_bytes({b_.buf, 64}, {a_.buf, 64}));
  // Invalidated: the MR is free again and the key opens nothing.
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, base + kWinOff, key, kMsgBytes, 12), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindow, AType2WindowIsBoundOnceUntilLocallyInvalidatedThenBoundAgain) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const uint64_t base = reinterpret_cast<uintptr_t>(b_.buf);
  const uint32_t k1 = ibv_inc_rkey(mw->rkey);
  const uint32_t k2 = ibv_inc_rkey(k1);
  const ibv_mw_bind_info bi = info(mr_, kWinOff, base, kWinBytes, kRemoteRw);
  ASSERT_EQ(post_window_op(p_.b, IBV_WR_BIND_MW, mw, k1, &bi, 1), IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_dereg_mr(mr_), EBUSY);
  ASSERT_EQ(post_window_op(p_.b, IBV_WR_LOCAL_INV, nullptr, k1, nullptr, 2), IBV_WC_SUCCESS);
  // Invalidated: bound again, with the next key; the old key opens nothing.
  ASSERT_EQ(post_window_op(p_.b, IBV_WR_BIND_MW, mw, k2, &bi, 3), IBV_WC_SUCCESS);
  ASSERT_EQ(rdma(IBV_WR_RDMA_WRITE, base + kWinOff, k2, kMsgBytes, 4), IBV_WC_SUCCESS);
  EXPECT_TRUE(same_bytes({b_.buf + kWinOff, kMsgBytes}, {a_.buf, kMsgBytes}));
  // Still bound: binding it once more is a bind error (B's QP goes to error with it; a WRITE
  // through the old key would have done the same, which the SEND with invalidate case checks).
  EXPECT_EQ(post_window_op(p_.b, IBV_WR_BIND_MW, mw, ibv_inc_rkey(k2), &bi, 6), IBV_WC_MW_BIND_ERR);
}

TEST_F(MemoryWindow, AType2WindowOpensOnlyForTheQpItIsBoundTo) {
  QpPair other;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, QpOptions{}, &other));
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const uint64_t base = reinterpret_cast<uintptr_t>(b_.buf);
  const uint32_t key = ibv_inc_rkey(mw->rkey);
  const ibv_mw_bind_info bi = info(mr_, kWinOff, base, kWinBytes, kRemoteRw);
  ASSERT_EQ(post_window_op(p_.b, IBV_WR_BIND_MW, mw, key, &bi, 1), IBV_WC_SUCCESS);
  // The same PD, another QP: refused there, while the QP it is bound to writes.
  ibv_sge sge = a_.sge(0, kMsgBytes);
  SendArgs args;
  args.opcode = IBV_WR_RDMA_WRITE;
  args.wr_id = 2;
  args.remote_addr = base + kWinOff;
  args.rkey = key;
  ASSERT_EQ(post_send(other.a, args, std::span(&sge, 1)), 0);
  EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, base + kWinOff, key, kMsgBytes, 3), IBV_WC_SUCCESS);
}

TEST_F(MemoryWindow, ABindTheMrCannotGiveIsABindError) {
  ibv_mr* plain = reg_mr(b_, 3 * kMiB, 64 * 1024, kAllAccess);  // no IBV_ACCESS_MW_BIND
  ASSERT_NE(plain, nullptr);
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const uint64_t base = reinterpret_cast<uintptr_t>(b_.buf);
  EXPECT_EQ(bind1(mw, info(plain, 3 * kMiB, base, 4096, kRemoteRw), 1), IBV_WC_MW_BIND_ERR);
}

TEST_F(MemoryWindow, ABindPastTheMrsEndIsABindError) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const uint64_t base = reinterpret_cast<uintptr_t>(b_.buf);
  EXPECT_EQ(bind1(mw, info(mr_, kMrOff + kMrBytes - 4096, base, 8192, kRemoteRw), 1), IBV_WC_MW_BIND_ERR);
}

TEST_F(MemoryWindow, APdWithAWindowIsBusyAndAUcQpBindsButSendsNoInvalidate) {
  ibv_pd* pd = ibv_alloc_pd(b_.ctx);
  ASSERT_NE(pd, nullptr);
  ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr) << errno_name(errno);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);

  QpPair uc;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_UC, QpOptions{}, &uc));
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.invalidate_rkey = 1;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(uc.a, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  ibv_mw* w1 = alloc(IBV_MW_TYPE_1);
  ASSERT_NE(w1, nullptr);
  const uint64_t base = reinterpret_cast<uintptr_t>(b_.buf);
  ibv_mw_bind b{};
  b.wr_id = 7;
  b.send_flags = IBV_SEND_SIGNALED;
  b.bind_info = info(mr_, kWinOff, base, kWinBytes, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(ibv_bind_mw(uc.b, w1, &b), 0);
  EXPECT_EQ(completion_of(b_.cq, 7, IBV_WC_BIND_MW), IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace softhca::conformance
