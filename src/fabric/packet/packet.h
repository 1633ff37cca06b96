// One InfiniBand packet on a native IB link: decoded fields <-> wire bytes LRH [GRH] BTH [ETHs]
// payload pad ICRC VCRC (IBA vol 1, ch. 7-9). Parse and serialise only: no transport rules (PSN
// windows, MTU, P_Key and Q_Key checks), no raw packets. RoCEv2 framing (IPv4/UDP in place of LRH and
// GRH, no VCRC) is roce.h, built on the transport part here (BTH [ETHs] payload pad). Sizes in bytes.
//
// CRC wire order and masks. Both CRCs go on the wire least significant byte first, as Ethernet's
// FCS does. Evidence: Mellanox's MPGA packet generator (OpenIB gen1, 2004) masks exactly the fields
// compute_icrc() masks, stores ICRC and VCRC with cpu_to_le32/le16, and its native test packet ends
// in 96 25 b7 5a (our ICRC 0x5ab72596); a RoCEv2 CNP captured on a ConnectX-4 Lx (scapy
// test/contrib/roce.uts) ends in 82 fd 00 2a (CRC-32 0x2a00fd82 of its masked bytes). No captured
// VCRC value was found; its algorithm and byte order agree with MPGA and Endace's DAG library.
//
// RoCEv2 (roce.h; IBA Annex A17, as rxe_icrc.c and scapy implement it): there is no LRH, so the
// ICRC starts with 8 bytes of 0xFF standing in for it, then covers the IP header (IPv4: TOS, TTL and
// header checksum replaced by 1s; IPv6: traffic class, flow label and hop limit replaced by 1s), the
// UDP header (checksum replaced by 1s), the BTH (Resv8a replaced by 1s), the ETHs and payload+pad.
// There is no VCRC; the Ethernet FCS takes its place.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "base/psn.h"
#include "base/strong_id.h"
#include "fabric/packet/headers.h"
#include "fabric/packet/opcode.h"

