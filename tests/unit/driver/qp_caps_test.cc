// QP creation: the max inline and ring sizes reported back (verbs-abi.md §6.1 "Max inline"),
// the CreateQp command the device receives, and what create_qp refuses.
#include <gtest/gtest.h>

#include <cerrno>

#include "driver/qp_caps.h"
#include "fake_device.h"
#include "test_util.h"

namespace softhca::driver::testing {
namespace {

ibv_qp_init_attr init_attr(ibv_cq* cq, ibv_qp_type type, uint32_t wr, uint32_t sge, uint32_t inl) {
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = type;
  a.cap.max_send_wr = wr;
  a.cap.max_recv_wr = wr;
  a.cap.max_send_sge = sge;
  a.cap.max_recv_sge = sge;
  a.cap.max_inline_data = inl;
  return a;
}

TEST(QpCaps, LegacyRcWithOneSgeReports12BytesOfInlineInOneBasicBlockPerWqe) {
  SendLayout l;
  ASSERT_EQ(compute_send_layout(hwif::QpType::kRc, 0, 64, 1, 0, l), 0);
  EXPECT_EQ(l.overhead, 48u);  // ctrl + remote address + atomic: no room for a bind the device lacks
  EXPECT_EQ(l.wqe_size, 64u);
  EXPECT_EQ(l.max_inline, 12u);

  DeviceHarness h;
  ibv_qp_init_attr a = init_attr(h.cq(), IBV_QPT_RC, 64, 1, 0);
  ibv_qp* qp = create_qp(h.pd(), &a, 0);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(a.cap.max_inline_data, 12u);
  EXPECT_EQ(a.cap.max_send_wr, 64u);
  EXPECT_EQ(h.dev.qps.at(qp->qp_num).log_sq_bbs, 6u);  // 64 x 64 B = 64 BBs
  EXPECT_EQ(destroy_qp(qp), 0);
}

TEST(QpCaps, ALegacyRcQpAtMaxQpWrFitsTheLargestRingAndOneMoreIsEinval) {
  SendLayout l;
  constexpr uint32_t kMaxQpWr = 1u << 14;  // hca/device_config.cc, R1
  ASSERT_EQ(compute_send_layout(hwif::QpType::kRc, 0, kMaxQpWr, 1, 0, l), 0);
  EXPECT_EQ(l.wqe_cnt, kMaxQpWr);  // one block each: within the 2^15 a 16-bit WQE index allows
  EXPECT_EQ(l.max_post, kMaxQpWr);
  DeviceHarness h;
  ibv_qp_init_attr a = init_attr(h.cq(), IBV_QPT_RC, kMaxQpWr, 1, 0);
  ibv_qp* qp = create_qp(h.pd(), &a, 0);
  ASSERT_NE(qp, nullptr) << errno;
  EXPECT_EQ(a.cap.max_send_wr, kMaxQpWr);
  EXPECT_EQ(destroy_qp(qp), 0);
  ibv_qp_init_attr over = init_attr(h.cq(), IBV_QPT_RC, kMaxQpWr + 1, 1, 0);
  errno = 0;
  EXPECT_EQ(create_qp(h.pd(), &over, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST(QpCaps, ANewApiRcQpWithOnlyRdmaWriteAsking220GetsExactly220) {
  SendLayout l;
  ASSERT_EQ(compute_send_layout(hwif::QpType::kRc, IBV_QP_EX_WITH_RDMA_WRITE, 128, 1, 220, l), 0);
  EXPECT_EQ(l.wqe_size, 256u);
  EXPECT_EQ(l.max_inline, 220u);

  DeviceHarness h;
  ibv_qp_init_attr a = init_attr(h.cq(), IBV_QPT_RC, 128, 1, 220);
  ibv_qp* qp = create_qp(h.pd(), &a, IBV_QP_EX_WITH_RDMA_WRITE);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(a.cap.max_inline_data, 220u);
  EXPECT_NE(qp_to_qp_ex(qp), nullptr);
  EXPECT_EQ(reinterpret_cast<ibv_qp*>(qp_to_qp_ex(qp)), qp);
  EXPECT_EQ(destroy_qp(qp), 0);
}

TEST(QpCaps, UdWithOneSgeReports60BytesOfInlineIn128ByteWqes) {
  SendLayout l;
  ASSERT_EQ(compute_send_layout(hwif::QpType::kUd, 0, 64, 1, 0, l), 0);
  EXPECT_EQ(l.wqe_size, 128u);
  EXPECT_EQ(l.max_inline, 60u);
  DeviceHarness h;
  ibv_qp_init_attr a = init_attr(h.cq(), IBV_QPT_UD, 64, 1, 0);
  ibv_qp* qp = create_qp(h.pd(), &a, 0);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(a.cap.max_inline_data, 60u);
  EXPECT_EQ(qp_to_qp_ex(qp), nullptr);  // legacy QPs have no ibv_qp_ex interface
  EXPECT_EQ(destroy_qp(qp), 0);
}

TEST(QpCaps, TheReceiveQueueIsRoundedToPowersOfTwoAndReportedBack) {
  DeviceHarness h;
  ibv_qp_init_attr a = init_attr(h.cq(), IBV_QPT_RC, 10, 3, 0);
  ibv_qp* qp = create_qp(h.pd(), &a, 0);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(a.cap.max_recv_wr, 16u);
  EXPECT_EQ(a.cap.max_recv_sge, 4u);  // stride 64 B
  const hwif::CreateQpIn& in = h.dev.qps.at(qp->qp_num);
  EXPECT_EQ(in.log_rq_cnt, 4u);
  EXPECT_EQ(in.log_rq_stride, 6u);
  EXPECT_EQ(in.srqn, hwif::kNoSrq);
  EXPECT_EQ(in.type, hwif::QpType::kRc);
  EXPECT_EQ(in.send_cqn, a.send_cq->handle);
  EXPECT_EQ(in.pdn, h.pd()->handle);
  EXPECT_EQ(in.sq_addr % 4096, 0u);
  EXPECT_EQ(in.dbrec_addr % 64, 0u);
  EXPECT_EQ(qp->state, IBV_QPS_RESET);
  EXPECT_EQ(qp->qp_type, IBV_QPT_RC);
  EXPECT_EQ(qp->context, h.ctx());
  EXPECT_EQ(qp->pd, h.pd());
  EXPECT_EQ(destroy_qp(qp), 0);
}

TEST(QpCaps, RequestsAboveTheDeviceLimitsAreEinval) {
  DeviceHarness h;
  ibv_cq* cq = h.cq();
  ibv_qp_init_attr a = init_attr(cq, IBV_QPT_RC, 64, 1, 513);  // device max_inline_data 512
  EXPECT_EQ(create_qp(h.pd(), &a, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a = init_attr(cq, IBV_QPT_RC, 16385, 1, 0);
  EXPECT_EQ(create_qp(h.pd(), &a, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a = init_attr(cq, IBV_QPT_RC, 16, 31, 0);
  EXPECT_EQ(create_qp(h.pd(), &a, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST(QpCaps, UnsupportedQpTypesAndSendOpsAreEopnotsupp) {
  DeviceHarness h;
  ibv_cq* cq = h.cq();
  ibv_qp_init_attr a = init_attr(cq, IBV_QPT_RAW_PACKET, 16, 1, 0);
  EXPECT_EQ(create_qp(h.pd(), &a, 0), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  a = init_attr(cq, IBV_QPT_DRIVER, 16, 1, 0);
  EXPECT_EQ(create_qp(h.pd(), &a, 0), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  a = init_attr(cq, IBV_QPT_RC, 16, 1, 0);
  EXPECT_EQ(create_qp(h.pd(), &a, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(create_qp(h.pd(), &a, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  a = init_attr(cq, IBV_QPT_UD, 16, 1, 0);
  EXPECT_EQ(create_qp(h.pd(), &a, IBV_QP_EX_WITH_RDMA_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  a = init_attr(cq, IBV_QPT_UC, 16, 1, 0);
  EXPECT_EQ(create_qp(h.pd(), &a, IBV_QP_EX_WITH_RDMA_READ), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(create_qp(h.pd(), &a, IBV_QP_EX_WITH_SEND_WITH_INV), nullptr);  // RC's and XRC's only
  EXPECT_EQ(errno, EOPNOTSUPP);
  a = init_attr(cq, IBV_QPT_RC, 16, 1, 0);
  ibv_qp* qp = create_qp(h.pd(), &a, kSupportedSendOps);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(destroy_qp(qp), 0);
}

}  // namespace
}  // namespace softhca::driver::testing
