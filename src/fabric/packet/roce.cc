#include "fabric/packet/roce.h"

#include <algorithm>
#include <cstring>

#include "base/endian.h"
#include "fabric/packet/crc.h"

namespace softhca::fabric {
namespace {

// IPv4 header without options (RFC 791 3.1).
struct Ipv4Header {
  uint8_t version_ihl;  // Version<<4 | IHL (32-bit words)
  uint8_t tos;          // DSCP<<2 | ECN; the GRH TClass
  Be16 total_length;    // [bytes] header through the end of the UDP payload
  Be16 identification;
  Be16 flags_fragment;  // Rsv<<15 | DF<<14 | MF<<13 | Fragment Offset (13 bits)
  uint8_t ttl;          // the GRH HopLmt
  uint8_t protocol;
  Be16 checksum;
  Be32 src;
  Be32 dst;
};
static_assert(sizeof(Ipv4Header) == kIpv4HeaderBytes);
static_assert(offsetof(Ipv4Header, tos) == 1);
static_assert(offsetof(Ipv4Header, ttl) == 8);
static_assert(offsetof(Ipv4Header, checksum) == 10);
static_assert(offsetof(Ipv4Header, src) == 12);

// UDP header (RFC 768).
struct UdpHeader {
  Be16 src_port;
  Be16 dst_port;
  Be16 length;  // [bytes] UDP header + payload
  Be16 checksum;
};
static_assert(sizeof(UdpHeader) == kUdpHeaderBytes);
static_assert(offsetof(UdpHeader, checksum) == 6);

constexpr uint8_t kIpv4VersionIhl = 0x45;   // version 4, 5 words
constexpr uint16_t kIpv4Df = 0x4000;        // Don't Fragment
constexpr uint16_t kIpv4FragmentMask = 0x3fff;  // MF and Fragment Offset: non-zero in a fragment

// Where the RoCEv2 ICRC reads 1s in place of variant fields, counted from the IPv4 header (IBA Annex A17 as
// rxe_icrc.c and scapy apply it): TOS, TTL, header checksum, UDP checksum, BTH Resv8a.
constexpr size_t kUdpOff = kIpv4HeaderBytes;
constexpr size_t kBthOff = kRoceEncapBytes;
constexpr std::array<size_t, 7> kIcrcMaskedBytes = {
    offsetof(Ipv4Header, tos),          offsetof(Ipv4Header, ttl),
    offsetof(Ipv4Header, checksum),     offsetof(Ipv4Header, checksum) + 1,
    kUdpOff + offsetof(UdpHeader, checksum), kUdpOff + offsetof(UdpHeader, checksum) + 1,
    kBthOff + offsetof(Bth, resv8a_dest_qp),
};
constexpr std::array<uint8_t, kLrhBytes> kMaskedLrh = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

void put_crc32(uint8_t* p, uint32_t v) {  // least significant byte first, as packet.cc
  for (size_t i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_crc32(const uint8_t* p) {
  uint32_t v = 0;
  for (size_t i = 4; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

uint32_t be32_of(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

Gid ipv4_mapped_gid(uint32_t ipv4) {
  Gid g{};
  g[10] = 0xff;
  g[11] = 0xff;
  for (size_t i = 0; i < 4; ++i) g[12 + i] = static_cast<uint8_t>(ipv4 >> (24 - 8 * i));
  return g;
}

std::optional<uint32_t> ipv4_of_gid(const Gid& gid) {
  for (size_t i = 0; i < 10; ++i)
    if (gid[i] != 0) return std::nullopt;
  if (gid[10] != 0xff || gid[11] != 0xff) return std::nullopt;
  return be32_of(gid.data() + 12);
}

uint16_t roce_src_port(uint32_t flow_label) {
  const uint32_t low = flow_label & 0x3fff;
  const uint32_t high = (flow_label & 0xfc000) >> 14;
  return static_cast<uint16_t>((low ^ high) | kRoceSrcPortMin);
}

uint16_t roce_entropy_port(uint32_t qpn) {
  const uint32_t h = (qpn & 0xffffff) * 0x9e3779b1u;  // Fibonacci hashing: the high bits mix every QPN bit
  return static_cast<uint16_t>(kRoceSrcPortMin + ((uint64_t{h} * kRoceEntropyPorts) >> 32));
}

size_t roce_wire_bytes(const PacketFields& f, size_t payload_bytes) {
  if (!f.grh || !ipv4_of_gid(f.grh->sgid) || !ipv4_of_gid(f.grh->dgid)) return 0;
  const size_t transport = transport_bytes(f, payload_bytes);
  if (transport == 0) return 0;
  return kRoceEncapBytes + transport + kIcrcBytes;
}

uint16_t ipv4_header_checksum(std::span<const uint8_t, kIpv4HeaderBytes> h) {
  uint32_t sum = 0;
  for (size_t i = 0; i < h.size(); i += 2) sum += (uint32_t{h[i]} << 8) | h[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);  // ones' complement: fold the carries back in
  return static_cast<uint16_t>(~sum);
}

void write_roce_encap(uint32_t src_ip, uint32_t dst_ip, UdpPorts ports, uint8_t tos, uint8_t ttl,
                      size_t udp_payload_bytes, std::span<uint8_t, kRoceEncapBytes> out) {
  Ipv4Header ip{};
  ip.version_ihl = kIpv4VersionIhl;
  ip.tos = tos;
  ip.total_length = static_cast<uint16_t>(kRoceEncapBytes + udp_payload_bytes);
  ip.identification = uint16_t{0};
  ip.flags_fragment = kIpv4Df;
  ip.ttl = ttl;
  ip.protocol = kIpProtocolUdp;
  ip.src = src_ip;
  ip.dst = dst_ip;
  store_as(out.data(), ip);
  ip.checksum = ipv4_header_checksum(out.first<kIpv4HeaderBytes>());
  store_as(out.data(), ip);

  UdpHeader udp{};
  udp.src_port = ports.src;
  udp.dst_port = ports.dst;
  udp.length = static_cast<uint16_t>(kUdpHeaderBytes + udp_payload_bytes);
  store_as(out.data() + kUdpOff, udp);
}

size_t serialize_roce(const PacketFields& f, std::span<const uint8_t> payload, UdpPorts ports,
                      std::span<uint8_t> out) {
  const size_t total = roce_wire_bytes(f, payload.size());
  if (total == 0 || out.size() < total) return 0;
  const size_t icrc_off = total - kIcrcBytes;
  const uint8_t ttl = f.grh->hop_limit != 0 ? f.grh->hop_limit : kRoceDefaultTtl;
  write_roce_encap(*ipv4_of_gid(f.grh->sgid), *ipv4_of_gid(f.grh->dgid), ports, f.grh->traffic_class, ttl,
                   total - kRoceEncapBytes, out.first<kRoceEncapBytes>());
  serialize_transport(f, payload, out.subspan(kBthOff, icrc_off - kBthOff));
  put_crc32(out.data() + icrc_off, compute_roce_icrc(out.first(icrc_off)));
  return total;
}

namespace {

// The IPv4 and UDP checks of parse_roce(), in the order a receiving stack makes them.
ParseStatus check_encap(std::span<const uint8_t> bytes, uint16_t roce_port) {
  if (bytes.size() < kIpv4HeaderBytes) return ParseStatus::kTruncated;
  const Ipv4Header ip = load_as<Ipv4Header>(bytes.data());
  if (ip.version_ihl != kIpv4VersionIhl) return ParseStatus::kBadIp;
  if (ip.total_length.get() > bytes.size()) return ParseStatus::kTruncated;
  if (ip.total_length.get() < bytes.size()) return ParseStatus::kBadIp;
  if (ipv4_header_checksum(bytes.first<kIpv4HeaderBytes>()) != 0) return ParseStatus::kBadIp;
  if ((ip.flags_fragment.get() & kIpv4FragmentMask) != 0) return ParseStatus::kBadIp;
  if (ip.protocol != kIpProtocolUdp) return ParseStatus::kBadIp;

  if (bytes.size() < kRoceEncapBytes) return ParseStatus::kBadUdp;
  const UdpHeader udp = load_as<UdpHeader>(bytes.data() + kUdpOff);
  if (udp.length.get() != bytes.size() - kIpv4HeaderBytes) return ParseStatus::kBadUdp;
  if (udp.dst_port.get() != roce_port) return ParseStatus::kBadUdp;
  if (bytes.size() < kRoceEncapBytes + kMinRoceUdpPayloadBytes) return ParseStatus::kBadLength;
  return ParseStatus::kOk;
}

// The change of the Identification that turns an ICRC computed as `computed` into `wanted` over a
// packet whose ICRC sits at icrc_off; nullopt when no 16-bit change does. The ICRC reads 8 bytes of
// 1s, then the packet: the Identification's two bytes (at 4) are followed by k = icrc_off - 6 bytes.
// Two bytes d0 d1 fed to a zero register leave (d0 | d1 << 8) * x^16 there, and k bytes more
// multiply that by x^(8k); undoing both leaves the bytes' own value, which must fit 16 bits.
std::optional<uint16_t> identification_change(uint32_t computed, uint32_t wanted, size_t icrc_off) {
  constexpr size_t kIdOff = offsetof(Ipv4Header, identification);
  const uint32_t delta = computed ^ wanted;
  if (delta == 0) return uint16_t{0};
  const auto after = static_cast<int64_t>(icrc_off - kIdOff - 2);  // the 8 bytes of 1s come before it
  const uint32_t bytes = crc32_multiply(delta, crc32_x_power(-(8 * after + 16)));
  if (bytes > 0xffff) return std::nullopt;
  return static_cast<uint16_t>((bytes & 0xff) << 8 | bytes >> 8);  // d0 is the high byte on the wire
}

}  // namespace

std::optional<uint16_t> solve_ipv4_identification(std::span<const uint8_t> p) {
  if (p.size() < kRoceEncapBytes + kMinRoceUdpPayloadBytes) return std::nullopt;
  const size_t icrc_off = p.size() - kIcrcBytes;
  const std::optional<uint16_t> change =
      identification_change(compute_roce_icrc(p.first(icrc_off)), get_crc32(p.data() + icrc_off), icrc_off);
  if (!change) return std::nullopt;
  const uint16_t given = static_cast<uint16_t>(p[4] << 8 | p[5]);
  return static_cast<uint16_t>(given ^ *change);
}

ParseStatus parse_roce(std::span<const uint8_t> bytes, PacketFields& out, std::span<const uint8_t>& payload,
                       UdpPorts& ports, uint16_t roce_port, Ipv4IdRule id_rule) {
  out = PacketFields{};
  payload = {};
  ports = UdpPorts{};
  if (const ParseStatus st = check_encap(bytes, roce_port); st != ParseStatus::kOk) return st;

  const size_t icrc_off = bytes.size() - kIcrcBytes;
  const uint32_t computed = compute_roce_icrc(bytes.first(icrc_off));
  const uint32_t wanted = get_crc32(bytes.data() + icrc_off);
  if (computed != wanted &&
      (id_rule == Ipv4IdRule::kCovered || !identification_change(computed, wanted, icrc_off))) {
    return ParseStatus::kBadIcrc;
  }

  PacketFields f;
  std::span<const uint8_t> body;
  const ParseStatus st = parse_transport(bytes.subspan(kBthOff, icrc_off - kBthOff), f, body);
  if (st != ParseStatus::kOk) return st;

  const Ipv4Header ip = load_as<Ipv4Header>(bytes.data());
  const UdpHeader udp = load_as<UdpHeader>(bytes.data() + kUdpOff);
  f.has_lrh = false;
  GrhFields g;
  g.traffic_class = ip.tos;
  g.hop_limit = ip.ttl;
  g.sgid = ipv4_mapped_gid(ip.src.get());
  g.dgid = ipv4_mapped_gid(ip.dst.get());
  f.grh = g;
  out = f;
  payload = body;
  ports = UdpPorts{udp.src_port.get(), udp.dst_port.get()};
  return ParseStatus::kOk;
}

ParseStatus parse_roce(std::span<const uint8_t> ipv4_packet, PacketFields& out, std::span<const uint8_t>& payload) {
  UdpPorts ports;
  return parse_roce(ipv4_packet, out, payload, ports);
}

uint32_t compute_roce_icrc(std::span<const uint8_t> p) {
  std::array<uint8_t, kRoceEncapBytes + kBthBytes> head{};
  const size_t n = std::min(head.size(), p.size());
  std::copy_n(p.data(), n, head.data());
  for (const size_t i : kIcrcMaskedBytes)
    if (i < n) head[i] = 0xff;
  Crc32 crc;
  crc.update(kMaskedLrh);
  crc.update(std::span<const uint8_t>(head.data(), n));
  crc.update(p.subspan(n));
  return crc.value();
}

bool reseal_roce(std::span<uint8_t> p) {
  if (p.size() < kRoceEncapBytes + kMinRoceUdpPayloadBytes) return false;
  const size_t icrc_off = p.size() - kIcrcBytes;
  put_crc32(p.data() + icrc_off, compute_roce_icrc(p.first(icrc_off)));
  return true;
}

MacAddress mac_for_ipv4(uint32_t ipv4) {
  return MacAddress{0x02, 0x00, static_cast<uint8_t>(ipv4 >> 24), static_cast<uint8_t>(ipv4 >> 16),
                    static_cast<uint8_t>(ipv4 >> 8), static_cast<uint8_t>(ipv4)};
}

size_t wrap_ethernet(const MacAddress& dst, const MacAddress& src, std::span<const uint8_t> ipv4_packet,
                     std::span<uint8_t> out) {
  const size_t total = kEthernetHeaderBytes + ipv4_packet.size();
  if (out.size() < total) return 0;
  std::copy(dst.begin(), dst.end(), out.data());
  std::copy(src.begin(), src.end(), out.data() + dst.size());
  out[12] = static_cast<uint8_t>(kEtherTypeIpv4 >> 8);
  out[13] = static_cast<uint8_t>(kEtherTypeIpv4 & 0xff);
  if (!ipv4_packet.empty()) std::memcpy(out.data() + kEthernetHeaderBytes, ipv4_packet.data(), ipv4_packet.size());
  return total;
}

std::span<const uint8_t> ipv4_of_ethernet(std::span<const uint8_t> frame) {
  if (frame.size() < kEthernetHeaderBytes + kIpv4HeaderBytes) return {};
  if (frame[12] != (kEtherTypeIpv4 >> 8) || frame[13] != (kEtherTypeIpv4 & 0xff)) return {};
  const std::span<const uint8_t> ip = frame.subspan(kEthernetHeaderBytes);
  const size_t total_length = (size_t{ip[2]} << 8) | ip[3];
  if (total_length < kIpv4HeaderBytes || total_length > ip.size()) return {};
  return ip.first(total_length);
}

}  // namespace softhca::fabric
