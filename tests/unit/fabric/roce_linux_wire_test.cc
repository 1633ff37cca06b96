// The RoCEv2 wire rules that Linux's Soft-RoCE (rdma_rxe) needs from us (docs/roce-wire.md), checked
// on packets it sent (linux_rxe_captures.h): its ICRC is ours, an Identification a UDP socket never
// shows is solved for, a zero UDP checksum and any entropy source port are accepted, and the CRC
// algebra the solution rests on.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "fabric/packet/crc.h"
#include "fabric/packet/roce.h"
#include "linux_rxe_captures.h"
#include "packet_test_util.h"

namespace softhca::fabric {
namespace {

using testing::kRxeRcAck;
using testing::kRxeRcSendOnly;
using testing::kRxeRdmaReadResponseOnly;
using testing::kRxeUdSendOnly;
using testing::Random;

const std::array<const std::vector<uint8_t>*, 4> kCaptures = {&kRxeRcAck, &kRxeRcSendOnly, &kRxeUdSendOnly,
                                                              &kRxeRdmaReadResponseOnly};

uint16_t identification_of(const std::vector<uint8_t>& p) { return static_cast<uint16_t>(p[4] << 8 | p[5]); }

// The packet as our UDP carrier hands it on: the same bytes under a header rebuilt with
// Identification 0 (and its checksum refreshed), everything else as received.
std::vector<uint8_t> as_rebuilt(const std::vector<uint8_t>& captured, uint16_t id = 0) {
  std::vector<uint8_t> p = captured;
  p[4] = static_cast<uint8_t>(id >> 8);
  p[5] = static_cast<uint8_t>(id);
  p[10] = p[11] = 0;
  const uint16_t sum = ipv4_header_checksum(std::span<const uint8_t>(p).first<kIpv4HeaderBytes>());
  p[10] = static_cast<uint8_t>(sum >> 8);
  p[11] = static_cast<uint8_t>(sum);
  return p;
}

ParseStatus parse_with(const std::vector<uint8_t>& p, Ipv4IdRule rule) {
  PacketFields f;
  std::span<const uint8_t> payload;
  UdpPorts ports;
  return parse_roce(p, f, payload, ports, kRoceV2UdpPort, rule);
}

// ---- the CRC register algebra ----

TEST(Crc32Algebra, XTimesItsInverseIsOneAndPowersAdd) {
  const uint32_t x = crc32_x_power(1);
  EXPECT_EQ(x, kCrc32One >> 1);
  EXPECT_EQ(crc32_multiply(x, crc32_x_power(-1)), kCrc32One);
  EXPECT_EQ(crc32_x_power(0), kCrc32One);
  for (const int64_t a : {-70000, -33, -1, 0, 5, 31, 32, 33, 4096 * 8}) {
    for (const int64_t b : {-12345, -8, 0, 1, 64, 99991}) {
      EXPECT_EQ(crc32_multiply(crc32_x_power(a), crc32_x_power(b)), crc32_x_power(a + b)) << a << " + " << b;
    }
  }
}

TEST(Crc32Algebra, ZeroBytesFedToARegisterMultiplyItByXToTheEightN) {
  Random r(18);
  for (int round = 0; round < 50; ++round) {
    const std::vector<uint8_t> head = r.bytes(1 + r.upto(40));
    const std::vector<uint8_t> zeros(r.upto(300), 0);
    // Expect: a zero byte enters no bits, it only shifts the register by 8 and reduces it.
    Crc32 c;
    c.update(head);
    const uint32_t before = c.state();
    c.update(zeros);
    EXPECT_EQ(c.state(), crc32_multiply(before, crc32_x_power(8 * static_cast<int64_t>(zeros.size()))));
  }
}

// ---- Linux's packets ----

TEST(RxeCaptures, EachParsesWithItsOwnHeaderSoOurIcrcIsLinuxs) {
  for (const std::vector<uint8_t>* p : kCaptures) {
    PacketFields f;
    std::span<const uint8_t> payload;
    UdpPorts ports;
    ASSERT_EQ(parse_roce(*p, f, payload, ports), ParseStatus::kOk);
    // Expect: Linux's choices: a non-zero Identification, DF, TTL 64, a source port of the entropy
    // range, and no UDP checksum, all accepted.
    EXPECT_NE(identification_of(*p), 0);
    EXPECT_EQ((*p)[6], 0x40);
    EXPECT_EQ(f.grh->hop_limit, 64);
    EXPECT_GE(ports.src, kRoceSrcPortMin);
    EXPECT_EQ(ports.dst, kRoceV2UdpPort);
    EXPECT_EQ((*p)[26] << 8 | (*p)[27], 0);
  }
}

TEST(RxeCaptures, TheFieldsAreTheOnesTheProgramsSent) {
  PacketFields f;
  std::span<const uint8_t> payload;
  ASSERT_EQ(parse_roce(kRxeRcAck, f, payload), ParseStatus::kOk);
  EXPECT_EQ(f.opcode, BthOpcode::kRcAcknowledge);
  EXPECT_EQ(f.dest_qp, Qpn(0xb77abb));
  ASSERT_TRUE(f.aeth.has_value());
  EXPECT_EQ(f.aeth->msn, 1u);
  EXPECT_TRUE(payload.empty());

  ASSERT_EQ(parse_roce(kRxeRcSendOnly, f, payload), ParseStatus::kOk);
  EXPECT_EQ(f.opcode, BthOpcode::kRcSendOnly);
  EXPECT_EQ(std::vector<uint8_t>(payload.begin(), payload.end()), std::vector<uint8_t>(64, 0x7b));

  ASSERT_EQ(parse_roce(kRxeUdSendOnly, f, payload), ParseStatus::kOk);
  EXPECT_EQ(f.opcode, BthOpcode::kUdSendOnly);
  ASSERT_TRUE(f.deth.has_value());
  EXPECT_EQ(f.deth->qkey, 0x11111111u);
  EXPECT_EQ(f.deth->src_qp, Qpn(0x13));
  EXPECT_EQ(payload.size(), 64u);

  ASSERT_EQ(parse_roce(kRxeRdmaReadResponseOnly, f, payload), ParseStatus::kOk);
  EXPECT_EQ(f.opcode, BthOpcode::kRcRdmaReadResponseOnly);
  EXPECT_EQ(payload.size(), 64u);
}

TEST(RxeCaptures, UnderARebuiltHeaderOnlyTheUnseenIdentificationRuleAcceptsThem) {
  for (const std::vector<uint8_t>* p : kCaptures) {
    const std::vector<uint8_t> rebuilt = as_rebuilt(*p);
    // Expect: the ICRC over identification 0 fails (the issue-18 drop of every rxe packet) ...
    EXPECT_EQ(parse_with(rebuilt, Ipv4IdRule::kCovered), ParseStatus::kBadIcrc);
    // ... the rule for a header whose identification was not seen accepts it, and the one
    // identification that satisfies the ICRC is the one Linux sent.
    EXPECT_EQ(parse_with(rebuilt, Ipv4IdRule::kUnseen), ParseStatus::kOk);
    EXPECT_EQ(solve_ipv4_identification(rebuilt), identification_of(*p));
  }
}

TEST(RxeCaptures, ExactlyOneOfAll65536IdentificationsSatisfiesTheIcrc) {
  // A search over the field agrees with the solution, and finds no second value.
  std::vector<uint8_t> p = as_rebuilt(kRxeUdSendOnly);
  const size_t icrc_off = p.size() - kIcrcBytes;
  const uint32_t wanted = p[icrc_off] | p[icrc_off + 1] << 8 | p[icrc_off + 2] << 16 | uint32_t{p[icrc_off + 3]} << 24;
  std::vector<uint16_t> found;
  for (uint32_t id = 0; id <= 0xffff; ++id) {
    p[4] = static_cast<uint8_t>(id >> 8);
    p[5] = static_cast<uint8_t>(id);
    if (compute_roce_icrc(std::span<const uint8_t>(p).first(icrc_off)) == wanted) found.push_back(static_cast<uint16_t>(id));
  }
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], identification_of(kRxeUdSendOnly));
}

