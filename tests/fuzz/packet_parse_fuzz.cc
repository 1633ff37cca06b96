// libFuzzer target: bytes -> the packet parsers of src/fabric/packet (native IB parse(), RoCEv2
// parse_roce(), the shared parse_transport()). Every parser must return without reading outside
// its input (ASan) or undefined behaviour (UBSan), and a packet that parses must serialise back
// to bytes that parse to the same fields and payload (the header round trip of STYLE.md 7).
//
// Input: byte 0 chooses what is done to the rest before parsing, the rest is the packet.
//   bit 0   0: native IB (LRH..VCRC), 1: RoCEv2 (IPv4 header..ICRC)
//   bit 1   set the length fields to the packet's size (LRH PktLen; IPv4 Total Length, UDP Length)
//   bit 2   recompute the CRCs (ICRC and VCRC; the IPv4 header checksum and RoCEv2 ICRC)
// Bits 1 and 2 let random mutations get past the link checks to the headers behind them.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fabric/packet/headers.h"
#include "fabric/packet/packet.h"
#include "fabric/packet/roce.h"
#include "fuzz_check.h"

namespace softhca::fuzz {
namespace {

using fabric::PacketFields;
using fabric::ParseStatus;

constexpr uint8_t kModeRoce = 1;
constexpr uint8_t kModeFixLengths = 2;
constexpr uint8_t kModeFixCrcs = 4;

// Offsets inside the headers the fixers rewrite (IBA 7.7 LRH; RFC 791 IPv4; RFC 768 UDP).
constexpr size_t kLrhPktLenOffset = 4;
constexpr size_t kIpv4TotalLengthOffset = 2;
constexpr size_t kIpv4ChecksumOffset = 10;
constexpr size_t kUdpLengthOffset = fabric::kIpv4HeaderBytes + 4;

void put_be16(std::vector<uint8_t>& p, size_t at, uint16_t v) {
  p[at] = static_cast<uint8_t>(v >> 8);
  p[at + 1] = static_cast<uint8_t>(v & 0xff);
}

void fix_native(std::vector<uint8_t>& p, uint8_t mode) {
  if (p.size() < fabric::kLrhBytes + fabric::kIcrcBytes + fabric::kVcrcBytes) return;
  if (mode & kModeFixLengths) {
    const auto words = static_cast<uint16_t>(((p.size() - fabric::kVcrcBytes) / fabric::kWordBytes) & 0x7ff);
    const uint16_t rsv5 = static_cast<uint16_t>(p[kLrhPktLenOffset] & 0xf8) << 8;
    put_be16(p, kLrhPktLenOffset, static_cast<uint16_t>(rsv5 | words));
  }
  if (mode & kModeFixCrcs) {
    const size_t icrc_at = p.size() - fabric::kIcrcBytes - fabric::kVcrcBytes;
    const uint32_t icrc = fabric::compute_icrc(std::span<const uint8_t>(p).first(icrc_at));
    for (size_t i = 0; i < 4; ++i) p[icrc_at + i] = static_cast<uint8_t>(icrc >> (8 * i));  // LSB first
    const uint16_t vcrc = fabric::compute_vcrc(std::span<const uint8_t>(p).first(icrc_at + fabric::kIcrcBytes));
    p[p.size() - 2] = static_cast<uint8_t>(vcrc & 0xff);
    p[p.size() - 1] = static_cast<uint8_t>(vcrc >> 8);
  }
}

void fix_roce(std::vector<uint8_t>& p, uint8_t mode) {
  if (p.size() < fabric::kRoceEncapBytes) return;
  if (mode & kModeFixLengths) {
    put_be16(p, kIpv4TotalLengthOffset, static_cast<uint16_t>(p.size()));
    put_be16(p, kUdpLengthOffset, static_cast<uint16_t>(p.size() - fabric::kIpv4HeaderBytes));
  }
  if (mode & kModeFixCrcs) {
    put_be16(p, kIpv4ChecksumOffset, 0);
    put_be16(p, kIpv4ChecksumOffset,
             fabric::ipv4_header_checksum(std::span<const uint8_t, fabric::kIpv4HeaderBytes>(p.data(),
                                                                                            fabric::kIpv4HeaderBytes)));
    fabric::reseal_roce(p);
  }
}

bool same_bytes(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

void native_round_trip(std::span<const uint8_t> bytes) {
  PacketFields f;
  std::span<const uint8_t> payload;
  if (fabric::parse(bytes, f, payload) != ParseStatus::kOk) return;
  check(payload.size() <= fabric::kMaxPayloadBytes, "parse: payload within the largest MTU");
  std::array<uint8_t, fabric::kMaxPacketBytes> out{};
  const size_t n = fabric::serialize(f, payload, out);
  check(n != 0, "native: a packet that parses serialises");
  check(n == fabric::wire_bytes(f, payload.size()), "native: serialize writes wire_bytes()");
  PacketFields f2;
  std::span<const uint8_t> payload2;
  check(fabric::parse(std::span<const uint8_t>(out.data(), n), f2, payload2) == ParseStatus::kOk,
        "native: the serialised packet parses");
  check(f2 == f, "native: round trip keeps every field");
  check(same_bytes(payload2, payload), "native: round trip keeps the payload");
}

void roce_round_trip(std::span<const uint8_t> bytes) {
  PacketFields f;
  std::span<const uint8_t> payload;
  fabric::UdpPorts ports;
  if (fabric::parse_roce(bytes, f, payload, ports) != ParseStatus::kOk) return;
  check(!f.has_lrh && f.grh.has_value(), "roce: fields without LRH, with a GRH from the IPv4 header");
  std::array<uint8_t, fabric::kMaxPacketBytes> out{};
  const size_t n = fabric::serialize_roce(f, payload, ports, out);
  check(n != 0, "roce: a packet that parses serialises");
  check(n == fabric::roce_wire_bytes(f, payload.size()), "roce: serialize_roce writes roce_wire_bytes()");
  PacketFields f2;
  std::span<const uint8_t> payload2;
  fabric::UdpPorts ports2;
  check(fabric::parse_roce(std::span<const uint8_t>(out.data(), n), f2, payload2, ports2) == ParseStatus::kOk,
        "roce: the serialised packet parses");
  // serialize_roce() sends hop limit 0 as the default TTL (roce.h): the one field that changes.
  PacketFields expected = f;
  if (expected.grh->hop_limit == 0) expected.grh->hop_limit = fabric::kRoceDefaultTtl;
  check(f2 == expected, "roce: round trip keeps every field");
  check(ports2 == ports, "roce: round trip keeps the UDP ports");
  check(same_bytes(payload2, payload), "roce: round trip keeps the payload");
}

void transport_round_trip(std::span<const uint8_t> bytes) {
  PacketFields f;
  std::span<const uint8_t> payload;
  if (fabric::parse_transport(bytes, f, payload) != ParseStatus::kOk) return;
  std::array<uint8_t, fabric::kMaxPacketBytes> out{};
  const size_t n = fabric::serialize_transport(f, payload, out);
  check(n != 0, "transport: BTH..pad that parses serialises");
  PacketFields f2;
  std::span<const uint8_t> payload2;
  check(fabric::parse_transport(std::span<const uint8_t>(out.data(), n), f2, payload2) == ParseStatus::kOk,
        "transport: the serialised headers parse");
  check(f2 == f, "transport: round trip keeps every BTH and ETH field");
  check(same_bytes(payload2, payload), "transport: round trip keeps the payload");
}

}  // namespace
}  // namespace softhca::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace softhca::fuzz;
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  // A copy the size of the packet alone, so ASan sees a read one byte past its end.
  std::vector<uint8_t> packet(data + 1, data + size);
  if (mode & kModeRoce) {
    fix_roce(packet, mode);
    roce_round_trip(packet);
  } else {
    fix_native(packet, mode);
    native_round_trip(packet);
  }
  transport_round_trip(packet);
  return 0;
}
