// The exact bytes of send WQEs (verbs-abi.md §6.1): segment order and contents, ds, flags,
// wrapping of an inline segment at the ring end.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

#include "fake_device.h"
#include "test_util.h"

namespace softhca::driver::testing {
namespace {

TEST(SendWqe, AnRdmaWriteIsCtrlRaddrAndOneDataSegmentWithCqUpdateWhenSignaled) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC);
  h.to_rts(qp);
  std::array<uint8_t, 100> buf{};
  ibv_sge sge{addr_of(buf.data()), 100, 0x1100};
  ibv_send_wr wr = write_wr(7, &sge, 0xdead0000beef, 0x80001100, IBV_SEND_SIGNALED);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);

  const uint8_t* w = h.sq(qp);
  const auto c = ctrl_at(w);
  EXPECT_EQ(c.opmod_idx_opcode.get(), 0x08u);  // index 0, RDMA_WRITE
  EXPECT_EQ(c.qpn_ds.get(), (qp->qp_num << 8) | 3);
  EXPECT_EQ(c.fm_ce_se, hwif::kCtrlCqUpdate);
  EXPECT_EQ(c.imm.get(), 0u);
  const auto r = seg_at<hwif::RaddrSeg>(w + 16);
  EXPECT_EQ(r.raddr.get(), 0xdead0000beefu);
  EXPECT_EQ(r.rkey.get(), 0x80001100u);
  EXPECT_EQ(r.rsvd12.get(), 0u);
  const auto d = seg_at<hwif::DataSeg>(w + 32);
  EXPECT_EQ(d.byte_count.get(), 100u);
  EXPECT_EQ(d.lkey.get(), 0x1100u);
  EXPECT_EQ(d.addr.get(), addr_of(buf.data()));
}

TEST(SendWqe, ASendWithImmSkipsZeroLengthSgesAndCarriesImmAsGivenWithSolicitedAndFence) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 3, 0, 0, /*sig_all=*/true);
  h.to_rts(qp);
  std::array<uint8_t, 64> a{}, b{};
  std::array<ibv_sge, 3> sges{{{addr_of(a.data()), 10, 1}, {addr_of(a.data()), 0, 2}, {addr_of(b.data()), 20, 3}}};
  ibv_send_wr wr = send_wr(9, sges.data(), 3, IBV_WR_SEND_WITH_IMM, IBV_SEND_SOLICITED | IBV_SEND_FENCE);
  const uint8_t imm_bytes[4] = {0x12, 0x34, 0x56, 0x78};
  std::memcpy(&wr.imm_data, imm_bytes, 4);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);

  const uint8_t* w = h.sq(qp);
  const auto c = ctrl_at(w);
  EXPECT_EQ(c.opcode(), hwif::WqeOpcode::kSendImm);
  EXPECT_EQ(c.ds(), 3u);
  EXPECT_EQ(c.fm_ce_se, hwif::kCtrlCqUpdate | hwif::kCtrlSolicited | hwif::kCtrlFence);  // sq_sig_all
  EXPECT_EQ(std::memcmp(w + 12, imm_bytes, 4), 0);
  EXPECT_EQ(seg_at<hwif::DataSeg>(w + 16).lkey.get(), 1u);
  EXPECT_EQ(seg_at<hwif::DataSeg>(w + 32).lkey.get(), 3u);
  EXPECT_EQ(seg_at<hwif::DataSeg>(w + 32).byte_count.get(), 20u);
}

