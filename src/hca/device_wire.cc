// The port's wire format, per link layer: InfiniBand ports send and take whole native packets
// (LRH..VCRC, addressed by LID); Ethernet ports send and take RoCEv2 IPv4 packets (IPv4 header
// through ICRC, IBA Annex A17), addressed by GID: the GRH fields become the IPv4 header, and a
// packet is ours when its destination GID is one of the port's GIDs.
#include <algorithm>

#include "fabric/packet/roce.h"
#include "hca/device.h"
#include "hca/mcast_groups.h"

namespace softhca::hca {

namespace {
// The RoCEv2 UDP source port of a packet (IBA Annex A17: flow entropy): from the GRH flow label when
// the sender set one, as Linux does (rdma_flow_label_to_udp_sport); else one of the carrier's entropy
// ports by destination QPN, so every connection keeps one port and different connections spread.
uint16_t roce_source_port(const fabric::PacketFields& f) {
  const uint32_t flow = f.grh ? f.grh->flow_label : 0;
  return flow != 0 ? fabric::roce_src_port(flow) : fabric::roce_entropy_port(f.dest_qp.value());
}
// The BTH DestQP of a RoCEv2 IPv4 packet; 0 (not the multicast QPN) when it is too short for one.
uint32_t roce_dest_qp(std::span<const uint8_t> packet) {
  constexpr size_t kDestQpAt = fabric::kRoceEncapBytes + 5;  // BTH DestQP, 3 bytes
  if (packet.size() < kDestQpAt + 3) return 0;
  return uint32_t{packet[kDestQpAt]} << 16 | uint32_t{packet[kDestQpAt + 1]} << 8 | packet[kDestQpAt + 2];
}
}  // namespace

bool Device::has_gid(const fabric::PacketFields& f) const {
  if (!f.grh) return false;  // RoCEv2 always carries the IP addresses
  const hwif::Gid empty{};
  return std::any_of(config_.port.gids.begin(), config_.port.gids.end(),
                     [&](const hwif::Gid& g) { return !(g == empty) && g.raw == f.grh->dgid; });
}

size_t Device::wire_size(const fabric::PacketFields& f, size_t payload_bytes) const {
  return ethernet() ? fabric::roce_wire_bytes(f, payload_bytes) : fabric::wire_bytes(f, payload_bytes);
}

size_t Device::encode(const fabric::PacketFields& f, std::span<const uint8_t> payload) {
  if (!ethernet()) return fabric::serialize(f, payload, tx_buf_);
  const fabric::UdpPorts ports{roce_source_port(f), config_.roce_udp_port};
  const size_t n = fabric::serialize_roce(f, payload, ports, tx_buf_);
  // The TTL a kernel sends: Linux's RoCE stack replaces a unicast path's hop limit with the route's
  // (ib_resolve_eth_dmac), so ibv_rc_pingpong's 1 leaves as 64. TTL is masked in the ICRC: only the
  // header checksum changes. A multicast group keeps the application's hop limit.
  constexpr size_t kTtlAt = 8;
  constexpr size_t kDstAt = 16;
  constexpr size_t kChecksumAt = 10;
  if (n != 0 && (tx_buf_[kDstAt] >> 4) != 0xe && tx_buf_[kTtlAt] != fabric::kRoceDefaultTtl) {
    tx_buf_[kTtlAt] = fabric::kRoceDefaultTtl;
    tx_buf_[kChecksumAt] = tx_buf_[kChecksumAt + 1] = 0;
    const uint16_t sum = fabric::ipv4_header_checksum(std::span<const uint8_t>(tx_buf_).first<fabric::kIpv4HeaderBytes>());
    tx_buf_[kChecksumAt] = static_cast<uint8_t>(sum >> 8);
    tx_buf_[kChecksumAt + 1] = static_cast<uint8_t>(sum);
  }
  return n;
}

// A RoCEv2 packet reaches the device with a header its carrier rebuilt from a UDP socket, which
// never shows the IPv4 Identification: the ICRC is held to the one Identification that satisfies it
// (fabric::Ipv4IdRule::kUnseen; Linux sends a changing one, softhca 0). Not for a datagram to the
// multicast QPN: its copy names this host where the ICRC covered the group (decode_group_copy()).
bool Device::decode(std::span<const uint8_t> packet, fabric::PacketFields& f, std::span<const uint8_t>& payload) const {
  if (!ethernet()) return fabric::parse(packet, f, payload) == fabric::ParseStatus::kOk;
  fabric::UdpPorts ports;
  const fabric::Ipv4IdRule id_rule =
      roce_dest_qp(packet) == kMcastQpn ? fabric::Ipv4IdRule::kCovered : fabric::Ipv4IdRule::kUnseen;
  if (fabric::parse_roce(packet, f, payload, ports, config_.roce_udp_port, id_rule) == fabric::ParseStatus::kOk) {
    return true;
  }
  return decode_group_copy(packet, f, payload);
}

// A host's copy of a datagram to an IPv4 multicast group arrives as a unicast datagram (the carrier
// floods groups, fabric/udp_carrier.h send_to_member()), so the header the carrier rebuilt names
// this host where the sender's ICRC covered the group: for a datagram to the multicast QPN, each
// IPv4 group a QP of this host is attached to is tried as the destination, and the one whose ICRC
// holds is the group it was sent to. Anything else stays malformed.
bool Device::decode_group_copy(std::span<const uint8_t> packet, fabric::PacketFields& f,
                               std::span<const uint8_t>& payload) const {
  constexpr size_t kIpv4DstAt = 16;
  constexpr size_t kIpv4ChecksumAt = 10;
  if (packet.size() > group_copy_buf_.size() || roce_dest_qp(packet) != kMcastQpn) return false;
  for (const McastGroup& g : state_.mcast.groups) {
    if (g.attached == 0 || !is_multicast_gid(g.gid) || g.gid[0] == 0xff) continue;  // IPv4-mapped groups
    std::copy(packet.begin(), packet.end(), group_copy_buf_.begin());
    const std::span<uint8_t> p(group_copy_buf_.data(), packet.size());
    std::copy(g.gid.begin() + 12, g.gid.end(), p.begin() + kIpv4DstAt);
    p[kIpv4ChecksumAt] = p[kIpv4ChecksumAt + 1] = 0;
    const uint16_t sum = fabric::ipv4_header_checksum(p.first<fabric::kIpv4HeaderBytes>());
    p[kIpv4ChecksumAt] = static_cast<uint8_t>(sum >> 8);
    p[kIpv4ChecksumAt + 1] = static_cast<uint8_t>(sum);
    fabric::UdpPorts ports;
    if (fabric::parse_roce(p, f, payload, ports, config_.roce_udp_port) == fabric::ParseStatus::kOk) return true;
  }
  return false;
}

}  // namespace softhca::hca
