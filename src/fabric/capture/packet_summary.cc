#include "fabric/capture/packet_summary.h"

#include <cstdio>

#include "base/endian.h"
#include "fabric/packet/headers.h"
#include "fabric/packet/opcode.h"
#include "fabric/packet/roce.h"

namespace softhca::fabric {

namespace {
// An IPv4 header without options starts 0x45 (version 4, IHL 5; RFC 791); an LRH never does, its
// LVer nibble being 0 (IBA 7.7.2). So a RoCEv2 packet (roce.h) is told from a native one by its first
// byte. Returns the offset of the BTH, or 0 when the packet is not IPv4/UDP.
size_t roce_bth_offset(std::span<const uint8_t> packet) {
  constexpr uint8_t kIpv4NoOptions = 0x45;
  constexpr size_t kProtocolAt = 9;
  if (packet.size() < kRoceEncapBytes || packet[0] != kIpv4NoOptions || packet[kProtocolAt] != kIpProtocolUdp) return 0;
  return kRoceEncapBytes;
}
}  // namespace

PacketSummary summarize(std::span<const uint8_t> packet) {
  PacketSummary s;
  s.wire_bytes = static_cast<uint32_t>(packet.size());
  if (packet.size() < kLrhBytes) return s;
  size_t at = roce_bth_offset(packet);
  if (at == 0) {
    const auto lrh = load_as<Lrh>(packet.data());
    s.slid = lrh.slid.get();
    s.dlid = lrh.dlid.get();
    at = kLrhBytes;
    if (lrh.lnh() == Lnh::kIbaGlobal) {
      at += kGrhBytes;
    } else if (lrh.lnh() != Lnh::kIbaLocal) {
      return s;
    }
  }
  if (packet.size() < at + kBthBytes) return s;
  const auto bth = load_as<Bth>(packet.data() + at);
  s.opcode = bth.raw_opcode();
  s.dest_qp = bth.dest_qp();
  s.psn = bth.psn();
  s.ack_req = bth.ack_req();
  s.valid = true;
  at += kBthBytes;
  // The AETH, when the opcode has one, is the first header after the BTH (IBA 9.2 opcode table).
  if (opcode_info(s.opcode).aeth && packet.size() >= at + kAethBytes) {
    const auto aeth = load_as<Aeth>(packet.data() + at);
    s.has_aeth = true;
    s.syndrome = aeth.syndrome();
    s.msn = aeth.msn();
  }
  return s;
}

std::string describe(const PacketSummary& s) {
  if (!s.valid) return "packet (" + std::to_string(s.wire_bytes) + " B)";
  std::string out(opcode_name(static_cast<BthOpcode>(s.opcode)));
  if (out == "unknown") {
    char hex[16];
    std::snprintf(hex, sizeof hex, "opcode 0x%02x", s.opcode);
    out = hex;
  }
  out += " PSN " + std::to_string(s.psn);
  if (s.has_aeth) {
    const char* kind = is_ack(s.syndrome)       ? " ACK"
                       : is_rnr_nak(s.syndrome) ? " RNR NAK"
                       : is_nak(s.syndrome)     ? " NAK"
                                                : " AETH";
    out += kind;
    out += " MSN " + std::to_string(s.msn);
  }
  return out;
}

}  // namespace softhca::fabric
