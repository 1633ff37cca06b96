#include "fabric/packet/roce.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <array>
#include <vector>

#include "packet_test_util.h"

namespace softhca::fabric {
namespace {

using testing::Random;
using testing::random_fields;

constexpr uint32_t kIpA = 0x0a000001;  // 10.0.0.1
constexpr uint32_t kIpB = 0x0a000002;  // 10.0.0.2

// scapy test/contrib/roce.uts, "RoCE CNP captured on ConnectX-4 Lx": the frame after its Ethernet
// header, ICRC 82 fd 00 2a as the hardware put it on the wire. 10.0.17.1 -> 10.0.18.1, UDP source
// port 0, identification 0x718c, TOS 0xc2 (DSCP 48, ECN 2).
const std::vector<uint8_t> kConnectX4Cnp = {
    0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11, 0x01,  // IPv4
    0x0a, 0x00, 0x12, 0x01,                                                                          //
    0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00,                                                  // UDP
    0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00,                          // BTH
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // CNP
    0x82, 0xfd, 0x00, 0x2a,                                                                          // ICRC
};

// scapy test/contrib/roce.uts, "RoCE layer": UC SEND Only from 192.168.0.7 to itself, UDP 49152 ->
// 4791, M=1, PadCnt 2, DestQP 211, PSN 13571856, 18 payload bytes; scapy's ICRC 78 f3 53 f3.
const std::vector<uint8_t> kScapyUcSend = {
    0x45, 0x01, 0x00, 0x40, 0x04, 0x78, 0x40, 0x00, 0x40, 0x11, 0xb4, 0xd5, 0xc0, 0xa8, 0x00, 0x07,  // IPv4
    0xc0, 0xa8, 0x00, 0x07,                                                                          //
    0xc0, 0x00, 0x12, 0xb7, 0x00, 0x2c, 0xac, 0xa2,                                                  // UDP
    0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00, 0xd3, 0x00, 0xcf, 0x17, 0x10,                          // BTH
    'F',  '0',  0x81, 0x8b, 0xe2, 0x89, '5',  0xd9, 0x0e, 0x9a, 0x95, 'P',  'T',  0x01, 0xbe, 0x88,  // data
    '^',  'P',  0x00, 0x00,                                                                          // + pad
    0x78, 0xf3, 0x53, 0xf3,                                                                          // ICRC
};

std::span<const uint8_t> without_icrc(const std::vector<uint8_t>& p) {
  return std::span<const uint8_t>(p).first(p.size() - kIcrcBytes);
}

// Fields as parse_roce() returns them: no LRH, a GRH with IPv4-mapped GIDs and no flow label.
PacketFields roce_fields(BthOpcode op, Random& r) {
  PacketFields f = random_fields(op, true, r);
  f.has_lrh = false;
  f.vl = 0;
  f.sl = 0;
  f.dlid = Lid();
  f.slid = Lid();
  f.grh->flow_label = 0;
  f.grh->hop_limit = static_cast<uint8_t>(1 + r.upto(254));
  f.grh->sgid = ipv4_mapped_gid(r.u32());
  f.grh->dgid = ipv4_mapped_gid(r.u32());
  return f;
}

PacketFields simple_write(uint32_t src_ip, uint32_t dst_ip) {
  PacketFields f;
  f.opcode = BthOpcode::kRcRdmaWriteOnly;
  f.dest_qp = Qpn(0x000011);
  f.psn = Psn(0x000100);
  f.reth = RethFields{0x00007f0000001000, RKey(0x1234), 8};
  f.grh = GrhFields{};
  f.grh->hop_limit = 64;
  f.grh->sgid = ipv4_mapped_gid(src_ip);
  f.grh->dgid = ipv4_mapped_gid(dst_ip);
  return f;
}

std::vector<uint8_t> build_roce(const PacketFields& f, std::span<const uint8_t> payload, UdpPorts ports = {}) {
  std::vector<uint8_t> out(kMaxRocePacketBytes);
  out.resize(serialize_roce(f, payload, ports, out));
  return out;
}

ParseStatus status_of(std::span<const uint8_t> bytes) {
  PacketFields f;
  std::span<const uint8_t> payload;
  return parse_roce(bytes, f, payload);
}

void set_ip_checksum(std::vector<uint8_t>& p) {
  p[10] = p[11] = 0;
  const uint16_t c = ipv4_header_checksum(std::span<const uint8_t>(p).first<kIpv4HeaderBytes>());
  p[10] = static_cast<uint8_t>(c >> 8);
  p[11] = static_cast<uint8_t>(c & 0xff);
}

const std::array<uint8_t, 8> kEightBytes = {1, 2, 3, 4, 5, 6, 7, 8};

// ---- known answers ----

TEST(RoceIcrc, ReproducesTheIcrcOfACnpCapturedOnAConnectX4Lx) {
  EXPECT_EQ(compute_roce_icrc(without_icrc(kConnectX4Cnp)), 0x2a00fd82u);
}

TEST(RoceIcrc, ReproducesTheIcrcScapyComputesForAUcSendOnly) {
  EXPECT_EQ(compute_roce_icrc(without_icrc(kScapyUcSend)), 0xf353f378u);
}

TEST(RoceParse, TheCapturedCnpPassesIpUdpAndIcrcChecksAndStopsAtItsUnmodelledOpcode) {
  // Expect: IPv4 checksum 0x9161 holds, ICRC holds, then opcode 0x81 (CNP) is not in the table.
  EXPECT_EQ(ipv4_header_checksum(std::span<const uint8_t>(kConnectX4Cnp).first<kIpv4HeaderBytes>()), 0);
  EXPECT_EQ(status_of(kConnectX4Cnp), ParseStatus::kBadOpcode);
  std::vector<uint8_t> p = kConnectX4Cnp;
  p[44] ^= 0x01;  // one bit of the CNP's reserved payload
  EXPECT_EQ(status_of(p), ParseStatus::kBadIcrc);
}

TEST(RoceParse, DecodesScapysUcSendOnlyWithTheGrhFromTheIpv4Header) {
  PacketFields f;
  std::span<const uint8_t> payload;
  UdpPorts ports;
  ASSERT_EQ(parse_roce(kScapyUcSend, f, payload, ports), ParseStatus::kOk);
  EXPECT_FALSE(f.has_lrh);
  EXPECT_EQ(f.dlid, Lid());
  EXPECT_EQ(f.opcode, BthOpcode::kUcSendOnly);
  EXPECT_TRUE(f.migreq);
  EXPECT_FALSE(f.solicited);
  EXPECT_EQ(f.pkey, 0xffff);
  EXPECT_EQ(f.dest_qp, Qpn(211));
  EXPECT_EQ(f.psn, Psn(13571856));
  ASSERT_TRUE(f.grh.has_value());
  EXPECT_EQ(f.grh->sgid, ipv4_mapped_gid(0xc0a80007));
  EXPECT_EQ(f.grh->dgid, ipv4_mapped_gid(0xc0a80007));
  EXPECT_EQ(f.grh->traffic_class, 0x01);
  EXPECT_EQ(f.grh->hop_limit, 64);
  EXPECT_EQ(f.grh->flow_label, 0u);
  EXPECT_EQ(ports, (UdpPorts{0xc000, 4791}));
  ASSERT_EQ(payload.size(), 18u);
  EXPECT_EQ(payload[0], 'F');
  EXPECT_EQ(payload[17], 'P');
}

TEST(RoceSerialize, RebuildsScapysUcSendOnlyButForTheIdentificationAndItsCrcs) {
  PacketFields f;
  std::span<const uint8_t> payload;
  UdpPorts ports;
  ASSERT_EQ(parse_roce(kScapyUcSend, f, payload, ports), ParseStatus::kOk);
  const std::vector<uint8_t> p = build_roce(f, payload, ports);
  ASSERT_EQ(p.size(), kScapyUcSend.size());
  // Expect: identification 0 (scapy's was 0x0478), so the IPv4 checksum and the ICRC differ; every
  // other byte, the UDP checksum included (scapy computed one, we send 0), as follows.
  for (size_t i = 0; i < p.size(); ++i) {
    if (i == 4 || i == 5) {
      EXPECT_EQ(p[i], 0) << i;
    } else if (i == 10 || i == 11 || i == 26 || i == 27 || i >= p.size() - kIcrcBytes) {
      continue;
    } else {
      EXPECT_EQ(p[i], kScapyUcSend[i]) << i;
    }
  }
  EXPECT_EQ(p[26], 0);
  EXPECT_EQ(p[27], 0);
  EXPECT_EQ(status_of(p), ParseStatus::kOk);
}

// ---- serialise ----

TEST(RoceSerialize, WritesTheIpv4AndUdpHeadersLinuxWouldForADfDatagram) {
  PacketFields f = simple_write(kIpA, kIpB);
  f.grh->traffic_class = 0x8a;
  f.grh->hop_limit = 17;
  const std::vector<uint8_t> p = build_roce(f, kEightBytes, UdpPorts{0xc123, 4791});
  ASSERT_EQ(p.size(), 20u + 8u + 12u + 16u + 8u + 4u);
  EXPECT_EQ(p[0], 0x45);                          // version 4, IHL 5
  EXPECT_EQ(p[1], 0x8a);                          // TOS = TClass
  EXPECT_EQ((p[2] << 8) | p[3], 68);              // Total Length
  EXPECT_EQ((p[4] << 8) | p[5], 0);               // identification 0
  EXPECT_EQ((p[6] << 8) | p[7], 0x4000);          // DF, no fragment
  EXPECT_EQ(p[8], 17);                            // TTL = HopLmt
  EXPECT_EQ(p[9], 17);                            // UDP
  EXPECT_EQ(ipv4_header_checksum(std::span<const uint8_t>(p).first<kIpv4HeaderBytes>()), 0);
  EXPECT_EQ(std::vector<uint8_t>(p.begin() + 12, p.begin() + 20),
            (std::vector<uint8_t>{10, 0, 0, 1, 10, 0, 0, 2}));
  EXPECT_EQ((p[20] << 8) | p[21], 0xc123);        // UDP source port
  EXPECT_EQ((p[22] << 8) | p[23], 4791);          // RoCEv2
  EXPECT_EQ((p[24] << 8) | p[25], 48);            // UDP Length
  EXPECT_EQ((p[26] << 8) | p[27], 0);             // no UDP checksum
  EXPECT_EQ(p[28], static_cast<uint8_t>(BthOpcode::kRcRdmaWriteOnly));
  const uint32_t icrc_le = p[64] | (p[65] << 8) | (p[66] << 16) | (uint32_t{p[67]} << 24);
  EXPECT_EQ(icrc_le, compute_roce_icrc(std::span<const uint8_t>(p).first(64)));
}

TEST(RoceSerialize, AHopLimitOfZeroGoesOutAsTtl64) {
  PacketFields f = simple_write(kIpA, kIpB);
  f.grh->hop_limit = 0;
  EXPECT_EQ(build_roce(f, kEightBytes)[8], kRoceDefaultTtl);
}

TEST(RoceSerialize, RefusesFieldsWithoutAGrhOfIpv4MappedGids) {
  PacketFields f = simple_write(kIpA, kIpB);
  EXPECT_GT(roce_wire_bytes(f, 8), 0u);
  PacketFields no_grh = f;
  no_grh.grh.reset();
  EXPECT_EQ(roce_wire_bytes(no_grh, 8), 0u);
  PacketFields ib_gid = f;
  ib_gid.grh->sgid[0] = 0xfe;  // fe80::..., a native IB GID
  EXPECT_EQ(roce_wire_bytes(ib_gid, 8), 0u);
  std::array<uint8_t, 100> small{};
  EXPECT_EQ(serialize_roce(f, kEightBytes, UdpPorts{}, small), 68u);
  EXPECT_EQ(serialize_roce(f, kEightBytes, UdpPorts{}, std::span<uint8_t>(small).first(67)), 0u);
}

TEST(RoceSerialize, ThePacketsOfARoceLinkCannotBeSerialisedAsNativeIb) {
  PacketFields f = simple_write(kIpA, kIpB);
  f.has_lrh = false;
  EXPECT_EQ(wire_bytes(f, 8), 0u);
  EXPECT_GT(roce_wire_bytes(f, 8), 0u);
}

TEST(RoceRoundTrip, EveryOpcodeWithEveryPayloadLengthItAllows) {
  Random r(42);
  for (const BthOpcode op : kAllOpcodes) {
    const bool has_payload = opcode_info(op).has_payload;
    for (const size_t len : {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{257}, kMaxPayloadBytes}) {
      if (!has_payload && len != 0) continue;
      const PacketFields f = roce_fields(op, r);
      const std::vector<uint8_t> data = r.bytes(len);
      const UdpPorts ports{static_cast<uint16_t>(r.u32()), kRoceV2UdpPort};
      const std::vector<uint8_t> p = build_roce(f, data, ports);
      ASSERT_EQ(p.size(), roce_wire_bytes(f, len)) << opcode_name(op);
      ASSERT_LE(p.size(), kMaxRocePacketBytes);
      PacketFields g;
      std::span<const uint8_t> payload;
      UdpPorts got_ports;
      ASSERT_EQ(parse_roce(p, g, payload, got_ports), ParseStatus::kOk) << opcode_name(op) << " " << len;
      EXPECT_EQ(g, f) << opcode_name(op);
      EXPECT_EQ(std::vector<uint8_t>(payload.begin(), payload.end()), data) << opcode_name(op);
      EXPECT_EQ(got_ports, ports);
    }
  }
}

TEST(RoceRoundTrip, TheLargestPacketFillsTheLimitExactly) {
  Random r(7);
  const PacketFields f = roce_fields(BthOpcode::kXrcRdmaWriteOnlyImm, r);
  EXPECT_EQ(roce_wire_bytes(f, kMaxPayloadBytes), kMaxRocePacketBytes);
}

// ---- what the ICRC covers ----

TEST(RoceIcrc, VariantFieldsAreMaskedAndEverythingElseIsCovered) {
  const std::vector<uint8_t> good = build_roce(simple_write(kIpA, kIpB), kEightBytes);
  ASSERT_EQ(status_of(good), ParseStatus::kOk);
  // Expect: changing TOS, TTL (checksum refreshed), the UDP checksum or BTH Resv8a keeps the ICRC.
  for (const size_t i : {size_t{1}, size_t{8}, size_t{26}, size_t{27}, size_t{32}}) {
    std::vector<uint8_t> p = good;
    p[i] ^= 0x24;
    set_ip_checksum(p);
    EXPECT_EQ(status_of(p), ParseStatus::kOk) << "byte " << i;
  }
  // Expect: any other byte of the addresses, ports, BTH, ETHs or payload breaks it.
  for (const size_t i : {size_t{4}, size_t{12}, size_t{19}, size_t{20}, size_t{21}, size_t{28}, size_t{35},
                         size_t{39}, size_t{40}, size_t{63}}) {
    std::vector<uint8_t> p = good;
    p[i] ^= 0x01;
    set_ip_checksum(p);
    EXPECT_EQ(status_of(p), ParseStatus::kBadIcrc) << "byte " << i;
  }
}

// ---- malformed input ----

TEST(RoceMalformed, EveryTruncationIsRejectedWithoutReadingPastTheEnd) {
  const std::vector<uint8_t> good = build_roce(simple_write(kIpA, kIpB), kEightBytes);
  for (size_t n = 0; n < good.size(); ++n) {
    // A fresh allocation of exactly n bytes, so AddressSanitizer sees any read beyond it.
    const std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(status_of(cut), ParseStatus::kTruncated) << n;
  }
}

TEST(RoceMalformed, TrailingBytesBehindTheIpv4TotalLengthAreRejected) {
  std::vector<uint8_t> p = build_roce(simple_write(kIpA, kIpB), kEightBytes);
  p.push_back(0);
  EXPECT_EQ(status_of(p), ParseStatus::kBadIp);
}

TEST(RoceMalformed, BadIpv4HeadersAreRejected) {
  const std::vector<uint8_t> good = build_roce(simple_write(kIpA, kIpB), kEightBytes);
  struct Case {
    const char* what;
    size_t byte;
    uint8_t value;
  };
  for (const Case c : {Case{"IPv6 version", 0, 0x65}, Case{"IHL 6 (options)", 0, 0x46},
                       Case{"more fragments", 6, 0x60}, Case{"fragment offset", 7, 0x01},
                       Case{"protocol TCP", 9, 6}}) {
    std::vector<uint8_t> p = good;
    p[c.byte] = c.value;
    set_ip_checksum(p);
    EXPECT_EQ(status_of(p), ParseStatus::kBadIp) << c.what;
  }
  std::vector<uint8_t> p = good;
  p[11] ^= 0x01;  // header checksum
  EXPECT_EQ(status_of(p), ParseStatus::kBadIp);
}

TEST(RoceMalformed, BadUdpHeadersAreRejected) {
  const std::vector<uint8_t> good = build_roce(simple_write(kIpA, kIpB), kEightBytes);
  std::vector<uint8_t> p = good;
  p[25] = static_cast<uint8_t>(p[25] - 4);  // UDP Length 4 short of the IPv4 one
  EXPECT_EQ(status_of(p), ParseStatus::kBadUdp);
  p = good;
  p[23] ^= 0x01;  // destination port 4790
  EXPECT_EQ(status_of(p), ParseStatus::kBadUdp);
  // Expect: the same packet is fine for a receiver configured for that port (SOFTHCA_ROCE_PORT).
  const std::vector<uint8_t> other = build_roce(simple_write(kIpA, kIpB), kEightBytes, UdpPorts{1000, 5000});
  PacketFields f;
  std::span<const uint8_t> payload;
  UdpPorts ports;
  EXPECT_EQ(parse_roce(other, f, payload, ports), ParseStatus::kBadUdp);
  EXPECT_EQ(parse_roce(other, f, payload, ports, 5000), ParseStatus::kOk);
}

TEST(RoceMalformed, APacketTooShortForABthAndIcrcIsABadLength) {
  std::vector<uint8_t> p(kRoceEncapBytes + kMinRoceUdpPayloadBytes - 4, 0);
  write_roce_encap(kIpA, kIpB, UdpPorts{}, 0, 64, p.size() - kRoceEncapBytes,
                   std::span<uint8_t>(p).first<kRoceEncapBytes>());
  EXPECT_EQ(status_of(p), ParseStatus::kBadLength);
}

TEST(RoceMalformed, OnErrorTheOutputsAreReset) {
  std::vector<uint8_t> p = build_roce(simple_write(kIpA, kIpB), kEightBytes, UdpPorts{7, 4791});
  p.back() ^= 0xff;
  PacketFields f = simple_write(kIpA, kIpB);
  std::span<const uint8_t> payload(p);
  UdpPorts ports{7, 7};
  EXPECT_EQ(parse_roce(p, f, payload, ports), ParseStatus::kBadIcrc);
  EXPECT_EQ(f, PacketFields{});
  EXPECT_TRUE(payload.empty());
  EXPECT_EQ(ports, UdpPorts{});
}

// Random mutations: nothing is read outside the packet (AddressSanitizer's assertion), and none
// is taken that should not be: a shorter packet (its IPv4 and UDP lengths no longer match), or a
// changed byte that the ICRC covers unmasked (everything but IPv4 TOS, TTL and checksum, the UDP
// checksum and BTH Resv8a, IBA A17.4.2), is refused; the packet left as it was is taken.
TEST(RoceMalformed, RandomMutationsNeverReadOutOfBoundsAndNoneThatTheIcrcCoversIsTaken) {
  Random r(3);
  const std::vector<uint8_t> good = build_roce(simple_write(kIpA, kIpB), kEightBytes);
  constexpr std::array<size_t, 7> kMasked = {1, 8, 10, 11, kIpv4HeaderBytes + 6, kIpv4HeaderBytes + 7,
                                             kRoceEncapBytes + 4};  // TOS, TTL, checksum, UDP checksum, Resv8a
  int refused = 0;
  int unchanged = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> p = good;
    const size_t flips = 1 + r.upto(3);
    for (size_t k = 0; k < flips; ++k) p[r.upto(p.size() - 1)] = r.u8();
    if (r.coin()) set_ip_checksum(p);
    const bool shorter = r.coin();
    if (shorter) p.resize(r.upto(p.size() - 1));
    p.shrink_to_fit();
    bool covered_change = false;
    for (size_t at = 0; at < p.size(); ++at)
      if (p[at] != good[at] && std::find(kMasked.begin(), kMasked.end(), at) == kMasked.end()) covered_change = true;
    const ParseStatus s = status_of(p);
    if (shorter || covered_change) {
      EXPECT_NE(s, ParseStatus::kOk) << "mutation " << i;
      ++refused;
    } else if (p == good) {
      EXPECT_EQ(s, ParseStatus::kOk) << "mutation " << i;
      ++unchanged;
    }
  }
  EXPECT_GT(refused, 15000);  // most mutations touch a covered byte or shorten the packet
  EXPECT_GT(unchanged, 0);    // and some wrote back what was there
}

// ---- addressing helpers ----

TEST(RoceAddressing, Ipv4MappedGidsRoundTripAndOthersAreNotIpv4) {
  const Gid g = ipv4_mapped_gid(0xc0a80007);
  EXPECT_EQ(g, (Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 0, 7}));
  EXPECT_EQ(ipv4_of_gid(g), 0xc0a80007u);
  Gid link_local{};
  link_local[0] = 0xfe;
  link_local[1] = 0x80;
  EXPECT_FALSE(ipv4_of_gid(link_local).has_value());
  EXPECT_FALSE(ipv4_of_gid(Gid{}).has_value());  // :: is not ::ffff:0.0.0.0
}

