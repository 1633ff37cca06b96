// parse() against damaged input: flipped bits, truncation, hand-made malformed headers with valid
// CRCs, and random bytes. It must never accept a damaged packet or read outside its input (ASan).
#include <gtest/gtest.h>

#include <vector>

#include "fabric/packet/packet.h"
#include "packet_test_util.h"

namespace softhca::fabric {
namespace {

using testing::build;
using testing::parse_status;
using testing::Random;
using testing::random_fields;
using testing::reseal;
using testing::reseal_vcrc;

// A few packets of different shapes: local and global, every pad count, with and without payload.
std::vector<std::vector<uint8_t>> sample_packets() {
  Random r(7);
  std::vector<std::vector<uint8_t>> out;
  out.push_back(build(random_fields(BthOpcode::kRcRdmaWriteOnly, false, r), r.bytes(8)));
  out.push_back(build(random_fields(BthOpcode::kUdSendOnlyImm, true, r), r.bytes(13)));
  out.push_back(build(random_fields(BthOpcode::kRcAcknowledge, false, r), {}));
  out.push_back(build(random_fields(BthOpcode::kRcAtomicAcknowledge, true, r), {}));
  out.push_back(build(random_fields(BthOpcode::kUcSendLastImm, false, r), r.bytes(6)));
  out.push_back(build(random_fields(BthOpcode::kRcRdmaReadResponseMiddle, false, r), r.bytes(256)));
  out.push_back(build(random_fields(BthOpcode::kRcSendOnlyInv, true, r), r.bytes(1)));
  for (const auto& p : out) EXPECT_EQ(parse_status(p), ParseStatus::kOk);
  return out;
}

// LRH PktLen: the low 3 bits of byte 4 and all of byte 5 (the top 5 bits of byte 4 are Rsv5).
bool in_pkt_len_field(size_t bit) { return (bit / 8 == 4 && bit % 8 < 3) || bit / 8 == 5; }

TEST(ParseRobustness, AFlippedBitAnywhereIsCaught) {
  for (auto p : sample_packets()) {
    for (size_t bit = 0; bit < p.size() * 8; ++bit) {
      p[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      const ParseStatus s = parse_status(p);
      ASSERT_NE(s, ParseStatus::kOk) << "bit " << bit << " of " << p.size() << " bytes";
      // Expect: the link layer sees it first; a flip in PktLen makes the frame the wrong length.
      if (in_pkt_len_field(bit)) {
        EXPECT_TRUE(s == ParseStatus::kTruncated || s == ParseStatus::kBadLrh) << to_string(s);
      } else {
        EXPECT_EQ(s, ParseStatus::kBadVcrc) << "bit " << bit;
      }
      p[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    }
  }
}

TEST(ParseRobustness, ABitFlippedBehindAFreshVcrcIsCaughtByTheIcrcUnlessTheFieldIsVariant) {
  // As if a switch corrupted the packet in its buffer and then computed a good VCRC for it.
  for (auto p : sample_packets()) {
    const bool global = (p[1] & 0x3) == 3;
    const size_t bth = global ? 48 : 8;
    for (size_t bit = 0; bit < (p.size() - 2) * 8; ++bit) {
      const size_t byte = bit / 8;
      const uint8_t mask = static_cast<uint8_t>(1u << (bit % 8));
      const bool lrh_structural = byte == 0 ? (mask & 0x0f) != 0 : (byte == 1 && (mask & 0x03) != 0);
      const bool grh_structural =
          global && (byte == 8 ? (mask & 0xf0) != 0 : (byte == 12 || byte == 13 || byte == 14));
      if (lrh_structural || grh_structural || in_pkt_len_field(bit)) continue;  // checked before the ICRC
      const bool variant = (byte == 0 && !global) || (global && byte < 8) ||
                           (global && (byte == 8 || byte == 9 || byte == 10 || byte == 11 || byte == 15)) ||
                           byte == bth + 4;
      auto q = p;
      q[byte] ^= mask;
      reseal_vcrc(q);
      // Expect: a variant field may change on the way (kOk); anything else breaks the ICRC.
      EXPECT_EQ(parse_status(q), variant ? ParseStatus::kOk : ParseStatus::kBadIcrc) << "byte " << byte;
    }
  }
}

TEST(ParseRobustness, EveryTruncationIsReportedAsTruncated) {
  for (const auto& p : sample_packets()) {
    for (size_t len = 0; len < p.size(); ++len) {
      std::vector<uint8_t> cut(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(len));
      EXPECT_EQ(parse_status(cut), ParseStatus::kTruncated) << len << " of " << p.size();
    }
  }
}

TEST(ParseRobustness, ATrailingExtraByteIsALengthMismatch) {
  for (auto p : sample_packets()) {
    p.push_back(0);
    EXPECT_EQ(parse_status(p), ParseStatus::kBadLrh);
  }
}

TEST(ParseRobustness, OnErrorTheOutputsAreReset) {
  auto p = sample_packets().front();
  PacketFields f;
  std::span<const uint8_t> payload;
  ASSERT_EQ(parse(p, f, payload), ParseStatus::kOk);
  p[20] ^= 1;
  ASSERT_EQ(parse(p, f, payload), ParseStatus::kBadVcrc);
  EXPECT_EQ(f, PacketFields{});
  EXPECT_TRUE(payload.empty());
}

// ---- malformed headers with valid CRCs ----

std::vector<uint8_t> send_only(size_t payload_bytes, bool global = false) {
  PacketFields f;
  f.opcode = BthOpcode::kRcSendOnly;
  if (global) f.grh = GrhFields{};
  return build(f, std::vector<uint8_t>(payload_bytes, 0x5a));
}

TEST(ParseMalformed, RawAndIpv6LinkNextHeadersAreNotIbaTransport) {
  for (uint8_t lnh : {0, 1}) {
    auto p = send_only(8);
    p[1] = static_cast<uint8_t>((p[1] & ~0x3) | lnh);
    reseal(p);
    EXPECT_EQ(parse_status(p), ParseStatus::kBadLrh) << int{lnh};
  }
}

TEST(ParseMalformed, ALinkVersionOtherThanZeroIsRejected) {
  auto p = send_only(8);
  p[0] |= 0x01;
  reseal(p);
  EXPECT_EQ(parse_status(p), ParseStatus::kBadLrh);
}

TEST(ParseMalformed, AGrhMustSayIpv6IbaTransportAndTheRightPayloadLength) {
  auto p = send_only(8, true);
  p[8] = static_cast<uint8_t>((p[8] & 0x0f) | 0x40);  // IPVer 4
  reseal(p);
  EXPECT_EQ(parse_status(p), ParseStatus::kBadGrh);
  p = send_only(8, true);
  p[8 + 6] = 0x11;  // NxtHdr UDP
  reseal(p);
  EXPECT_EQ(parse_status(p), ParseStatus::kBadGrh);
  p = send_only(8, true);
  p[8 + 5] ^= 0x04;  // PayLen off by 4
  reseal(p);
  EXPECT_EQ(parse_status(p), ParseStatus::kBadGrh);
}

TEST(ParseMalformed, AnOpcodeOutsideTheTableIsRejected) {
  // (0xb5: XRC's counterpart of RC's reserved 0x15; 0xb8: past XRC's last opcode.)
  for (uint8_t op : {0x15, 0x2c, 0x40, 0x64 + 2, 0x81, 0xb5, 0xb8, 0xff}) {
    auto p = send_only(8);
    p[8] = op;
    reseal(p);
    EXPECT_EQ(parse_status(p), ParseStatus::kBadOpcode) << int{op};
  }
}

TEST(ParseMalformed, ATransportVersionOtherThanZeroIsRejected) {
  auto p = send_only(8);
  p[9] |= 0x01;
  reseal(p);
  EXPECT_EQ(parse_status(p), ParseStatus::kBadOpcode);
}

TEST(ParseMalformed, APadCountLargerThanThePayloadIsBadPad) {
  auto p = send_only(0);
  p[9] |= 0x30;  // PadCnt 3 with nothing in front of the ICRC
  reseal(p);
  EXPECT_EQ(parse_status(p), ParseStatus::kBadPad);
}

TEST(ParseMalformed, AnAckWithAPadCountIsBadPad) {
  PacketFields f;
  f.opcode = BthOpcode::kRcAcknowledge;
  f.aeth = AethFields{};
  auto p = build(f, {});
  p[9] |= 0x10;
  reseal(p);
  EXPECT_EQ(parse_status(p), ParseStatus::kBadPad);
}

TEST(ParseMalformed, PayloadBehindAnAckIsBadLength) {
  auto p = send_only(8);  // relabelled as ACK: 4 bytes become the AETH, 4 are left over
  p[8] = static_cast<uint8_t>(BthOpcode::kRcAcknowledge);
  reseal(p);
  EXPECT_EQ(parse_status(p), ParseStatus::kBadLength);
}

TEST(ParseMalformed, HeadersLongerThanThePacketAreBadLength) {
  auto p = send_only(8);  // relabelled as CmpSwap, whose 28-byte AtomicETH does not fit
  p[8] = static_cast<uint8_t>(BthOpcode::kRcCompareSwap);
  reseal(p);
  EXPECT_EQ(parse_status(p), ParseStatus::kBadLength);

  // PktLen of 5 words: not even room for LRH, BTH and ICRC.
  std::vector<uint8_t> tiny(22, 0);
  tiny[1] = 0x02;
  tiny[5] = 5;
  reseal_vcrc(tiny);
  EXPECT_EQ(parse_status(tiny), ParseStatus::kBadLength);
}

TEST(ParseMalformed, APayloadAboveTheLargestMtuIsBadLength) {
  PacketFields f;
  f.opcode = BthOpcode::kRcRdmaWriteOnly;
  f.reth = RethFields{};
  auto p = build(f, std::vector<uint8_t>(kMaxPayloadBytes, 1));
  p[8] = static_cast<uint8_t>(BthOpcode::kRcRdmaReadResponseOnly);  // 4-byte AETH: 4108 bytes left
  reseal(p);
  EXPECT_EQ(parse_status(p), ParseStatus::kBadLength);
}

TEST(ParseMalformed, AWrongIcrcBehindAGoodVcrcIsBadIcrc) {
  auto p = send_only(8);
  p[p.size() - 6] ^= 0x80;
  reseal_vcrc(p);
  EXPECT_EQ(parse_status(p), ParseStatus::kBadIcrc);
}

// ---- random input ----

void expect_consistent(std::span<const uint8_t> bytes) {
  PacketFields f;
  std::span<const uint8_t> payload;
  const ParseStatus s = parse(bytes, f, payload);
  if (s != ParseStatus::kOk) {
    EXPECT_EQ(f, PacketFields{});
    EXPECT_TRUE(payload.empty());
    return;
  }
  // Expect: whatever parse accepts, serialize writes back to a packet that parses the same.
  EXPECT_TRUE(payload.empty() || (payload.data() >= bytes.data() &&
                                  payload.data() + payload.size() <= bytes.data() + bytes.size()));
  const auto again = build(f, payload);
  ASSERT_FALSE(again.empty());
  PacketFields g;
  std::span<const uint8_t> payload2;
  ASSERT_EQ(parse(again, g, payload2), ParseStatus::kOk);
  EXPECT_EQ(g, f);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), payload2.begin(), payload2.end()));
}

TEST(ParseRobustness, RandomBytesAreRejectedWithoutReadingOutOfBounds) {
  Random r(99);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    // Exactly-sized heap buffers, so ASan sees any read past the end.
    const auto bytes = r.bytes(r.upto(120));
    PacketFields f;
    std::span<const uint8_t> payload;
    if (parse(bytes, f, payload) == ParseStatus::kOk) ++accepted;
    expect_consistent(bytes);
  }
  EXPECT_EQ(accepted, 0);  // PktLen and a 16-bit VCRC must both match by chance
}

TEST(ParseRobustness, MutatedPacketsWithFreshCrcsParseConsistently) {
  // Random damage to the headers, then valid CRCs, so every later check gets exercised.
  Random r(123);
  int ok = 0;
  int rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    const BthOpcode op = kAllOpcodes[r.upto(kAllOpcodes.size() - 1)];
    const bool global = r.coin();
    const PacketFields f = random_fields(op, global, r);
    auto p = build(f, opcode_info(op).has_payload ? r.bytes(r.upto(40)) : std::vector<uint8_t>{});
    const size_t head = std::min<size_t>(p.size() - 6, global ? 88 : 48);
    for (uint64_t n = 1 + r.upto(3); n > 0; --n) {
      const size_t at = r.upto(head - 1);
      if (at == 4 || at == 5) continue;  // keep PktLen, so the CRCs land where parse looks
      p[at] = r.u8();
    }
    reseal(p);
    (parse_status(p) == ParseStatus::kOk ? ok : rejected)++;
    expect_consistent(p);
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace softhca::fabric
