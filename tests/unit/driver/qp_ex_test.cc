// The ibv_wr_* interface of QPs created with send_ops_flags: same WQEs and doorbells as
// post_send, one doorbell per batch, rollback on error or abort.
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "fake_device.h"
#include "test_util.h"

namespace softhca::driver::testing {
namespace {

constexpr uint64_t kPerftestOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
                                  IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                                  IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

TEST(QpEx, ABatchOf32RdmaWritesRingsOneDoorbellWithTheSameWqesAsPostSend) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC, 64, 1, 0, kPerftestOps);
  h.to_rts(qp);
  ibv_qp_ex* qpx = qp_to_qp_ex(qp);
  ASSERT_NE(qpx, nullptr);
  std::array<uint8_t, 64> buf{};
  ibv_wr_start(qpx);
  for (uint64_t i = 0; i < 32; ++i) {
    qpx->wr_id = i;
    qpx->wr_flags = i == 31 ? IBV_SEND_SIGNALED : 0;
    ibv_wr_rdma_write(qpx, 0x80000100, 0x10000 + i * 64);
    ibv_wr_set_sge(qpx, 0x100, addr_of(buf.data()), 64);
  }
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ASSERT_EQ(h.dev.mmio.size(), 1u);
  EXPECT_EQ(h.dev.mmio[0].bytes.size(), 8u);
  const uint8_t* last = h.sq(qp) + 31 * 64;
  EXPECT_EQ(std::memcmp(h.dev.mmio[0].bytes.data(), last, 8), 0);
  const auto c = ctrl_at(last);
  EXPECT_EQ(c.wqe_index(), 31);
  EXPECT_EQ(c.ds(), 3u);
  EXPECT_EQ(c.fm_ce_se, hwif::kCtrlCqUpdate);
  EXPECT_EQ(seg_at<hwif::RaddrSeg>(last + 16).raddr.get(), 0x10000u + 31 * 64);
  EXPECT_EQ(seg_at<hwif::DataSeg>(last + 32).byte_count.get(), 64u);
  EXPECT_EQ(h.qp_dbrec(qp)->sq_counter.get(), 32u);
}

TEST(QpEx, ASingleInlineSendGoesByBlueFlame) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC, 64, 1, 64, kPerftestOps);
  h.to_rts(qp);
  ibv_qp_ex* qpx = qp_to_qp_ex(qp);
  char msg[] = "0123456789";
  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(qpx, 0x44332211);
  ibv_wr_set_inline_data(qpx, msg, 10);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ASSERT_EQ(h.dev.mmio.size(), 1u);
  EXPECT_EQ(h.dev.mmio[0].bytes.size(), 64u);
  const uint8_t* w = h.sq(qp);
  EXPECT_EQ(ctrl_at(w).opcode(), hwif::WqeOpcode::kSendImm);
  EXPECT_EQ(ctrl_at(w).ds(), 2u);
  uint32_t imm_raw = 0x44332211;
  EXPECT_EQ(std::memcmp(w + 12, &imm_raw, 4), 0);
  EXPECT_EQ(be32_at(w + 16), 10u | hwif::kInlineSegFlag);
  EXPECT_EQ(std::memcmp(w + 20, msg, 10), 0);
}

