// Objects up to what ibv_query_device advertises, through the public verbs API (issue 15, row
// 11): each limit is reached, and one more fails with the errno rdma-core gives (ENOMEM for a
// full table, EINVAL for a work queue deeper than max_qp_wr); a QP at max_qp_wr holds that many
// work requests at once; registrations of distinct pages give their pages back. Built twice: on
// the host's shared device and in private mode (tests/conformance/CMakeLists.txt).
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "memfd_census.h"

namespace softhca::conformance {
namespace {

constexpr uint8_t kPort = 1;

class Limits : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    list_ = ibv_get_device_list(&n);
    ASSERT_NE(list_, nullptr);
    ASSERT_GE(n, 1);
    ctx_ = ibv_open_device(list_[0]);
    ASSERT_NE(ctx_, nullptr);
    ASSERT_EQ(ibv_query_device(ctx_, &attr_), 0);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
  }
  void TearDown() override {
    if (pd_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_ != nullptr) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
    if (list_ != nullptr) ibv_free_device_list(list_);
  }

  ibv_qp* rc_qp(ibv_cq* cq, uint32_t wr) {
    ibv_qp_init_attr a{};
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = wr;
    a.cap.max_recv_wr = wr;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    return ibv_create_qp(pd_, &a);
  }

  // RESET -> INIT -> RTR -> RTS, connected to `remote` on this device's port.
  void connect(ibv_qp* qp, uint32_t remote) {
    ibv_port_attr port{};
    ASSERT_EQ(ibv_query_port(ctx_, kPort, &port), 0);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = kPort;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah_attr.dlid = port.lid;
    a.ah_attr.port_num = kPort;
    if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
      ibv_gid gid{};
      ASSERT_EQ(ibv_query_gid(ctx_, kPort, 0, &gid), 0);
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = gid;
      a.ah_attr.grh.hop_limit = 1;
    }
    ASSERT_EQ(ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              0);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    ASSERT_EQ(ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                IBV_QP_MAX_QP_RD_ATOMIC),
              0);
  }

  ibv_device** list_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_device_attr attr_{};
  ibv_pd* pd_ = nullptr;
};

