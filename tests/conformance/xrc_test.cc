// XRC through the public verbs API (IBA 9.8 and 11.2.4; ibv_open_xrcd(3), ibv_create_srq_ex(3),
// ibv_create_qp_ex(3), ibv_open_qp(3)): an INI QP on A (softhca_0) sends into the XRC SRQ each
// message names on B (softhca_1), through one TGT QP there; the receive completes in that SRQ's
// CQ and nowhere else. A request naming an SRQ of another domain, or none, is NAKed as invalid
// (IBV_WC_REM_INV_REQ_ERR at A, the TGT QP in error); an RDMA WRITE through the TGT QP is checked
// against the PD of the SRQ it names. Domains opened by the same file are one domain; O_CREAT and
// O_EXCL as the kernel takes them; a TGT QP opened by QPN outlives its creator's handle.
// Across processes and hosts: tests/acceptance (unmodified ibv_xsrq_pingpong).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "verbs_pair.h"

namespace softhca::conformance {
namespace {

constexpr size_t kSrcOff = 0;
constexpr size_t kDstOff = 1 * kMiB;
constexpr uint32_t kMessageBytes = 4096;  // four packets at MTU 1024: every one carries the XRCETH
constexpr uint32_t kPsn = 0x000100;

// verbs.h's inline ibv_close_xrcd calls the op of verbs_get_ctx() without a NULL check, which
// GCC's -Wnull-dereference sees once it is inlined; softhca's contexts are always extended.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
int close_xrcd(ibv_xrcd* x) { return ibv_close_xrcd(x); }
#pragma GCC diagnostic pop

class Xrc : public VerbsPair {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
    char name[] = "/tmp/softhca-xrc-XXXXXX";
    fd_ = mkstemp(name);
    ASSERT_GE(fd_, 0);
    path_ = name;
    xrcd_ = open_xrcd(b_.ctx, fd_, O_CREAT);
    ASSERT_NE(xrcd_, nullptr) << errno_name(errno);
  }
  void TearDown() override {
    for (ibv_qp* qp : xrc_qps_) EXPECT_EQ(ibv_destroy_qp(qp), 0);
    for (ibv_srq* srq : xrc_srqs_) EXPECT_EQ(ibv_destroy_srq(srq), 0);
    for (ibv_xrcd* x : xrcds_) EXPECT_EQ(close_xrcd(x), 0);
    if (fd_ >= 0) close(fd_);
    if (!path_.empty()) unlink(path_.c_str());
    VerbsPair::TearDown();
  }