TEST(SendWqe, AUdSendCarriesTheDatagramSegmentFromTheAh) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_UD);
  h.to_rts(qp);
  ibv_ah_attr aa{};
  aa.dlid = 0x1234;
  aa.sl = 5;
  aa.src_path_bits = 0x81;
  aa.static_rate = 3;
  aa.port_num = 1;
  aa.is_global = 1;
  aa.grh.sgid_index = 1;
  aa.grh.flow_label = 0xabcde;
  aa.grh.hop_limit = 64;
  aa.grh.traffic_class = 7;
  for (int i = 0; i < 16; ++i) aa.grh.dgid.raw[i] = static_cast<uint8_t>(0xa0 + i);
  ibv_ah* ah = create_ah(h.pd(), &aa);
  ASSERT_NE(ah, nullptr);

  std::array<uint8_t, 32> buf{};
  ibv_sge sge{addr_of(buf.data()), 32, 0x300};
  ibv_send_wr wr = send_wr(1, &sge, 1);
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = 0x654321;
  wr.wr.ud.remote_qkey = 0x11111111;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);

  const uint8_t* w = h.sq(qp);
  EXPECT_EQ(ctrl_at(w).ds(), 5u);  // ctrl 1 + datagram 3 + data 1
  const auto dg = seg_at<hwif::DatagramSeg>(w + 16);
  EXPECT_EQ(dg.qkey.get(), 0x11111111u);
  EXPECT_EQ(dg.dqp_dct.get(), 0x654321u | hwif::kExtendedUdAv);
  EXPECT_EQ(dg.stat_rate_sl, (3 << 4) | 5);
  EXPECT_EQ(dg.fl_mlid, 0x01);
  EXPECT_EQ(dg.rlid.get(), 0x1234u);
  EXPECT_EQ(dg.grh_gid_fl.get(), (1u << 30) | (1u << 20) | 0xabcde);
  EXPECT_EQ(dg.tclass, 7);
  EXPECT_EQ(dg.hop_limit, 64);
  EXPECT_EQ(dg.rgid[0], 0xa0);
  EXPECT_EQ(dg.rgid[15], 0xaf);
  EXPECT_EQ(seg_at<hwif::DataSeg>(w + 64).lkey.get(), 0x300u);
  EXPECT_EQ(destroy_ah(ah), 0);
}

TEST(SendWqe, ACompareAndSwapIsRaddrAtomicAndAn8ByteResultSegment) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC);
  h.to_rts(qp);
  uint64_t result = 0;
  ibv_sge sge{addr_of(&result), 8, 0x400};
  ibv_send_wr wr = send_wr(3, &sge, 1, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_SEND_SIGNALED);
  wr.wr.atomic.remote_addr = 0x7000;
  wr.wr.atomic.rkey = 0x99;
  wr.wr.atomic.compare_add = 0x1111;
  wr.wr.atomic.swap = 0x2222;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  const uint8_t* w = h.sq(qp);
  EXPECT_EQ(ctrl_at(w).opcode(), hwif::WqeOpcode::kAtomicCs);
  EXPECT_EQ(ctrl_at(w).ds(), 4u);
  EXPECT_EQ(seg_at<hwif::RaddrSeg>(w + 16).raddr.get(), 0x7000u);
  EXPECT_EQ(seg_at<hwif::RaddrSeg>(w + 16).rkey.get(), 0x99u);
  EXPECT_EQ(seg_at<hwif::AtomicSeg>(w + 32).swap_add.get(), 0x2222u);
  EXPECT_EQ(seg_at<hwif::AtomicSeg>(w + 32).compare.get(), 0x1111u);
  EXPECT_EQ(seg_at<hwif::DataSeg>(w + 48).byte_count.get(), 8u);
  EXPECT_EQ(seg_at<hwif::DataSeg>(w + 48).addr.get(), addr_of(&result));

  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.wr.atomic.compare_add = 5;
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  const uint8_t* w2 = h.sq(qp) + 64;
  EXPECT_EQ(ctrl_at(w2).opcode(), hwif::WqeOpcode::kAtomicFa);
  EXPECT_EQ(ctrl_at(w2).wqe_index(), 1);
  EXPECT_EQ(seg_at<hwif::AtomicSeg>(w2 + 32).swap_add.get(), 5u);
  EXPECT_EQ(seg_at<hwif::AtomicSeg>(w2 + 32).compare.get(), 0u);
}

TEST(SendWqe, AnRdmaReadIgnoresTheInlineFlagAndUsesDataSegments) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 1, 64);
  h.to_rts(qp);
  std::array<uint8_t, 64> buf{};
  ibv_sge sge{addr_of(buf.data()), 64, 0x500};
  ibv_send_wr wr = write_wr(1, &sge, 0x9000, 0x77, IBV_SEND_INLINE);
  wr.opcode = IBV_WR_RDMA_READ;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  const uint8_t* w = h.sq(qp);
  EXPECT_EQ(ctrl_at(w).opcode(), hwif::WqeOpcode::kRdmaRead);
  EXPECT_EQ(ctrl_at(w).ds(), 3u);
  EXPECT_EQ(seg_at<hwif::DataSeg>(w + 32).byte_count.get(), 64u);
}