TEST(RxeCaptures, SolvingFromAnyWrongIdentificationFindsTheRightOne) {
  Random r(0x1415);
  for (const std::vector<uint8_t>* p : kCaptures) {
    for (int i = 0; i < 20; ++i) {
      const auto guess = static_cast<uint16_t>(r.upto(0xffff));
      EXPECT_EQ(solve_ipv4_identification(as_rebuilt(*p, guess)), identification_of(*p));
    }
  }
}

TEST(RxeCaptures, DamageOutsideTheIdentificationIsStillCaughtBarOneIn65536) {
  // Random damage to 1-4 bytes after the IPv4 header (UDP checksum and BTH Resv8a are masked, so
  // they are left alone) of the rebuilt packets: the full ICRC rejects every one; the rule for an
  // unseen identification lets one through for every 2^16 on average. 40,000 tries: 0.6 expected;
  // more than 6 would have odds below 1e-5 for a correct rule.
  Random r(0xd20a);
  constexpr int kTries = 40000;
  int accepted_unseen = 0;
  int accepted_covered = 0;
  for (int i = 0; i < kTries; ++i) {
    std::vector<uint8_t> p = as_rebuilt(*kCaptures[i % kCaptures.size()]);
    const int bytes = 1 + static_cast<int>(r.upto(3));
    for (int b = 0; b < bytes; ++b) {
      size_t off = 0;
      do {
        off = kIpv4HeaderBytes + r.upto(p.size() - kIpv4HeaderBytes - 1);
      } while (off == 26 || off == 27 || off == 32);  // UDP checksum, BTH Resv8a: masked
      p[off] ^= static_cast<uint8_t>(1 + r.upto(254));
    }
    // A damaged length field fails before the ICRC: count only what reaches it.
    accepted_unseen += parse_with(p, Ipv4IdRule::kUnseen) == ParseStatus::kOk;
    accepted_covered += parse_with(p, Ipv4IdRule::kCovered) == ParseStatus::kOk;
  }
  EXPECT_EQ(accepted_covered, 0);
  EXPECT_LE(accepted_unseen, 6);
}