  ibv_xrcd* open_xrcd(ibv_context* ctx, int fd, int oflags) {
    ibv_xrcd_init_attr a{};
    a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    a.fd = fd;
    a.oflags = oflags;
    ibv_xrcd* x = ibv_open_xrcd(ctx, &a);
    if (x != nullptr) xrcds_.push_back(x);
    return x;
  }
  // An XRC SRQ of `xrcd` on B whose receives complete in `cq`.
  ibv_srq* xrc_srq(ibv_xrcd* xrcd, ibv_cq* cq, ibv_pd* pd = nullptr) {
    ibv_srq_init_attr_ex a{};
    a.attr.max_wr = 16;
    a.attr.max_sge = 1;
    a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
    a.srq_type = IBV_SRQT_XRC;
    a.xrcd = xrcd;
    a.cq = cq;
    a.pd = pd != nullptr ? pd : b_.pd;
    ibv_srq* srq = ibv_create_srq_ex(b_.ctx, &a);
    if (srq != nullptr) xrc_srqs_.push_back(srq);
    return srq;
  }
  ibv_qp* tgt_qp(ibv_xrcd* xrcd) {
    ibv_qp_init_attr_ex a{};
    a.qp_type = IBV_QPT_XRC_RECV;
    a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    a.xrcd = xrcd;
    ibv_qp* qp = ibv_create_qp_ex(b_.ctx, &a);
    if (qp != nullptr) xrc_qps_.push_back(qp);
    return qp;
  }
  ibv_qp* ini_qp(uint64_t send_ops_flags = 0) {
    ibv_qp_init_attr_ex a{};
    a.qp_type = IBV_QPT_XRC_SEND;
    a.send_cq = a_.cq;
    a.cap.max_send_wr = 16;
    a.cap.max_send_sge = 1;
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.pd = a_.pd;
    if (send_ops_flags != 0) {
      a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
      a.send_ops_flags = send_ops_flags;
    }
    ibv_qp* qp = ibv_create_qp_ex(a_.ctx, &a);
    if (qp != nullptr) xrc_qps_.push_back(qp);
    return qp;
  }
  // INI (A) -> TGT (B), each to RTS with the masks ibv_xsrq_pingpong uses (the kernel's
  // qp_state_table for XRC_INI and XRC_TGT).
  void connect(ibv_qp* ini, ibv_qp* tgt) {
    ibv_qp_attr m{};
    m.qp_state = IBV_QPS_INIT;
    m.port_num = kPort;
    m.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    constexpr int kInit = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    ASSERT_EQ(ibv_modify_qp(tgt, &m, kInit), 0);
    m.qp_access_flags = 0;
    ASSERT_EQ(ibv_modify_qp(ini, &m, kInit), 0);
    m = ibv_qp_attr{};
    m.qp_state = IBV_QPS_RTR;
    m.path_mtu = IBV_MTU_1024;
    m.rq_psn = kPsn;
    m.min_rnr_timer = 1;
    m.ah_attr.port_num = kPort;
    m.dest_qp_num = ini->qp_num;
    m.ah_attr.dlid = a_.lid;
    ASSERT_EQ(ibv_modify_qp(tgt, &m, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              0);
    m.dest_qp_num = tgt->qp_num;
    m.ah_attr.dlid = b_.lid;
    // An INI QP has no responder side: MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER are not allowed here.
    EXPECT_EQ(ibv_modify_qp(ini, &m, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                         IBV_QP_MIN_RNR_TIMER),
              EINVAL);
    ASSERT_EQ(ibv_modify_qp(ini, &m, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN), 0);
    m = ibv_qp_attr{};
    m.qp_state = IBV_QPS_RTS;
    m.timeout = 14;
    m.sq_psn = kPsn;
    ASSERT_EQ(ibv_modify_qp(tgt, &m, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN), 0);
    m.retry_cnt = 7;
    m.rnr_retry = 7;
    m.max_rd_atomic = 1;
    ASSERT_EQ(ibv_modify_qp(ini, &m, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT |
                                         IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
              0);
  }
  // A SEND of kMessageBytes from A's source slot into remote SRQ `srqn` (legacy post_send).
  int send_to(ibv_qp* ini, uint32_t srqn, uint64_t wr_id, ibv_wr_opcode op = IBV_WR_SEND, uint64_t raddr = 0,
              uint32_t rkey = 0) {
    ibv_sge sge = a_.sge(kSrcOff, kMessageBytes);
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    wr.qp_type.xrc.remote_srqn = srqn;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(ini, &wr, &bad);
  }
  static uint32_t srq_num(ibv_srq* srq) {
    uint32_t n = 0;
    EXPECT_EQ(ibv_get_srq_num(srq, &n), 0);
    return n;
  }

  int fd_ = -1;
  std::string path_;
  ibv_xrcd* xrcd_ = nullptr;
  std::vector<ibv_xrcd*> xrcds_;
  std::vector<ibv_srq*> xrc_srqs_;
  std::vector<ibv_qp*> xrc_qps_;  // INI and TGT QPs, destroyed before the SRQs and domains
};

TEST_F(Xrc, TheDeviceSaysItDoesXrc) {
  ibv_device_attr_ex attr{};
  ASSERT_EQ(ibv_query_device_ex(b_.ctx, nullptr, &attr), 0);
  EXPECT_NE(attr.orig_attr.device_cap_flags & IBV_DEVICE_XRC, 0);
}

TEST_F(Xrc, EachMessageLandsInTheSrqItNamesAndCompletesInThatSrqsCqOnly) {
  ibv_cq* cq1 = create_cq(b_, 16);
  ibv_cq* cq2 = create_cq(b_, 16);
  ASSERT_NE(cq1, nullptr);
  ASSERT_NE(cq2, nullptr);
  ibv_srq* srq1 = xrc_srq(xrcd_, cq1);
  ibv_srq* srq2 = xrc_srq(xrcd_, cq2);
  ASSERT_NE(srq1, nullptr) << errno_name(errno);
  ASSERT_NE(srq2, nullptr);
  EXPECT_NE(srq_num(srq1), srq_num(srq2));
  ibv_qp* tgt = tgt_qp(xrcd_);
  ibv_qp* ini = ini_qp();
  ASSERT_NE(tgt, nullptr) << errno_name(errno);
  ASSERT_NE(ini, nullptr) << errno_name(errno);
  EXPECT_EQ(tgt->pd, nullptr);  // a TGT QP has no PD, CQs or SRQ of its own
  EXPECT_EQ(tgt->recv_cq, nullptr);
  EXPECT_EQ(ini->recv_cq, nullptr);
  ASSERT_NO_FATAL_FAILURE(connect(ini, tgt));

  fill_pattern(a_.bytes().first(kMessageBytes), 41);
  ibv_sge r1 = b_.sge(kDstOff, kMessageBytes);
  ibv_sge r2 = b_.sge(kDstOff + kMessageBytes, kMessageBytes);
  ASSERT_EQ(post_srq_recv(srq1, 11, std::span(&r1, 1)), 0);
  ASSERT_EQ(post_srq_recv(srq2, 22, std::span(&r2, 1)), 0);

  // Expect: into SRQ 2's buffer, completed in CQ 2 with SRQ 2's wr_id and the TGT QP's number.
  ASSERT_EQ(send_to(ini, srq_num(srq2), 7), 0);
  ibv_wc wc = poll_one(a_.cq);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  wc = poll_one(cq2);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.wr_id, 22u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, kMessageBytes);
  EXPECT_EQ(wc.qp_num, tgt->qp_num);
  EXPECT_TRUE(cq_is_empty(cq1));
  EXPECT_TRUE(same_bytes(b_.bytes().subspan(kDstOff + kMessageBytes, kMessageBytes), a_.bytes().first(kMessageBytes)));

  // Expect: the next one, named for SRQ 1, lands there.
  fill_pattern(a_.bytes().first(kMessageBytes), 42);
  ASSERT_EQ(send_to(ini, srq_num(srq1), 8), 0);
  EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_SUCCESS);
  wc = poll_one(cq1);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.wr_id, 11u);
  EXPECT_TRUE(cq_is_empty(cq2));
  EXPECT_TRUE(same_bytes(b_.bytes().subspan(kDstOff, kMessageBytes), a_.bytes().first(kMessageBytes)));
}

