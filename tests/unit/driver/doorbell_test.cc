// How the driver rings the send queue: one doorbell per postlist, BlueFlame for single WQEs
// by mode, alternating BlueFlame halves (verbs-abi.md §6.1 "Post list vs. BlueFlame").
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "fake_device.h"
#include "test_util.h"

namespace softhca::driver::testing {
namespace {

using pcie::TlpCause;
using pcie::TlpType;

TEST(Doorbell, APostlistOf32WrsRingsExactlyOne8ByteDoorbellCarryingTheLastWqesCtrl) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC, 64);
  h.to_rts(qp);
  std::array<uint8_t, 64> buf{};
  ibv_sge sge{addr_of(buf.data()), 64, 0x100};
  std::vector<ibv_send_wr> wrs;
  for (uint64_t i = 0; i < 32; ++i) wrs.push_back(write_wr(i, &sge, 0x10000 + i * 64, 0x80000100));
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp, link(wrs), &bad), 0);  // through context.ops, as applications call it

  ASSERT_EQ(h.dev.mmio.size(), 1u);
  EXPECT_EQ(h.dev.mmio[0].offset, kBfreg1);
  ASSERT_EQ(h.dev.mmio[0].bytes.size(), 8u);
  const uint8_t* last = h.sq(qp) + 31 * 64;  // an RDMA WRITE with one SGE is 48 bytes: one BB each
  EXPECT_EQ(std::memcmp(h.dev.mmio[0].bytes.data(), last, 8), 0);
  hwif::CtrlSeg c;
  std::memcpy(static_cast<void*>(&c), h.dev.mmio[0].bytes.data(), 8);
  EXPECT_EQ(c.wqe_index(), 31);
  EXPECT_EQ(c.opcode(), hwif::WqeOpcode::kRdmaWrite);
  EXPECT_EQ(c.qpn(), qp->qp_num);
  EXPECT_EQ(c.ds(), 3u);
  EXPECT_EQ(h.qp_dbrec(qp)->sq_counter.get(), 32u);

  const auto s = h.counters.snapshot();
  EXPECT_EQ(s.tlps(TlpType::kMWr, TlpCause::kDoorbell), 1u);
  EXPECT_EQ(s.tlps(TlpType::kMWr, TlpCause::kBlueFlame), 0u);
}

TEST(Doorbell, APostlistOf32InlineWrsRingsOneDoorbellEvenWhenBlueFlameIsPreferred) {
  DeviceHarness h(BlueFlameMode::kPrefer);
  ibv_qp* qp = h.qp(IBV_QPT_RC, 64, 1, 32);
  h.to_rts(qp);
  std::array<uint8_t, 32> payload{};
  ibv_sge sge{addr_of(payload.data()), 32, 0};
  std::vector<ibv_send_wr> wrs;
  for (uint64_t i = 0; i < 32; ++i) wrs.push_back(send_wr(i, &sge, 1, IBV_WR_SEND, IBV_SEND_INLINE));
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp, link(wrs), &bad), 0);
  ASSERT_EQ(h.dev.mmio.size(), 1u);
  ASSERT_EQ(h.dev.mmio[0].bytes.size(), 8u);
  EXPECT_EQ(std::memcmp(h.dev.mmio[0].bytes.data(), h.sq(qp) + 31 * 64, 8), 0);
  EXPECT_EQ(h.counters.snapshot().tlps(TlpType::kMWr, TlpCause::kBlueFlame), 0u);
}

TEST(Doorbell, ASingleInlineWqeGoesByBlueFlameInAutoModeAndAlternatesHalves) {
  DeviceHarness h(BlueFlameMode::kAuto);
  ibv_qp* qp = h.qp(IBV_QPT_RC, 64, 1, 64);
  h.to_rts(qp);
  std::array<uint8_t, 32> payload{};
  payload.fill(0x5a);
  ibv_sge sge{addr_of(payload.data()), 32, 0};
  for (uint64_t i = 0; i < 3; ++i) {
    ibv_send_wr wr = send_wr(i, &sge, 1, IBV_WR_SEND, IBV_SEND_INLINE | IBV_SEND_SIGNALED);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  }
  ASSERT_EQ(h.dev.mmio.size(), 3u);
  // SEND + 32 inline bytes: 16 + 4 + 32 -> 4 DS -> one 64-byte block.
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(h.dev.mmio[i].offset, kBfreg1 + (i % 2) * hwif::kBfBufBytes) << i;
    ASSERT_EQ(h.dev.mmio[i].bytes.size(), 64u);
    EXPECT_EQ(std::memcmp(h.dev.mmio[i].bytes.data(), h.sq(qp) + i * 64, 64), 0) << i;
  }
  const auto s = h.counters.snapshot();
  EXPECT_EQ(s.tlps(TlpType::kMWr, TlpCause::kBlueFlame), 3u);
  EXPECT_EQ(s.tlps(TlpType::kMWr, TlpCause::kDoorbell), 0u);
  EXPECT_EQ(h.qp_dbrec(qp)->sq_counter.get(), 3u);
}