namespace softhca::fabric {

inline constexpr size_t kMaxPayloadBytes = 4096;  // the largest IB MTU, figures.md W4
// Worst case of the headers in front of a payload: LRH, GRH, BTH, XRCETH, RETH and ImmDt (XRC RDMA
// WRITE Only with Immediate, routed). Larger ETH sets (AtomicETH) carry no payload.
inline constexpr size_t kMaxHeaderBytes = kLrhBytes + kGrhBytes + kBthBytes + kXrcethBytes + kRethBytes + kImmDtBytes;
// Room for any packet serialize() writes or parse() accepts, rounded up to a 64-byte multiple.
inline constexpr size_t kMaxPacketBytes = 4224;
static_assert(kMaxPacketBytes >= kMaxHeaderBytes + kMaxPayloadBytes + kIcrcBytes + kVcrcBytes);
static_assert(kMaxPacketBytes % 64 == 0);

inline constexpr uint8_t kGrhIpVersion = 6;           // IBA 8.3: IPVer
inline constexpr uint8_t kGrhNextHeaderIba = 0x1b;    // IBA 8.3: NxtHdr of an IBA transport packet

// BTH PadCnt for a payload: bytes that round it up to a 4-byte multiple (W2).
constexpr uint8_t pad_count(size_t payload_bytes) {
  return static_cast<uint8_t>((kWordBytes - payload_bytes % kWordBytes) % kWordBytes);
}

using Gid = std::array<uint8_t, 16>;

// GRH fields a sender chooses. IPVer (6), NxtHdr (0x1B) and PayLen are implied.
struct GrhFields {
  uint8_t traffic_class = 0;
  uint32_t flow_label = 0;  // 20 bits
  uint8_t hop_limit = 0;
  Gid sgid{};
  Gid dgid{};
  bool operator==(const GrhFields&) const = default;
};

struct RethFields {
  uint64_t va = 0;
  RKey rkey;
  uint32_t dma_len = 0;  // [bytes]
  bool operator==(const RethFields&) const = default;
};

struct AethFields {
  uint8_t syndrome = 0;  // see opcode.h: ack_syndrome(), nak_syndrome(), ...
  uint32_t msn = 0;      // 24 bits
  bool operator==(const AethFields&) const = default;
};

struct DethFields {
  uint32_t qkey = 0;
  Qpn src_qp;  // 24 bits
  bool operator==(const DethFields&) const = default;
};

struct XrcethFields {
  uint32_t srqn = 0;  // 24 bits
  bool operator==(const XrcethFields&) const = default;
};

struct IethFields {
  RKey rkey;
  bool operator==(const IethFields&) const = default;
};

struct AtomicEthFields {
  uint64_t va = 0;
  RKey rkey;
  uint64_t swap_add = 0;
  uint64_t compare = 0;
  bool operator==(const AtomicEthFields&) const = default;
};

struct AtomicAckFields {
  uint64_t orig = 0;  // the target's value before the atomic
  bool operator==(const AtomicAckFields&) const = default;
};

// A packet's headers, decoded. LNH follows from grh; PadCnt from the payload length; LVer and TVer
// are 0; reserved bits (including BTH Resv8a, FECN/BECN) are sent as 0 and ignored on receive.
// Exactly the extension headers opcode_info(opcode) names are present: serialize() refuses others.
struct PacketFields {
  // LRH. has_lrh is false for a packet that came without one (parse_roce(): RoCEv2, where the IPv4
  // and UDP headers stand in for LRH and GRH); vl, sl, dlid and slid are then 0 and meaningless, and
  // serialize() refuses the fields (serialize_roce() ignores all five members).
  bool has_lrh = true;
  uint8_t vl = 0;  // 4 bits
  uint8_t sl = 0;  // 4 bits
  Lid dlid;
  Lid slid;
  // GRH: present for IBA global packets (LNH 3), absent for local ones (LNH 2)
  std::optional<GrhFields> grh;
  // BTH
  BthOpcode opcode = BthOpcode::kRcSendOnly;
  bool solicited = false;  // SE
  bool migreq = false;     // M
  uint16_t pkey = 0xffff;
  Qpn dest_qp;  // 24 bits
  bool ack_req = false;
  Psn psn;
  // Extension headers
  std::optional<DethFields> deth;
  std::optional<XrcethFields> xrceth;
  std::optional<RethFields> reth;
  std::optional<AtomicEthFields> atomic_eth;
  std::optional<AethFields> aeth;
  std::optional<AtomicAckFields> atomic_ack;
  // ImmDt: the four wire bytes memcpy'd into a uint32_t, i.e. the network-order (__be32) value that
  // ibv_send_wr::imm_data and ibv_wc::imm_data hold. Never byte-swapped here.
  std::optional<uint32_t> imm;
  std::optional<IethFields> ieth;

