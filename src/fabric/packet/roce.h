// RoCEv2 framing (IBA vol 1, Annex A17): the InfiniBand transport (BTH onward, ICRC included) as the
// payload of UDP to port 4791 over IPv4, with no LRH, no GRH (the IPv4 header plays its role) and no
// VCRC (the Ethernet FCS plays its role). Parse and serialise only. Left out: RoCEv2 over IPv6, RoCE
// v1, IP options and fragments, CNP (opcode 0x81). Sizes in bytes; IPv4 addresses are host-order
// integers (a.b.c.d = a << 24 | b << 16 | c << 8 | d), ports host-order.
//
// What a GRH carries maps to IPv4 as rxe and real RoCE NICs map it: SGID/DGID are the IPv4-mapped
// IPv6 addresses ::ffff:a.b.c.d of the IPv4 source/destination, TClass is the TOS byte (DSCP and
// ECN), HopLmt is the TTL; there is no flow label (RoCEv2 puts its entropy into the UDP source port).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "fabric/packet/packet.h"

namespace softhca::fabric {

inline constexpr uint16_t kRoceV2UdpPort = 4791;      // IANA "roce", IBA Annex A17
inline constexpr size_t kIpv4HeaderBytes = 20;        // RFC 791, IHL 5 (no options)
inline constexpr size_t kUdpHeaderBytes = 8;          // RFC 768
inline constexpr size_t kRoceEncapBytes = kIpv4HeaderBytes + kUdpHeaderBytes;
inline constexpr uint8_t kIpProtocolUdp = 17;         // IANA protocol numbers
inline constexpr uint8_t kRoceDefaultTtl = 64;        // Linux net.ipv4.ip_default_ttl, used for HopLmt 0
// Lowest UDP source port of the RoCEv2 entropy range (Linux IB_ROCE_UDP_ENCAP_VALID_PORT_MIN).
inline constexpr uint16_t kRoceSrcPortMin = 0xc000;
// The source ports a softhca host sends its flows from: kRoceSrcPortMin and the next ones, one
// socket each (fabric/udp_carrier.h). Linux (rxe) spreads over the whole range; 16 flows are enough
// for a switch's ECMP hash and cost a process 16 descriptors.
inline constexpr uint16_t kRoceEntropyPorts = 16;

// The UDP payload, BTH through ICRC, at its largest: BTH, XRCETH, RETH, ImmDt, a 4096-byte payload, ICRC.
inline constexpr size_t kMaxRoceUdpPayloadBytes =
    kMaxHeaderBytes - kLrhBytes - kGrhBytes + kMaxPayloadBytes + kIcrcBytes;
inline constexpr size_t kMaxRocePacketBytes = kRoceEncapBytes + kMaxRoceUdpPayloadBytes;  // IPv4 through ICRC
// The UDP payload at its smallest: a BTH-only packet (a zero-byte SEND Only) and its ICRC.
inline constexpr size_t kMinRoceUdpPayloadBytes = kBthBytes + kIcrcBytes;
static_assert(kMaxRoceUdpPayloadBytes == 4136);

struct UdpPorts {
  uint16_t src = kRoceSrcPortMin;  // the sender's choice (flow entropy), see roce_src_port()
  uint16_t dst = kRoceV2UdpPort;
  bool operator==(const UdpPorts&) const = default;
};

// ::ffff:a.b.c.d, the GID a RoCEv2 port has for an IPv4 address (RFC 4291 2.5.5.2).
Gid ipv4_mapped_gid(uint32_t ipv4);
// The IPv4 address of an IPv4-mapped GID; nullopt for any other GID.
std::optional<uint32_t> ipv4_of_gid(const Gid& gid);

// The UDP source port Linux derives from a GRH flow label (rdma_flow_label_to_udp_sport in
// include/rdma/ib_verbs.h): the low 14 bits XOR the high 6, in the range 0xC000-0xFFFF.
uint16_t roce_src_port(uint32_t flow_label);
// The source port of a flow without a flow label, one of the kRoceEntropyPorts: a mix of the 24-bit
// QPN it goes to, so a connection keeps one port (in order on an ECMP path) and connections spread.
uint16_t roce_entropy_port(uint32_t qpn);

// [bytes] of the IPv4 packet serialize_roce() writes (IPv4 header through ICRC); 0 when the fields
// cannot be serialised: the rules of wire_bytes(), and f.grh must be present with IPv4-mapped GIDs.
size_t roce_wire_bytes(const PacketFields& f, size_t payload_bytes);

// Writes IPv4 + UDP + BTH [ETHs] payload pad + ICRC into out and returns the bytes written (0 as
// roce_wire_bytes(), or when out is smaller). IPv4: IHL 5, TOS = grh.traffic_class, Total Length,
// Identification 0, DF, TTL = grh.hop_limit (kRoceDefaultTtl when 0), protocol UDP, checksum computed,
// source/destination from grh.sgid/dgid. UDP: ports as given, checksum 0 (IBA Annex A17 allows it for
// IPv4). The LRH members of f (has_lrh, vl, sl, dlid, slid) and grh.flow_label are ignored.
size_t serialize_roce(const PacketFields& f, std::span<const uint8_t> payload, UdpPorts ports,
                      std::span<uint8_t> out);

// What the IPv4 Identification of a packet to parse_roce() is worth.
enum class Ipv4IdRule : uint8_t {
  // As given: the ICRC must hold over the header as it is (a capture, a simulated wire).
  kCovered,
  // Unseen: a receiver that got the datagram from a UDP socket rebuilt the header without it
  // (fabric/udp_carrier.h), yet the ICRC covers it and Linux puts a changing one in every packet.
  // The ICRC must hold for the one Identification that makes it hold (solve_ipv4_identification()):
  // a damaged packet still fails with odds 1 - 2^-16 (docs/decisions.md D22).
  kUnseen,
};

// Decodes one IPv4 packet (bytes = exactly IPv4 header through ICRC). Checks IPv4 (version 4, IHL 5,
// Total Length equal to the bytes given, header checksum, not a fragment, protocol UDP), UDP (Length,
// destination port roce_port; any source port; the UDP checksum is not checked: 0 is "none" for IPv4
// (RFC 768), as rxe sends it, and a receiving kernel has checked any other), the ICRC under id_rule,
// then the transport headers as parse() does. On kOk, out has has_lrh false, LRH members 0 and grh
// filled from the IPv4 header (flow_label 0), payload points into bytes, ports holds the UDP ports;
// on any error all three are reset. Reads nothing outside bytes, for any input.
ParseStatus parse_roce(std::span<const uint8_t> ipv4_packet, PacketFields& out, std::span<const uint8_t>& payload,
                       UdpPorts& ports, uint16_t roce_port = kRoceV2UdpPort,
                       Ipv4IdRule id_rule = Ipv4IdRule::kCovered);
ParseStatus parse_roce(std::span<const uint8_t> ipv4_packet, PacketFields& out, std::span<const uint8_t>& payload);

// The RoCEv2 ICRC of IPv4 header..pad: CRC-32 over 8 bytes of 1s (the absent LRH), then the bytes with
// IPv4 TOS, TTL and header checksum, UDP checksum and BTH Resv8a read as 1s. Goes on the wire least
// significant byte first, as the native ICRC does. Safe for any length (covers what it is given).
uint32_t compute_roce_icrc(std::span<const uint8_t> ipv4_through_pad);

// The IPv4 Identification for which the ICRC of this RoCEv2 IPv4 packet (IPv4 header through ICRC)
// holds, every other byte as it is; nullopt when none does, or bytes are shorter than the headers and
// an ICRC. The CRC is affine in the 16 bits, so at most one value works, found without a search:
// the ICRC's difference from the one computed over the header as given, moved back over the bytes
// after the field (crc32_x_power() with a negative exponent), must fit the field's 16 bits.
std::optional<uint16_t> solve_ipv4_identification(std::span<const uint8_t> ipv4_packet);

// The RFC 791 header checksum of a 20-byte IPv4 header whose checksum field holds 0 (or, to verify,
// the value on the wire: then the result is 0 for a correct header).
uint16_t ipv4_header_checksum(std::span<const uint8_t, kIpv4HeaderBytes> header);

// Writes the IPv4 + UDP headers serialize_roce() would write in front of udp_payload_bytes of BTH
// through ICRC (tos and ttl verbatim), into out. The ICRC is not touched: this is how a receiver that
// got only the UDP payload (fabric/udp_carrier) puts back what the sender's ICRC covered.
void write_roce_encap(uint32_t src_ip, uint32_t dst_ip, UdpPorts ports, uint8_t tos, uint8_t ttl,
                      size_t udp_payload_bytes, std::span<uint8_t, kRoceEncapBytes> out);

// Rewrites the ICRC of a whole RoCEv2 IPv4 packet (as a sender that changed a covered header field
// would); false, untouched, if it is shorter than the headers and an ICRC.
bool reseal_roce(std::span<uint8_t> ipv4_packet);

// ---- Ethernet II, for captures (pcap link type 1) ----

inline constexpr size_t kEthernetHeaderBytes = 14;  // destination MAC, source MAC, EtherType
inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;  // IEEE registry
using MacAddress = std::array<uint8_t, 6>;

// Our convention for a host's MAC on a RoCE link: 02:00:a:b:c:d, locally administered unicast
// (IEEE 802 U/L bit set, I/G bit clear), unique per IPv4 address.
MacAddress mac_for_ipv4(uint32_t ipv4);

// Writes an Ethernet II header (EtherType IPv4) and the packet into out; returns the frame's bytes
// (no FCS, as captures store it; no padding to 60 bytes), 0 when out is too small.
size_t wrap_ethernet(const MacAddress& dst, const MacAddress& src, std::span<const uint8_t> ipv4_packet,
                     std::span<uint8_t> out);
// The IPv4 packet inside an Ethernet II frame (no FCS), cut to its Total Length so padding of a short
// frame is dropped; empty when the frame is not IPv4 or too short for its own Total Length.
std::span<const uint8_t> ipv4_of_ethernet(std::span<const uint8_t> frame);

}  // namespace softhca::fabric
