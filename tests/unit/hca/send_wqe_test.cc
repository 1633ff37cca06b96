#include "hca/send_wqe.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace softhca::hca {
namespace {

using namespace hwif;

TEST(SendWqe, AnRdmaWriteWithOneDataSegmentDecodes) {
  std::vector<uint8_t> ring(4 * kSendWqeBbBytes, 0);
  CtrlSeg c{};
  c.set(WqeOpcode::kRdmaWrite, 2, 0x123, 3, kCtrlCqUpdate);
  RaddrSeg r{};
  r.raddr = 0x1122334455667788ull;
  r.rkey = 0xabcd;
  DataSeg d{};
  d.byte_count = 8;
  d.lkey = 0x77;
  d.addr = 0x5000;
  uint8_t* p = ring.data() + 2 * kSendWqeBbBytes;
  std::memcpy(p, &c, 16);
  std::memcpy(p + 16, &r, 16);
  std::memcpy(p + 32, &d, 16);
  SendWqe w;
  ASSERT_EQ(parse_send_wqe(ring, 2, false, w), WqeParse::kOk);
  EXPECT_EQ(w.opcode, WqeOpcode::kRdmaWrite);
  EXPECT_TRUE(w.signaled);
  EXPECT_EQ(w.bbs, 1u);
  EXPECT_EQ(w.remote_addr, 0x1122334455667788ull);
  EXPECT_EQ(w.rkey, 0xabcdu);
  ASSERT_EQ(w.num_sge, 1u);
  EXPECT_EQ(w.sge[0].addr, 0x5000u);
  EXPECT_EQ(w.sge[0].lkey, 0x77u);
  EXPECT_EQ(w.length, 8u);
}

TEST(SendWqe, AnInlineSegmentThatWrapsTheRingIsFoundAcrossTheEnd) {
  std::vector<uint8_t> ring(2 * kSendWqeBbBytes, 0);
  // A 100-byte inline SEND in the last basic block: ctrl 16 + inline 4 + 100 = 120 -> ds 8, 2 BBs.
  CtrlSeg c{};
  c.set(WqeOpcode::kSend, 1, 0x10, 8, 0);
  uint8_t* p = ring.data() + kSendWqeBbBytes;
  std::memcpy(p, &c, 16);
  const Be32 hdr(100u | kInlineSegFlag);
  std::memcpy(p + 16, &hdr, 4);
  for (uint32_t i = 0; i < 100; ++i) ring[(kSendWqeBbBytes + 20 + i) % ring.size()] = static_cast<uint8_t>(i);
  SendWqe w;
  ASSERT_EQ(parse_send_wqe(ring, 1, false, w), WqeParse::kOk);
  EXPECT_TRUE(w.is_inline);
  EXPECT_EQ(w.length, 100u);
  EXPECT_EQ(w.bbs, 2u);
  std::vector<uint8_t> out(100);
  copy_from_ring(ring, w.inline_offset, out.data(), 100);
  for (uint32_t i = 0; i < 100; ++i) EXPECT_EQ(out[i], i);
}

TEST(SendWqe, ADsLargerThanTheBiggestWqeIsRefused) {
  std::vector<uint8_t> ring(16 * kSendWqeBbBytes, 0);
  CtrlSeg c{};
  c.set(WqeOpcode::kSend, 0, 0x10, 0, 0);
  std::memcpy(ring.data(), &c, 16);
  SendWqe w;
  EXPECT_EQ(parse_send_wqe(ring, 0, false, w), WqeParse::kBadSize);
}

TEST(SendWqe, DataSegmentsThatWrapTheRingAreReadAcrossTheEnd) {
  std::vector<uint8_t> ring(2 * kSendWqeBbBytes, 0);
  // A WRITE with four data segments in the last basic block: ctrl + raddr + 4 data = ds 6, 2 BBs;
  // the last two data segments lie at the ring's start.
  CtrlSeg c{};
  c.set(WqeOpcode::kRdmaWrite, 1, 0x10, 6, 0);
  RaddrSeg r{};
  r.raddr = 0x9000;
  r.rkey = 0x42;
  auto put = [&](uint32_t offset, const auto& seg) { std::memcpy(ring.data() + offset % ring.size(), &seg, 16); };
  put(kSendWqeBbBytes, c);
  put(kSendWqeBbBytes + 16, r);
  for (uint32_t i = 0; i < 4; ++i) {
    DataSeg d{};
    d.byte_count = 100 + i;
    d.lkey = 0x70 + i;
    d.addr = 0x5000 + 0x100 * i;
    put(kSendWqeBbBytes + 32 + 16 * i, d);
  }
  SendWqe w;
  ASSERT_EQ(parse_send_wqe(ring, 1, false, w), WqeParse::kOk);
  EXPECT_EQ(w.remote_addr, 0x9000u);
  EXPECT_EQ(w.rkey, 0x42u);
  EXPECT_EQ(w.bbs, 2u);
  ASSERT_EQ(w.num_sge, 4u);
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(w.sge[i].length, 100 + i);
    EXPECT_EQ(w.sge[i].lkey, 0x70 + i);
    EXPECT_EQ(w.sge[i].addr, 0x5000u + 0x100 * i);
  }
  EXPECT_EQ(w.length, 406u);
}

TEST(SendWqe, AWqeLargerThanItsWholeRingIsRefused) {
  std::vector<uint8_t> ring(kSendWqeBbBytes, 0);
  CtrlSeg c{};
  c.set(WqeOpcode::kSend, 0, 0x10, 5, 0);  // 80 bytes in a 64-byte ring
  std::memcpy(ring.data(), &c, 16);
  SendWqe w;
  EXPECT_EQ(parse_send_wqe(ring, 0, false, w), WqeParse::kBadSize);
}

TEST(SendWqe, AnUnknownOpcodeIsRefused) {
  std::vector<uint8_t> ring(kSendWqeBbBytes, 0);
  CtrlSeg c{};
  c.set(static_cast<WqeOpcode>(0x3f), 0, 0x10, 1, 0);
  std::memcpy(ring.data(), &c, 16);
  SendWqe w;
  EXPECT_EQ(parse_send_wqe(ring, 0, false, w), WqeParse::kBadOpcode);
}

}  // namespace
}  // namespace softhca::hca
