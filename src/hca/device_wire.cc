// The port's wire format, per link layer: InfiniBand ports send and take whole native packets
// (LRH..VCRC, addressed by LID); Ethernet ports send and take RoCEv2 IPv4 packets (IPv4 header
// through ICRC, IBA Annex A17), addressed by GID: the GRH fields become the IPv4 header, and a
// packet is ours when its destination GID is one of the port's GIDs.
#include <algorithm>

#include "fabric/packet/roce.h"
#include "hca/device.h"

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
  return fabric::parse_roce(packet, f, payload, ports, config_.roce_udp_port) == fabric::ParseStatus::kOk;
}

}  // namespace softhca::hca