TEST_F(Xrc, TheWorkRequestBuilderSetsTheRemoteSrq) {
  ibv_cq* cq = create_cq(b_, 16);
  ibv_srq* srq = xrc_srq(xrcd_, cq);
  ibv_qp* tgt = tgt_qp(xrcd_);
  ibv_qp* ini = ini_qp(IBV_QP_EX_WITH_SEND);
  ASSERT_TRUE(srq != nullptr && tgt != nullptr && ini != nullptr) << errno_name(errno);
  ASSERT_NO_FATAL_FAILURE(connect(ini, tgt));
  fill_pattern(a_.bytes().first(kMessageBytes), 43);
  ibv_sge r = b_.sge(kDstOff, kMessageBytes);
  ASSERT_EQ(post_srq_recv(srq, 5, std::span(&r, 1)), 0);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(ini);
  ASSERT_NE(qpx, nullptr);
  ibv_wr_start(qpx);
  qpx->wr_id = 9;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_xrc_srqn(qpx, srq_num(srq));
  ibv_wr_set_sge(qpx, a_.mr->lkey, a_.addr(kSrcOff), kMessageBytes);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_SUCCESS);
  const ibv_wc wc = poll_one(cq);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_TRUE(same_bytes(b_.bytes().subspan(kDstOff, kMessageBytes), a_.bytes().first(kMessageBytes)));

  // Expect: a WQE whose SRQ number was never set is not complete, and wr_complete says so.
  ibv_wr_start(qpx);
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, a_.mr->lkey, a_.addr(kSrcOff), 8);
  ibv_wr_send(qpx);  // the previous WQE is still open
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
}