// Posts "hello " and "world" inline from `sges` and expects one inline segment of their 11 bytes.
void expect_hello_world_inline(std::span<ibv_sge> sges) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 3, 60);
  h.to_rts(qp);
  ibv_send_wr wr = write_wr(1, sges.data(), 0x1000, 0x10, IBV_SEND_INLINE);
  wr.num_sge = static_cast<int>(sges.size());
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  const uint8_t* w = h.sq(qp);
  EXPECT_EQ(ctrl_at(w).ds(), 3u);  // ctrl + raddr + align16(4 + 11) / 16
  EXPECT_EQ(be32_at(w + 32), 11u | hwif::kInlineSegFlag);
  EXPECT_EQ(std::memcmp(w + 36, "hello world", 11), 0);
}

TEST(SendWqe, InlineDataFromSeveralSgesIsOneSegmentWithTheFlaggedLength) {
  const char a[] = "hello ";
  const char b[] = "world";
  std::array<ibv_sge, 2> sges{{{addr_of(a), 6, 0}, {addr_of(b), 5, 0}}};
  expect_hello_world_inline(sges);
}

TEST(SendWqe, AnEmptyInlinePieceWithNoAddressAddsNothing) {
  const char a[] = "hello ";
  const char b[] = "world";
  std::array<ibv_sge, 3> sges{{{addr_of(a), 6, 0}, {0, 0, 0}, {addr_of(b), 5, 0}}};
  expect_hello_world_inline(sges);
}

// A QP whose ring is 16 BBs: SEND-only new-API QP with 100 bytes of inline (WQE slot 128 B).
TEST(SendWqe, AnInlineSegmentThatReachesTheRingEndContinuesAtTheRingStart) {
  DeviceHarness h(BlueFlameMode::kAuto);
  ibv_cq* cq = h.cq();
  ibv_qp* qp = h.qp(IBV_QPT_RC, 8, 1, 100, IBV_QP_EX_WITH_SEND, false, cq);
  h.to_rts(qp);
  ASSERT_EQ(h.sq_bbs(qp), 16u);
  std::array<uint8_t, 8> small{};
  ibv_sge sge{addr_of(small.data()), 8, 0x100};
  // Fill BBs 0..14 with one-BB sends, retiring them through a CQE for the 8th.
  for (uint32_t i = 0; i < 15; ++i) {
    ibv_send_wr wr = send_wr(i, &sge, 1, IBV_WR_SEND, i == 7 ? IBV_SEND_SIGNALED : 0);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(post_send(qp, &wr, &bad), 0) << i;
    if (i == 7) {
      hwif::Cqe64 cqe{};
      cqe.sop_drop_qpn = (uint32_t{0x0a} << 24) | qp->qp_num;
      cqe.wqe_counter = 7;
      write_cqe(h.cqes(cq), 8, 0, cqe, hwif::CqeOpcode::kReq);
      ibv_wc wc{};
      ASSERT_EQ(poll_cq(cq, 1, &wc), 1);
      EXPECT_EQ(wc.wr_id, 7u);
    }
  }
  std::array<uint8_t, 100> payload{};
  std::iota(payload.begin(), payload.end(), uint8_t{0});
  ibv_sge isge{addr_of(payload.data()), 100, 0};
  ibv_send_wr wr = send_wr(99, &isge, 1, IBV_WR_SEND, IBV_SEND_INLINE);
  ibv_send_wr* bad = nullptr;
  h.dev.mmio.clear();
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);

  const uint8_t* ring = h.sq(qp);
  const uint8_t* w = ring + 15 * 64;
  EXPECT_EQ(ctrl_at(w).wqe_index(), 15);
  EXPECT_EQ(ctrl_at(w).ds(), 8u);  // 1 + align16(104) / 16
  EXPECT_EQ(be32_at(w + 16), 100u | hwif::kInlineSegFlag);
  EXPECT_EQ(std::memcmp(w + 20, payload.data(), 44), 0);   // up to the ring end
  EXPECT_EQ(std::memcmp(ring, payload.data() + 44, 56), 0);  // the rest at the start
  EXPECT_EQ(h.qp_dbrec(qp)->sq_counter.get(), 17u);

  // The BlueFlame copy gathers the wrapped WQE into one contiguous 128-byte write.
  ASSERT_EQ(h.dev.mmio.size(), 1u);
  ASSERT_EQ(h.dev.mmio[0].bytes.size(), 128u);
  EXPECT_EQ(std::memcmp(h.dev.mmio[0].bytes.data(), w, 64), 0);
  EXPECT_EQ(std::memcmp(h.dev.mmio[0].bytes.data() + 64, ring, 64), 0);
}

}  // namespace
}  // namespace softhca::driver::testing