TEST(Doorbell, ASingleNonInlineWqeRingsADoorbellInAutoModeAlsoAlternatingHalves) {
  DeviceHarness h(BlueFlameMode::kAuto);
  ibv_qp* qp = h.qp(IBV_QPT_RC);
  h.to_rts(qp);
  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 0x100};
  for (uint64_t i = 0; i < 2; ++i) {
    ibv_send_wr wr = send_wr(i, &sge, 1);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  }
  ASSERT_EQ(h.dev.mmio.size(), 2u);
  EXPECT_EQ(h.dev.mmio[0].offset, kBfreg1);
  EXPECT_EQ(h.dev.mmio[1].offset, kBfreg1 + hwif::kBfBufBytes);
  EXPECT_EQ(h.dev.mmio[0].bytes.size(), 8u);
  EXPECT_EQ(h.dev.mmio[1].bytes.size(), 8u);
}

TEST(Doorbell, BlueFlameOffNeverWritesTheWqeThroughTheBar) {
  DeviceHarness h(BlueFlameMode::kOff);
  ibv_qp* qp = h.qp(IBV_QPT_RC, 64, 1, 64);
  h.to_rts(qp);
  std::array<uint8_t, 16> payload{};
  ibv_sge sge{addr_of(payload.data()), 16, 0};
  ibv_send_wr wr = send_wr(1, &sge, 1, IBV_WR_SEND, IBV_SEND_INLINE);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  ASSERT_EQ(h.dev.mmio.size(), 1u);
  EXPECT_EQ(h.dev.mmio[0].bytes.size(), 8u);
  EXPECT_EQ(std::memcmp(h.dev.mmio[0].bytes.data(), h.sq(qp), 8), 0);
  EXPECT_EQ(h.counters.snapshot().tlps(TlpType::kMWr, TlpCause::kBlueFlame), 0u);
}

TEST(Doorbell, BlueFlamePreferWritesEverySingleWqeThatFitsButNeverAPostlist) {
  DeviceHarness h(BlueFlameMode::kPrefer);
  ibv_qp* qp = h.qp(IBV_QPT_RC);
  h.to_rts(qp);
  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 0x100};
  ibv_send_wr one = write_wr(1, &sge, 0x1000, 0x200);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp, &one, &bad), 0);
  std::vector<ibv_send_wr> two{write_wr(2, &sge, 0x1000, 0x200), write_wr(3, &sge, 0x1000, 0x200)};
  ASSERT_EQ(post_send(qp, link(two), &bad), 0);
  ASSERT_EQ(h.dev.mmio.size(), 2u);
  EXPECT_EQ(h.dev.mmio[0].bytes.size(), 64u);
  EXPECT_EQ(std::memcmp(h.dev.mmio[0].bytes.data(), h.sq(qp), 64), 0);
  EXPECT_EQ(h.dev.mmio[1].offset, kBfreg1 + hwif::kBfBufBytes);
  EXPECT_EQ(h.dev.mmio[1].bytes.size(), 8u);
  EXPECT_EQ(std::memcmp(h.dev.mmio[1].bytes.data(), h.sq(qp) + 2 * 64, 8), 0);
}

TEST(Doorbell, AnInlineWqeLargerThanTheBlueFlameBufferIsRungWithADoorbell) {
  DeviceHarness h(BlueFlameMode::kAuto);
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 1, 300);
  h.to_rts(qp);
  std::vector<uint8_t> payload(300, 0x11);
  ibv_sge sge{addr_of(payload.data()), 300, 0};
  ibv_send_wr wr = send_wr(1, &sge, 1, IBV_WR_SEND, IBV_SEND_INLINE);  // 16 + 4 + 300 -> 320 B > 256
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  ASSERT_EQ(h.dev.mmio.size(), 1u);
  EXPECT_EQ(h.dev.mmio[0].bytes.size(), 8u);
  EXPECT_EQ(h.qp_dbrec(qp)->sq_counter.get(), 5u);  // 320 bytes = 5 BBs
}

TEST(Doorbell, TheContextsUarIndexSelectsTheUarPage) {
  DeviceHarness h(BlueFlameMode::kAuto, 3);
  ibv_qp* qp = h.qp(IBV_QPT_RC);
  h.to_rts(qp);
  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 0x100};
  ibv_send_wr wr = send_wr(1, &sge, 1);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  ASSERT_EQ(h.dev.mmio.size(), 1u);
  EXPECT_EQ(h.dev.mmio[0].offset, 0x1000u + 3 * 0x1000u + 0xA00u);
  EXPECT_EQ(h.dev.qps.at(qp->qp_num).uar_index, 3u);
}

}  // namespace
}  // namespace softhca::driver::testing