TEST_F(Xrc, ARequestIntoAnSrqOfAnotherDomainOrNoneIsAnInvalidRequest) {
  ibv_xrcd* other = open_xrcd(b_.ctx, -1, 0);  // fd -1: a domain of its own
  ASSERT_NE(other, nullptr) << errno_name(errno);
  ibv_cq* cq = create_cq(b_, 16);
  ibv_srq* foreign = xrc_srq(other, cq);
  ASSERT_NE(foreign, nullptr);
  ibv_sge r = b_.sge(kDstOff, kMessageBytes);
  ASSERT_EQ(post_srq_recv(foreign, 1, std::span(&r, 1)), 0);
  for (const uint32_t srqn : {srq_num(foreign), 0xfffffeu}) {
    SCOPED_TRACE(srqn);
    ibv_qp* tgt = tgt_qp(xrcd_);
    ibv_qp* ini = ini_qp();
    ASSERT_TRUE(tgt != nullptr && ini != nullptr);
    ASSERT_NO_FATAL_FAILURE(connect(ini, tgt));
    // Expect: NAK invalid request; A's WQE fails so, B's TGT QP goes to error, no receive is used.
    ASSERT_EQ(send_to(ini, srqn, 3), 0);
    const ibv_wc wc = poll_one(a_.cq);
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << wc_status_name(wc.status);
    EXPECT_EQ(query_state(tgt), IBV_QPS_ERR);
    EXPECT_TRUE(cq_is_empty(cq));
  }
}

TEST_F(Xrc, AnRdmaWriteThroughATgtQpIsCheckedAgainstThePdOfTheSrqItNames) {
  ibv_cq* cq = create_cq(b_, 16);
  ibv_srq* srq = xrc_srq(xrcd_, cq);  // on B's PD, which b_.mr is of
  ASSERT_NE(srq, nullptr);
  ibv_pd* other_pd = ibv_alloc_pd(b_.ctx);
  ASSERT_NE(other_pd, nullptr);
  ibv_srq* other_srq = xrc_srq(xrcd_, cq, other_pd);
  ASSERT_NE(other_srq, nullptr);
  ibv_qp* tgt = tgt_qp(xrcd_);
  ibv_qp* ini = ini_qp();
  ASSERT_TRUE(tgt != nullptr && ini != nullptr);
  ASSERT_NO_FATAL_FAILURE(connect(ini, tgt));
  fill_pattern(a_.bytes().first(kMessageBytes), 44);
  // Expect: named with the SRQ of the MR's PD, the WRITE lands (and uses no receive).
  ASSERT_EQ(send_to(ini, srq_num(srq), 1, IBV_WR_RDMA_WRITE, b_.addr(kDstOff), b_.mr->rkey), 0);
  EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same_bytes(b_.bytes().subspan(kDstOff, kMessageBytes), a_.bytes().first(kMessageBytes)));
  EXPECT_TRUE(cq_is_empty(cq));
  // Expect: named with an SRQ of another PD, the same rkey is a remote access error.
  ASSERT_EQ(send_to(ini, srq_num(other_srq), 2, IBV_WR_RDMA_WRITE, b_.addr(kDstOff), b_.mr->rkey), 0);
  EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_REM_ACCESS_ERR);
  // The SRQs go before their PD (TearDown destroys the rest).
  for (ibv_qp* qp : xrc_qps_) EXPECT_EQ(ibv_destroy_qp(qp), 0);
  xrc_qps_.clear();
  EXPECT_EQ(ibv_dealloc_pd(other_pd), EBUSY);
  EXPECT_EQ(ibv_destroy_srq(other_srq), 0);
  std::erase(xrc_srqs_, other_srq);
  EXPECT_EQ(ibv_dealloc_pd(other_pd), 0);
}

