// Known answers for the packet CRCs. Every expected value here comes from outside this project:
// the CRC-32 catalogue check value, a constant in Linux rxe, and two RoCEv2 packets from scapy's test
// suite, one of them captured from ConnectX-4 Lx hardware. RoCEv2 reuses the IBA ICRC with the LRH
// replaced by 8 bytes of 1s, so these vectors pin down the CRC engine, the masking convention (ones)
// and the wire byte order of the ICRC. No independent vector was found for the VCRC: it is checked
// against a second, bit-serial formulation and by its residue.
#include "fabric/packet/crc.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

namespace softhca::fabric {
namespace {

std::span<const uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

template <class T>
T reflect(T v, int bits) {
  T r = 0;
  for (int i = 0; i < bits; ++i) r = static_cast<T>(r | (((v >> i) & 1) << (bits - 1 - i)));
  return r;
}

// A second formulation of the same CRCs: the textbook MSB-first shift register with the polynomial
// as written in the spec (not reflected), fed with each byte bit-reversed and read out reversed.
uint32_t crc32_msb_first(std::span<const uint8_t> bytes) {
  uint32_t reg = 0xffffffff;
  for (uint8_t b : bytes) {
    reg ^= static_cast<uint32_t>(reflect<uint8_t>(b, 8)) << 24;
    for (int k = 0; k < 8; ++k) reg = (reg & 0x80000000u) ? (reg << 1) ^ 0x04c11db7u : (reg << 1);
  }
  return ~reflect<uint32_t>(reg, 32);
}
uint16_t crc16_msb_first(std::span<const uint8_t> bytes) {
  uint16_t reg = 0xffff;
  for (uint8_t b : bytes) {
    reg = static_cast<uint16_t>(reg ^ (reflect<uint8_t>(b, 8) << 8));
    for (int k = 0; k < 8; ++k) reg = static_cast<uint16_t>((reg & 0x8000) ? (reg << 1) ^ 0x100b : (reg << 1));
  }
  return static_cast<uint16_t>(~reflect<uint16_t>(reg, 16));
}

// The CRC value as the four bytes that follow the covered data on the wire (low byte first).
std::array<uint8_t, 4> wire_order(uint32_t crc) {
  return {static_cast<uint8_t>(crc), static_cast<uint8_t>(crc >> 8), static_cast<uint8_t>(crc >> 16),
          static_cast<uint8_t>(crc >> 24)};
}

TEST(Crc32, MatchesTheCatalogueCheckValue) {
  // CRC-32 (ISO-HDLC / Ethernet) of the ASCII digits 1-9 is 0xCBF43926 in every CRC catalogue.
  EXPECT_EQ(crc32(as_bytes("123456789")), 0xcbf43926u);
}

TEST(Crc32, AfterEightBytesOfOnesHoldsTheSeedRxeUsesForTheMaskedLrh) {
  // drivers/infiniband/sw/rxe/rxe_icrc.c seeds its RoCE ICRC with 0xdebb20e3, "the result of
  // computing a CRC with a seed of 0xffffffff and 8 bytes of 0xff representing a masked LRH".
  const std::array<uint8_t, 8> ones = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  EXPECT_EQ(Crc32{}.update(ones).state(), 0xdebb20e3u);
}

// The IBA ICRC of a RoCEv2 packet: 8 bytes of 1s for the LRH, then IPv4 with TOS, TTL and checksum,
// UDP with checksum, BTH with Resv8a replaced by 1s, then everything up to the ICRC.
uint32_t rocev2_icrc(std::vector<uint8_t> ipv4_udp_bth_rest) {
  auto& p = ipv4_udp_bth_rest;
  p[1] = 0xff;                    // IPv4 TOS
  p[8] = 0xff;                    // IPv4 TTL
  p[10] = p[11] = 0xff;           // IPv4 header checksum
  p[20 + 6] = p[20 + 7] = 0xff;   // UDP checksum
  p[28 + 4] = 0xff;               // BTH Resv8a
  const std::array<uint8_t, 8> masked_lrh = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  return Crc32{}.update(masked_lrh).update(p).value();
}

TEST(Crc32, ReproducesTheIcrcOfACnpCapturedOnAConnectX4Lx) {
  // scapy test/contrib/roce.uts, "RoCE CNP captured on ConnectX-4 Lx": the frame after its
  // Ethernet header. The hardware put 82 fd 00 2a on the wire as the ICRC.
  const std::vector<uint8_t> frame = {
      0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11, 0x01,  // IPv4
      0x0a, 0x00, 0x12, 0x01,                                                                          //
      0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00,                                                  // UDP
      0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00,                          // BTH
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // CNP
  };
  EXPECT_EQ(wire_order(rocev2_icrc(frame)), (std::array<uint8_t, 4>{0x82, 0xfd, 0x00, 0x2a}));
}

TEST(Crc32, ReproducesTheIcrcScapyComputesForAUcSendOnly) {
  // scapy test/contrib/roce.uts, "RoCE layer": UC SEND Only, M=1, PadCnt 2, P_Key ffff, DestQP 211,
  // PSN 13571856, 18 payload bytes + 2 pad; scapy expects ICRC 0x78f353f3 (as read from the wire).
  const std::vector<uint8_t> frame = {
      0x45, 0x01, 0x00, 0x40, 0x04, 0x78, 0x40, 0x00, 0x40, 0x11, 0xb4, 0xd5, 0xc0, 0xa8, 0x00, 0x07,  // IPv4
      0xc0, 0xa8, 0x00, 0x07,                                                                          //
      0xc0, 0x00, 0x12, 0xb7, 0x00, 0x2c, 0xac, 0xa2,                                                  // UDP
      0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00, 0xd3, 0x00, 0xcf, 0x17, 0x10,                          // BTH
      'F',  '0',  0x81, 0x8b, 0xe2, 0x89, '5',  0xd9, 0x0e, 0x9a, 0x95, 'P',  'T',  0x01, 0xbe, 0x88,  // data
      '^',  'P',  0x00, 0x00,                                                                          // + pad
  };
  EXPECT_EQ(wire_order(rocev2_icrc(frame)), (std::array<uint8_t, 4>{0x78, 0xf3, 0x53, 0xf3}));
}

TEST(Crc32, TableDrivenAndBitSerialFormulationsAgree) {
  std::mt19937 rng(1);
  for (size_t len = 0; len < 300; ++len) {
    std::vector<uint8_t> data(len);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    ASSERT_EQ(crc32(data), crc32_msb_first(data)) << "length " << len;
  }
}

TEST(Crc32, CanBeFedInPieces) {
  const std::string_view text = "the quick brown fox jumps over the lazy dog";
  Crc32 c;
  c.update(as_bytes(text.substr(0, 10))).update(as_bytes(text.substr(10)));
  EXPECT_EQ(c.value(), crc32(as_bytes(text)));
}

TEST(Vcrc, TableDrivenAndBitSerialFormulationsAgree) {
  // x^16 + x^12 + x^3 + x + 1 (0x100B), IBA 7.8.2.
  std::mt19937 rng(2);
  for (size_t len = 0; len < 300; ++len) {
    std::vector<uint8_t> data(len);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    ASSERT_EQ(crc16_vcrc(data), crc16_msb_first(data)) << "length " << len;
  }
}

TEST(Vcrc, AppendedLowByteFirstLeavesAConstantResidue) {
  // A reflected CRC appended in the order its register shifts out gives the same CRC over data+CRC
  // for every message: the property a link-layer checker relies on. For this CRC it is 0xAA90.
  std::mt19937 rng(3);
  for (size_t len = 1; len < 100; ++len) {
    std::vector<uint8_t> data(len);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    const uint16_t v = crc16_vcrc(data);
    data.push_back(static_cast<uint8_t>(v & 0xff));
    data.push_back(static_cast<uint8_t>(v >> 8));
    ASSERT_EQ(crc16_vcrc(data), 0xaa90) << "length " << len;
  }
}

}  // namespace
}  // namespace softhca::fabric
