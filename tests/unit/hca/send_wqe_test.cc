#include "hca/send_wqe.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
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

// Every field parse_send_wqe() sets for a connected QP's WQE, and the first SGE when there is one.
void expect_same_wqe(const SendWqe& a, const SendWqe& b, const std::string& what) {
  EXPECT_EQ(a.opcode, b.opcode) << what;
  EXPECT_EQ(a.wqe_index, b.wqe_index) << what;
  EXPECT_EQ(a.bbs, b.bbs) << what;
  EXPECT_EQ(a.signaled, b.signaled) << what;
  EXPECT_EQ(a.solicited, b.solicited) << what;
  EXPECT_EQ(a.fence, b.fence) << what;
  EXPECT_EQ(a.imm, b.imm) << what;
  EXPECT_EQ(a.remote_addr, b.remote_addr) << what;
  EXPECT_EQ(a.rkey, b.rkey) << what;
  EXPECT_EQ(a.swap_add, b.swap_add) << what;
  EXPECT_EQ(a.compare, b.compare) << what;
  EXPECT_EQ(a.is_inline, b.is_inline) << what;
  EXPECT_EQ(a.inline_offset, b.inline_offset) << what;
  EXPECT_EQ(a.num_sge, b.num_sge) << what;
  EXPECT_EQ(a.length, b.length) << what;
  if (a.num_sge > 0 && b.num_sge > 0) {
    EXPECT_EQ(a.sge[0].addr, b.sge[0].addr) << what;
    EXPECT_EQ(a.sge[0].length, b.sge[0].length) << what;
    EXPECT_EQ(a.sge[0].lkey, b.sge[0].lkey) << what;
  }
}

// A WRITE at basic block `bb`: control, remote address, then an inline segment of `inline_len`
// bytes or (inline_len < 0) one data segment of 8 bytes.
void put_write(std::vector<uint8_t>& ring, uint32_t bb, int inline_len, WqeOpcode op = WqeOpcode::kRdmaWrite) {
  const uint32_t ds = inline_len < 0 ? 3 : 2 + (static_cast<uint32_t>(inline_len) + 4 + kDsBytes - 1) / kDsBytes;
  uint8_t* p = ring.data() + bb * kSendWqeBbBytes;
  CtrlSeg c{};
  c.set(op, static_cast<uint16_t>(bb + 7), 0x10, ds, kCtrlCqUpdate | kCtrlFence);
  c.imm = 0x01020304;
  RaddrSeg r{};
  r.raddr = 0x1000 + bb;
  r.rkey = 0x300 + bb;
  std::memcpy(p, &c, 16);
  std::memcpy(p + 16, &r, 16);
  if (inline_len < 0) {
    DataSeg d{};
    d.byte_count = 8;
    d.lkey = 0x55;
    d.addr = 0x7000;
    std::memcpy(p + 32, &d, 16);
  } else {
    const Be32 hdr(static_cast<uint32_t>(inline_len) | kInlineSegFlag);
    std::memcpy(p + 32, &hdr, 4);
  }
}

TEST(SendWqe, ThePlainWriteShapeDecodesAsTheFullParserDecodesIt) {
  std::vector<uint8_t> ring(8 * kSendWqeBbBytes, 0xee);
  // One data segment; inline from 1 byte to a WQE of three basic blocks.
  for (const int inline_len : {-1, 1, 8, 12, 13, 28, 29, 100, 150}) {
    put_write(ring, 2, inline_len);
    SendWqe fast;
    SendWqe full;
    ASSERT_TRUE(decode_plain_write(ring, 2 * kSendWqeBbBytes, fast)) << inline_len;
    ASSERT_EQ(parse_send_wqe(ring, 2, false, full), WqeParse::kOk) << inline_len;
    expect_same_wqe(fast, full, "inline length " + std::to_string(inline_len));
  }
}

TEST(SendWqe, EveryOtherShapeIsLeftToTheFullParser) {
  std::vector<uint8_t> ring(4 * kSendWqeBbBytes, 0);
  SendWqe w;
  put_write(ring, 0, 8, WqeOpcode::kRdmaWriteImm);  // an immediate
  EXPECT_FALSE(decode_plain_write(ring, 0, w));
  put_write(ring, 0, 8, WqeOpcode::kSend);  // not a WRITE
  EXPECT_FALSE(decode_plain_write(ring, 0, w));
  put_write(ring, 0, 0);  // no inline bytes
  EXPECT_FALSE(decode_plain_write(ring, 0, w));
  put_write(ring, 3, 100);  // 2 basic blocks from the last one: wraps the ring
  EXPECT_FALSE(decode_plain_write(ring, 3 * kSendWqeBbBytes, w));
  put_write(ring, 0, -1);  // a second data segment
  CtrlSeg c = load_as<CtrlSeg>(ring.data());
  c.qpn_ds = (0x10u << 8) | 4;
  std::memcpy(ring.data(), &c, 16);
  EXPECT_FALSE(decode_plain_write(ring, 0, w));
  put_write(ring, 0, 40);  // inline bytes beyond the WQE's ds
  c = load_as<CtrlSeg>(ring.data());
  c.qpn_ds = (0x10u << 8) | 4;
  std::memcpy(ring.data(), &c, 16);
  EXPECT_FALSE(decode_plain_write(ring, 0, w));
}

TEST(SendWqe, WhateverThePlainWriteDecoderTakesTheFullParserDecodesTheSame) {
  // Random WQEs, biased towards the plain shape: where the fast decoder says yes, the full parser
  // must agree on every field. Its no is always safe (the full parser runs then).
  std::mt19937 rng(12345);
  std::vector<uint8_t> ring(8 * kSendWqeBbBytes);
  const WqeOpcode ops[] = {WqeOpcode::kRdmaWrite, WqeOpcode::kRdmaWrite, WqeOpcode::kRdmaWriteImm, WqeOpcode::kSend,
                           WqeOpcode::kRdmaRead};
  int taken = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    for (auto& b : ring) b = static_cast<uint8_t>(rng());
    const uint32_t bb = rng() % 8;
    CtrlSeg c{};
    c.set(ops[rng() % 5], static_cast<uint16_t>(rng()), 0x10, rng() % 9, static_cast<uint8_t>(rng()));
    std::memcpy(ring.data() + bb * kSendWqeBbBytes, &c, 16);
    if (rng() % 2 != 0) {  // an inline header of a plausible length
      const Be32 hdr((rng() % 160) | kInlineSegFlag);
      std::memcpy(ring.data() + (bb * kSendWqeBbBytes + 32) % ring.size(), &hdr, 4);
    }
    SendWqe fast;
    SendWqe full;
    if (!decode_plain_write(ring, bb * kSendWqeBbBytes, fast)) continue;
    ++taken;
    ASSERT_EQ(parse_send_wqe(ring, bb, false, full), WqeParse::kOk) << "trial " << trial;
    expect_same_wqe(fast, full, "trial " + std::to_string(trial));
  }
  EXPECT_GT(taken, 500);  // Expect: the shape came up often enough to mean something
}

}  // namespace
}  // namespace softhca::hca