TEST_F(Xrc, OpensOfOneFileAreOneDomainWithTheKernelsOCreatAndOExcl) {
  // Expect: the same file again is the same domain: an SRQ of the first open takes the messages
  // of a TGT QP of the second.
  ibv_xrcd* again = open_xrcd(b_.ctx, fd_, 0);
  ASSERT_NE(again, nullptr) << errno_name(errno);
  errno = 0;
  EXPECT_EQ(open_xrcd(b_.ctx, fd_, O_CREAT | O_EXCL), nullptr);
  EXPECT_EQ(errno, EINVAL);
  char name[] = "/tmp/softhca-xrc-new-XXXXXX";
  const int fresh = mkstemp(name);
  ASSERT_GE(fresh, 0);
  errno = 0;
  EXPECT_EQ(open_xrcd(b_.ctx, fresh, 0), nullptr);  // no domain for it yet, and no O_CREAT
  EXPECT_EQ(errno, EINVAL);
  close(fresh);
  unlink(name);
  errno = 0;
  EXPECT_EQ(open_xrcd(b_.ctx, 1'000'000, O_CREAT), nullptr);
  EXPECT_EQ(errno, EBADF);

  ibv_cq* cq = create_cq(b_, 16);
  ibv_srq* srq = xrc_srq(xrcd_, cq);
  ibv_qp* tgt = tgt_qp(again);
  ibv_qp* ini = ini_qp();
  ASSERT_TRUE(srq != nullptr && tgt != nullptr && ini != nullptr);
  ASSERT_NO_FATAL_FAILURE(connect(ini, tgt));
  ibv_sge r = b_.sge(kDstOff, kMessageBytes);
  ASSERT_EQ(post_srq_recv(srq, 4, std::span(&r, 1)), 0);
  ASSERT_EQ(send_to(ini, srq_num(srq), 1), 0);
  EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(poll_one(cq).wr_id, 4u);
  // Expect: a handle with an SRQ or TGT QP in it cannot be closed.
  EXPECT_EQ(close_xrcd(xrcd_), EBUSY);
  EXPECT_EQ(close_xrcd(again), EBUSY);
}

TEST_F(Xrc, ATgtQpOpenedByNumberOutlivesItsCreatorsHandle) {
  ibv_xrcd* again = open_xrcd(b_.ctx, fd_, 0);
  ASSERT_NE(again, nullptr);
  ibv_cq* cq = create_cq(b_, 16);
  ibv_srq* srq = xrc_srq(xrcd_, cq);
  ibv_qp* tgt = tgt_qp(xrcd_);
  ibv_qp* ini = ini_qp();
  ASSERT_TRUE(srq != nullptr && tgt != nullptr && ini != nullptr);
  ASSERT_NO_FATAL_FAILURE(connect(ini, tgt));

  ibv_qp_open_attr oa{};
  oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  oa.qp_num = tgt->qp_num;
  oa.xrcd = again;
  oa.qp_type = IBV_QPT_XRC_RECV;
  ibv_qp* opened = ibv_open_qp(b_.ctx, &oa);
  ASSERT_NE(opened, nullptr) << errno_name(errno);
  EXPECT_EQ(opened->qp_num, tgt->qp_num);
  EXPECT_EQ(opened->state, IBV_QPS_RTS);  // the device's, as the creator left it
  oa.qp_num = ini->qp_num;  // not a TGT QP
  errno = 0;
  EXPECT_EQ(ibv_open_qp(b_.ctx, &oa), nullptr);
  EXPECT_EQ(errno, EINVAL);

  // Expect: with the creator's handle gone, the QP still takes messages, and the open handle
  // still queries and modifies it.
  ASSERT_EQ(ibv_destroy_qp(tgt), 0);
  std::erase(xrc_qps_, tgt);
  xrc_qps_.push_back(opened);
  ibv_sge r = b_.sge(kDstOff, kMessageBytes);
  ASSERT_EQ(post_srq_recv(srq, 6, std::span(&r, 1)), 0);
  ASSERT_EQ(send_to(ini, srq_num(srq), 1), 0);
  EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_SUCCESS);
  const ibv_wc wc = poll_one(cq);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.qp_num, opened->qp_num);
  EXPECT_EQ(query_state(opened), IBV_QPS_RTS);
  ibv_qp_attr m{};
  m.qp_state = IBV_QPS_ERR;
  EXPECT_EQ(ibv_modify_qp(opened, &m, IBV_QP_STATE), 0);
  EXPECT_EQ(query_state(opened), IBV_QPS_ERR);
}

TEST_F(Xrc, OnlyAnXrcSrqHasANumber) {
  ibv_srq* basic = create_srq(b_, 4, 1);
  ASSERT_NE(basic, nullptr);
  uint32_t n = 0;
  EXPECT_EQ(ibv_get_srq_num(basic, &n), EINVAL);
  // An XRC SRQ needs its CQ: without, EINVAL.
  ibv_srq_init_attr_ex a{};
  a.attr.max_wr = 4;
  a.attr.max_sge = 1;
  a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_PD;
  a.srq_type = IBV_SRQT_XRC;
  a.xrcd = xrcd_;
  a.pd = b_.pd;
  errno = 0;
  EXPECT_EQ(ibv_create_srq_ex(b_.ctx, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softhca::conformance
