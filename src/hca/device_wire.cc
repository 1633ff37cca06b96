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
// The RoCEv2 UDP source port of a packet: from the GRH flow label when the sender set one, as Linux
// does (rdma_flow_label_to_udp_sport); else from the destination QPN folded to 20 bits, so every
// connection keeps one port (in-order delivery per flow) and different connections spread.
uint16_t roce_source_port(const fabric::PacketFields& f) {
  uint32_t flow = f.grh ? f.grh->flow_label : 0;
  if (flow == 0) {
    const uint32_t qpn = f.dest_qp.value();
    flow = (qpn ^ (qpn >> 20) ^ 0x5a5a5u) & 0xfffffu;  // any non-zero mix of the 24-bit QPN
  }
  return fabric::roce_src_port(flow);
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
  return fabric::serialize_roce(f, payload, ports, tx_buf_);
}

bool Device::decode(std::span<const uint8_t> packet, fabric::PacketFields& f, std::span<const uint8_t>& payload) const {
  if (!ethernet()) return fabric::parse(packet, f, payload) == fabric::ParseStatus::kOk;
  fabric::UdpPorts ports;
  if (fabric::parse_roce(packet, f, payload, ports, config_.roce_udp_port) == fabric::ParseStatus::kOk) return true;
  return decode_group_copy(packet, f, payload);
}

// A host's copy of a datagram to an IPv4 multicast group arrives as a unicast datagram (the carrier
// floods groups, fabric/udp_carrier.h send_to_member()), so the header the carrier rebuilt names
// this host where the sender's ICRC covered the group: for a datagram to the multicast QPN, each
// IPv4 group a QP of this host is attached to is tried as the destination, and the one whose ICRC
// holds is the group it was sent to. Anything else stays malformed.
bool Device::decode_group_copy(std::span<const uint8_t> packet, fabric::PacketFields& f,
                               std::span<const uint8_t>& payload) const {
  constexpr size_t kDestQpAt = fabric::kRoceEncapBytes + 5;  // BTH DestQP, 3 bytes
  constexpr size_t kIpv4DstAt = 16;
  constexpr size_t kIpv4ChecksumAt = 10;
  if (packet.size() < kDestQpAt + 3 || packet.size() > group_copy_buf_.size()) return false;
  const uint32_t dqp = uint32_t{packet[kDestQpAt]} << 16 | uint32_t{packet[kDestQpAt + 1]} << 8 | packet[kDestQpAt + 2];
  if (dqp != kMcastQpn) return false;
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