  bool operator==(const PacketFields&) const = default;
};

enum class ParseStatus : uint8_t {
  kOk,
  kTruncated,  // fewer bytes than the LRH PktLen says (or fewer than an LRH)
  kBadLrh,     // LNH not IBA local/global, LVer not 0, or more bytes than PktLen says
  kBadGrh,     // IPVer not 6, NxtHdr not 0x1B, or PayLen not matching PktLen
  kBadOpcode,  // opcode unknown to opcode_info(), or TVer not 0
  kBadLength,  // PktLen too short for the headers, payload on an opcode without one, or > 4096 B
  kBadIcrc,
  kBadVcrc,
  kBadPad,     // PadCnt larger than the payload area, or not 0 on an opcode without payload
  // RoCEv2 only (parse_roce())
  kBadIp,      // not IPv4, options present, bytes behind the Total Length, bad header checksum, a
               // fragment, or a protocol other than UDP (fewer bytes than Total Length: kTruncated)
  kBadUdp,     // no room for a UDP header, UDP Length not matching the IPv4 Total Length, or a
               // destination port other than the RoCEv2 port the receiver expects
};
std::string_view to_string(ParseStatus s);

// [bytes] on the wire, LRH through VCRC; 0 when the fields cannot be serialised (invalid opcode,
// extension headers not matching it, payload on an opcode without one, payload > kMaxPayloadBytes,
// has_lrh false).
size_t wire_bytes(const PacketFields& f, size_t payload_bytes);
// What wire_bytes() gives for a well-formed packet of this opcode with no GRH: LRH, BTH, the
// opcode's extension headers, payload_bytes (<= kMaxPayloadBytes) of payload, pad, ICRC, VCRC.
constexpr size_t local_wire_bytes(BthOpcode op, size_t payload_bytes) {
  return kLrhBytes + kBthBytes + opcode_info(op).ext_bytes() + payload_bytes + pad_count(payload_bytes) + kIcrcBytes +
         kVcrcBytes;
}

// Writes LRH [GRH] BTH [ETHs] payload pad ICRC VCRC into out and returns the bytes written: 0 when
// wire_bytes() is 0 or out is smaller. Fields wider than their wire field are cut to its width.
// payload must not overlap out. Pad bytes are 0.
size_t serialize(const PacketFields& f, std::span<const uint8_t> payload, std::span<uint8_t> out);

// Decodes one whole packet (bytes = exactly LRH through VCRC). Checks, in the order a receiving port
// does: length against LRH PktLen, VCRC, LRH, GRH, ICRC, BTH opcode, lengths, pad. On kOk, out holds
// the fields and payload the payload bytes (pad excluded, pointing into bytes); on any error both are
// reset. Reads nothing outside bytes, for any input.
ParseStatus parse(std::span<const uint8_t> bytes, PacketFields& out, std::span<const uint8_t>& payload);

// The part native IB and RoCEv2 share: BTH [ETHs] payload pad (ICRC excluded).
// [bytes] of it for f, or 0 when f cannot be serialised (the rules of wire_bytes(), headers in front aside).
size_t transport_bytes(const PacketFields& f, size_t payload_bytes);
// Writes BTH [ETHs] payload pad into out and returns the bytes written, 0 as transport_bytes() or when
// out is smaller. Only the BTH and ETH members of f are read.
size_t serialize_transport(const PacketFields& f, std::span<const uint8_t> payload, std::span<uint8_t> out);
// Decodes BTH [ETHs] payload pad (exactly, ICRC excluded) into the BTH and ETH members of f, which it
// leaves untouched on error; payload points into bytes (pad excluded). Returns kOk, kBadOpcode,
// kBadLength (fewer bytes than a BTH counts as kBadLength) or kBadPad. Reads nothing outside bytes.
ParseStatus parse_transport(std::span<const uint8_t> bth_through_pad, PacketFields& f,
                            std::span<const uint8_t>& payload);

// ICRC (IBA 7.8.1) of LRH..pad with the variant fields read as 1s: local packets (LNH != 3) mask
// LRH VL and BTH Resv8a; global packets (LNH 3) mask the whole LRH, GRH TClass, FlowLabel and HopLmt,
// and BTH Resv8a. Safe for any length (a short input is simply covered as far as it goes).
uint32_t compute_icrc(std::span<const uint8_t> lrh_through_pad);
// VCRC (IBA 7.8.2) of LRH..ICRC; nothing is masked.
uint16_t compute_vcrc(std::span<const uint8_t> lrh_through_icrc);

// What a switch does when it moves a packet to another VL: rewrite LRH VL and recompute the VCRC
// (the ICRC stays). packet is LRH through VCRC; returns false, untouched, if PktLen does not match.
bool rewrite_vl(std::span<uint8_t> packet, uint8_t vl);

}  // namespace softhca::fabric