TEST_F(Limits, MaxQpQpsWithSmallQueuesAreCreatedAndOneMoreIsEnomem) {
  ASSERT_GE(attr_.max_qp, 16384) << "the issue's floor";
  ibv_cq* cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  std::vector<ibv_qp*> qps;
  qps.reserve(static_cast<size_t>(attr_.max_qp));
  for (int i = 0; i < attr_.max_qp; ++i) {
    ibv_qp* qp = rc_qp(cq, 1);
    ASSERT_NE(qp, nullptr) << "QP " << i << " of " << attr_.max_qp << ": " << std::strerror(errno);
    qps.push_back(qp);
  }
  errno = 0;
  EXPECT_EQ(rc_qp(cq, 1), nullptr) << "one beyond max_qp";
  EXPECT_EQ(errno, ENOMEM);
  for (ibv_qp* qp : qps) ASSERT_EQ(ibv_destroy_qp(qp), 0);
  // Every slot is free again: one more can be made.
  ibv_qp* again = rc_qp(cq, 1);
  ASSERT_NE(again, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_destroy_qp(again), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(Limits, AQpAtMaxQpWrTakesThatManyWorkRequestsAtOnceAndADeeperOneIsEinval) {
  const auto depth = static_cast<uint32_t>(attr_.max_qp_wr);
  ASSERT_GE(depth, 16384u);
  ibv_cq* cq = ibv_create_cq(ctx_, static_cast<int>(2 * depth + 2), nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  errno = 0;
  EXPECT_EQ(rc_qp(cq, depth + 1), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_qp* a = rc_qp(cq, depth);
  ibv_qp* b = rc_qp(cq, depth);
  ASSERT_NE(a, nullptr) << std::strerror(errno);
  ASSERT_NE(b, nullptr) << std::strerror(errno);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(ibv_query_qp(a, &qa, IBV_QP_CAP, &qi), 0);
  EXPECT_GE(qi.cap.max_send_wr, depth);
  ASSERT_NO_FATAL_FAILURE(connect(a, b->qp_num));
  ASSERT_NO_FATAL_FAILURE(connect(b, a->qp_num));

  std::vector<uint64_t> src(depth), dst(depth, 0);
  for (uint32_t i = 0; i < depth; ++i) src[i] = 0x5eed0000'00000000ull | i;
  ibv_mr* smr = ibv_reg_mr(pd_, src.data(), depth * sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dmr = ibv_reg_mr(pd_, dst.data(), depth * sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(smr != nullptr && dmr != nullptr) << std::strerror(errno);

  // max_qp_wr receives, then one more: the queue is full (ENOMEM, as mlx5's post_recv says).
  std::vector<ibv_sge> rsge(depth, ibv_sge{reinterpret_cast<uintptr_t>(dst.data()), 8, dmr->lkey});
  std::vector<ibv_recv_wr> rwr(depth);
  for (uint32_t i = 0; i < depth; ++i) {
    rwr[i].wr_id = i;
    rwr[i].sg_list = &rsge[i];
    rwr[i].num_sge = 1;
    rwr[i].next = i + 1 < depth ? &rwr[i + 1] : nullptr;
  }
  ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(ibv_post_recv(b, rwr.data(), &rbad), 0);
  ibv_recv_wr one_more_recv = rwr[0];
  one_more_recv.next = nullptr;
  EXPECT_EQ(ibv_post_recv(b, &one_more_recv, &rbad), ENOMEM);

  // max_qp_wr RDMA WRITEs in one postlist, the last one signaled: every word lands.
  std::vector<ibv_sge> sge(depth);
  std::vector<ibv_send_wr> wr(depth);
  for (uint32_t i = 0; i < depth; ++i) {
    sge[i] = ibv_sge{reinterpret_cast<uintptr_t>(&src[i]), 8, smr->lkey};
    wr[i].wr_id = i;
    wr[i].sg_list = &sge[i];
    wr[i].num_sge = 1;
    wr[i].opcode = IBV_WR_RDMA_WRITE;
    wr[i].send_flags = i + 1 == depth ? IBV_SEND_SIGNALED : 0;
    wr[i].wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(&dst[i]);
    wr[i].wr.rdma.rkey = dmr->rkey;
    wr[i].next = i + 1 < depth ? &wr[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a, wr.data(), &bad), 0);
  ibv_wc wc{};
  int got = 0;
  for (int spins = 0; got == 0 && spins < 100'000'000; ++spins) got = ibv_poll_cq(cq, 1, &wc);
  ASSERT_EQ(got, 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(wc.wr_id, depth - 1);
  EXPECT_EQ(dst, src);

  EXPECT_EQ(ibv_destroy_qp(a), 0);
  EXPECT_EQ(ibv_destroy_qp(b), 0);
  EXPECT_EQ(ibv_dereg_mr(smr), 0);
  EXPECT_EQ(ibv_dereg_mr(dmr), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(Limits, MaxMrRegistrationsAreMadeAndOneMoreIsEnomem) {
  ASSERT_GE(attr_.max_mr, 65536) << "the issue's floor";
  std::vector<uint8_t> buf(4096);
  std::vector<ibv_mr*> mrs;
  mrs.reserve(static_cast<size_t>(attr_.max_mr));
  for (int i = 0; i < attr_.max_mr; ++i) {
    ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr) << "MR " << i << " of " << attr_.max_mr << ": " << std::strerror(errno);
    mrs.push_back(mr);
  }
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE), nullptr) << "one beyond max_mr";
  EXPECT_EQ(errno, ENOMEM);
  for (ibv_mr* mr : mrs) ASSERT_EQ(ibv_dereg_mr(mr), 0);
}

// n MRs of one page each on bufs, every page given back at deregistration, the data kept.
void register_pages_and_give_back(ibv_pd* pd, const std::vector<uint8_t*>& bufs) {
  constexpr size_t kPage = 4096;
  const size_t n = bufs.size();
  for (size_t i = 0; i < n; ++i) bufs[i][0] = static_cast<uint8_t>(i);
  const uint64_t held_before = test::held_memfd_bytes();
  std::vector<ibv_mr*> mrs(n);
  for (size_t i = 0; i < n; ++i) {
    mrs[i] = ibv_reg_mr(pd, bufs[i], kPage, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(mrs[i], nullptr) << "MR " << i << ": " << std::strerror(errno);
  }
  EXPECT_GE(test::held_memfd_bytes(), held_before + n * kPage) << "the registered pages are shared pages now";
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(ibv_dereg_mr(mrs[i]), 0);
  EXPECT_EQ(test::held_memfd_bytes(), held_before) << "deregistration gives every page back";
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(bufs[i][0], static_cast<uint8_t>(i)) << i;
}

// 65,536 MRs, each on a page of its own: side-by-side pages of one mapping, whose registrations
// merge into few mappings (docs/decisions.md D19).
TEST_F(Limits, SixtyFiveThousandMrsOnDistinctPagesAreMadeAndGiveTheirPagesBack) {
  constexpr size_t kMrs = 65536;
  constexpr size_t kPage = 4096;
  auto* pages = static_cast<uint8_t*>(::mmap(nullptr, kMrs * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(pages, MAP_FAILED);
  std::vector<uint8_t*> bufs(kMrs);
  for (size_t i = 0; i < kMrs; ++i) bufs[i] = pages + i * kPage;
  register_pages_and_give_back(pd_, bufs);
  ::munmap(pages, kMrs * kPage);
}

// 16,384 MRs on page-aligned buffers of their own from malloc, with malloc's (unregistered)
// headers between them: each registration converts only its own page, so each costs a mapping or
// two of the kernel's vm.max_map_count (about 65,530): some 32,000 such MRs fit (D19).
TEST_F(Limits, SixteenThousandMrsOnDistinctMallocdBuffersAreMadeAndGiveTheirPagesBack) {
  constexpr size_t kMrs = 16384;
  constexpr size_t kPage = 4096;
  std::vector<uint8_t*> bufs(kMrs);
  for (size_t i = 0; i < kMrs; ++i) {
    bufs[i] = static_cast<uint8_t*>(std::aligned_alloc(kPage, kPage));
    ASSERT_NE(bufs[i], nullptr);
  }
  register_pages_and_give_back(pd_, bufs);
  for (uint8_t* b : bufs) std::free(b);
}

TEST_F(Limits, MaxCqCqsAndMaxPdPdsAreMadeAndOneMoreOfEachIsEnomem) {
  std::vector<ibv_cq*> cqs;
  for (int i = 0; i < attr_.max_cq; ++i) {
    ibv_cq* cq = ibv_create_cq(ctx_, 1, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr) << "CQ " << i << " of " << attr_.max_cq << ": " << std::strerror(errno);
    cqs.push_back(cq);
  }
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 1, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  for (ibv_cq* cq : cqs) ASSERT_EQ(ibv_destroy_cq(cq), 0);
  std::vector<ibv_pd*> pds;
  for (int i = 1; i < attr_.max_pd; ++i) {  // the fixture holds one
    ibv_pd* pd = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd, nullptr) << "PD " << i << " of " << attr_.max_pd << ": " << std::strerror(errno);
    pds.push_back(pd);
  }
  errno = 0;
  EXPECT_EQ(ibv_alloc_pd(ctx_), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  for (ibv_pd* pd : pds) ASSERT_EQ(ibv_dealloc_pd(pd), 0);
}

}  // namespace
}  // namespace softhca::conformance