TEST(QpEx, AUdSendIsCompleteOnceBothItsAddressAndItsDataAreSet) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_UD, 16, 1, 0, IBV_QP_EX_WITH_SEND);
  h.to_rts(qp);
  ibv_ah_attr aa{};
  aa.dlid = 3;
  aa.port_num = 1;
  ibv_ah* ah = create_ah(h.pd(), &aa);
  ASSERT_NE(ah, nullptr);
  ibv_qp_ex* qpx = qp_to_qp_ex(qp);
  std::array<uint8_t, 16> buf{};
  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  qpx->wr_flags = 0;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, 0x100, addr_of(buf.data()), 16);
  ibv_wr_set_ud_addr(qpx, ah, 0x777, 0x1111);
  qpx->wr_id = 2;
  ibv_wr_send(qpx);
  ibv_wr_set_ud_addr(qpx, ah, 0x778, 0x1111);
  ibv_wr_set_sge(qpx, 0x100, addr_of(buf.data()), 16);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  const uint8_t* ring = h.sq(qp);
  for (int i = 0; i < 2; ++i) {
    const uint8_t* w = ring + i * 128;  // 80 B each: 2 BBs
    EXPECT_EQ(ctrl_at(w).ds(), 5u);
    EXPECT_EQ(ctrl_at(w).wqe_index(), i * 2);
    EXPECT_EQ(seg_at<hwif::DatagramSeg>(w + 16).dqp_dct.get(), (0x777u + i) | hwif::kExtendedUdAv);
    EXPECT_EQ(seg_at<hwif::DatagramSeg>(w + 16).rlid.get(), 3u);
    EXPECT_EQ(seg_at<hwif::DataSeg>(w + 64).byte_count.get(), 16u);
  }
  EXPECT_EQ(h.qp_dbrec(qp)->sq_counter.get(), 4u);
  EXPECT_EQ(destroy_ah(ah), 0);
}

TEST(QpEx, AnAtomicBuilderTakesItsResultBufferFromSetSge) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 1, 0, kPerftestOps);
  h.to_rts(qp);
  ibv_qp_ex* qpx = qp_to_qp_ex(qp);
  uint64_t result = 0;
  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_cmp_swp(qpx, 0x55, 0x8000, 1, 2);
  ibv_wr_set_sge(qpx, 0x100, addr_of(&result), 8);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  const uint8_t* w = h.sq(qp);
  EXPECT_EQ(ctrl_at(w).opcode(), hwif::WqeOpcode::kAtomicCs);
  EXPECT_EQ(ctrl_at(w).ds(), 4u);
  EXPECT_EQ(seg_at<hwif::AtomicSeg>(w + 32).swap_add.get(), 2u);
  EXPECT_EQ(seg_at<hwif::AtomicSeg>(w + 32).compare.get(), 1u);
  EXPECT_EQ(seg_at<hwif::DataSeg>(w + 48).byte_count.get(), 8u);
}

TEST(QpEx, AbortAndFailedBatchesRingNothingAndRollBack) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 1, 0, IBV_QP_EX_WITH_RDMA_WRITE);  // max_inline_data 60
  h.to_rts(qp);
  ibv_qp_ex* qpx = qp_to_qp_ex(qp);
  std::array<uint8_t, 512> buf{};
  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  qpx->wr_flags = 0;
  ibv_wr_rdma_write(qpx, 1, 2);
  ibv_wr_set_sge(qpx, 0x100, addr_of(buf.data()), 8);
  ibv_wr_abort(qpx);

  ibv_wr_start(qpx);
  ibv_wr_rdma_write(qpx, 1, 2);
  ibv_wr_set_sge(qpx, 0x100, addr_of(buf.data()), 8);
  ibv_wr_rdma_write(qpx, 1, 2);
  ibv_wr_set_inline_data(qpx, buf.data(), 500);  // above max_inline_data
  EXPECT_EQ(ibv_wr_complete(qpx), ENOMEM);

  ibv_wr_start(qpx);
  ibv_wr_send(qpx);  // not among the QP's send ops
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);

  ibv_wr_start(qpx);
  ibv_wr_rdma_write(qpx, 1, 2);  // never given its data
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
  EXPECT_TRUE(h.dev.mmio.empty());

  ibv_wr_start(qpx);
  ibv_wr_rdma_write(qpx, 1, 2);
  ibv_wr_set_sge(qpx, 0x100, addr_of(buf.data()), 8);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ASSERT_EQ(h.dev.mmio.size(), 1u);
  EXPECT_EQ(be32_at(h.dev.mmio[0].bytes.data()) >> 8, 0u);  // the first WQE index again
}

TEST(QpEx, BuildingOnAResetQpFailsAtComplete) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 1, 0, kPerftestOps);
  ibv_qp_ex* qpx = qp_to_qp_ex(qp);
  std::array<uint8_t, 8> buf{};
  ibv_wr_start(qpx);
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, 0x100, addr_of(buf.data()), 8);
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
  EXPECT_TRUE(h.dev.mmio.empty());
}

}  // namespace
}  // namespace softhca::driver::testing