TEST(RoceIdentification, OurOwnPacketsWithAnyIdentificationAreSolved) {
  Random r(7);
  for (int i = 0; i < 200; ++i) {
    PacketFields f = testing::random_fields(BthOpcode::kRcRdmaWriteOnly, true, r);
    f.has_lrh = false;
    f.grh->flow_label = 0;
    f.grh->sgid = ipv4_mapped_gid(r.u32());
    f.grh->dgid = ipv4_mapped_gid(r.u32());
    const std::vector<uint8_t> payload = r.bytes(r.upto(kMaxPayloadBytes));
    if (f.reth) f.reth->dma_len = static_cast<uint32_t>(payload.size());
    std::vector<uint8_t> p(kMaxRocePacketBytes);
    p.resize(serialize_roce(f, payload, UdpPorts{roce_entropy_port(r.u32()), kRoceV2UdpPort}, p));
    ASSERT_GT(p.size(), kRoceEncapBytes);
    const auto id = static_cast<uint16_t>(r.upto(0xffff));
    std::vector<uint8_t> sent = as_rebuilt(p, id);
    reseal_roce(sent);  // as a sender that numbers its datagrams would have sealed it
    const std::vector<uint8_t> received = as_rebuilt(sent);
    EXPECT_EQ(solve_ipv4_identification(received), id);
    EXPECT_EQ(parse_with(received, Ipv4IdRule::kUnseen), ParseStatus::kOk);
    EXPECT_EQ(parse_with(received, Ipv4IdRule::kCovered), id == 0 ? ParseStatus::kOk : ParseStatus::kBadIcrc);
  }
}

TEST(RoceIdentification, APacketTooShortForAnIcrcHasNoSolution) {
  const std::vector<uint8_t> p(kRoceEncapBytes + kMinRoceUdpPayloadBytes - 1, 0);
  EXPECT_EQ(solve_ipv4_identification(p), std::nullopt);
}

// ---- source ports ----

TEST(RoceEntropyPort, EveryQpnMapsIntoTheCarriersPortsAndConnectionsSpread) {
  std::array<int, kRoceEntropyPorts> seen{};
  for (uint32_t qpn = 1; qpn < 4096; ++qpn) {
    const uint16_t port = roce_entropy_port(qpn);
    ASSERT_GE(port, kRoceSrcPortMin);
    ASSERT_LT(port, kRoceSrcPortMin + kRoceEntropyPorts);
    EXPECT_EQ(roce_entropy_port(qpn), port);  // one port per connection: in order on one path
    ++seen[port - kRoceSrcPortMin];
  }
  // Expect: 4095 consecutive QPNs (as a device hands them out) use every port, none more than
  // twice its share.
  for (const int n : seen) {
    EXPECT_GT(n, 0);
    EXPECT_LT(n, 2 * 4095 / kRoceEntropyPorts);
  }
}

}  // namespace
}  // namespace softhca::fabric