TEST(RoceAddressing, TheSourcePortFromAFlowLabelIsInTheEntropyRange) {
  EXPECT_EQ(roce_src_port(0), 0xc000);
  EXPECT_EQ(roce_src_port(0x00001), 0xc001);
  EXPECT_EQ(roce_src_port(0x04000), 0xc001);   // bit 14 folds onto bit 0
  EXPECT_EQ(roce_src_port(0xfffff), 0xffc0);   // 0x3fff ^ 0x3f
}

// ---- Ethernet II for captures ----

TEST(RoceEthernet, WrapsAnIpv4PacketAndFindsItAgain) {
  const std::vector<uint8_t> p = build_roce(simple_write(kIpA, kIpB), kEightBytes);
  std::vector<uint8_t> frame(kEthernetHeaderBytes + p.size());
  ASSERT_EQ(wrap_ethernet(mac_for_ipv4(kIpB), mac_for_ipv4(kIpA), p, frame), frame.size());
  EXPECT_EQ(std::vector<uint8_t>(frame.begin(), frame.begin() + 14),
            (std::vector<uint8_t>{0x02, 0x00, 10, 0, 0, 2, 0x02, 0x00, 10, 0, 0, 1, 0x08, 0x00}));
  const std::span<const uint8_t> ip = ipv4_of_ethernet(frame);
  EXPECT_EQ(std::vector<uint8_t>(ip.begin(), ip.end()), p);
  EXPECT_EQ(wrap_ethernet(mac_for_ipv4(kIpB), mac_for_ipv4(kIpA), p, std::span<uint8_t>(frame).first(60)), 0u);
}

TEST(RoceEthernet, PaddingOfAShortFrameIsCutAndOtherEtherTypesAreNotIpv4) {
  PacketFields f = simple_write(kIpA, kIpB);
  f.opcode = BthOpcode::kRcSendOnly;
  f.reth.reset();
  const std::vector<uint8_t> p = build_roce(f, {});  // 44 bytes: a 58-byte frame, padded to 60
  std::vector<uint8_t> frame(kEthernetHeaderBytes + p.size());
  wrap_ethernet(MacAddress{}, MacAddress{}, p, frame);
  frame.resize(60, 0);
  const std::span<const uint8_t> ip = ipv4_of_ethernet(frame);
  EXPECT_EQ(ip.size(), p.size());
  EXPECT_EQ(status_of(ip), ParseStatus::kOk);
  frame[12] = 0x86;  // IPv6
  frame[13] = 0xdd;
  EXPECT_TRUE(ipv4_of_ethernet(frame).empty());
  EXPECT_TRUE(ipv4_of_ethernet(std::span<const uint8_t>(frame).first(20)).empty());
}

}  // namespace
}  // namespace softhca::fabric
