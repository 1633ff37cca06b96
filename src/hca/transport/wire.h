// Glue between WQE operations and BTH opcodes, and the AETH syndromes the transports send
// (IBA 9.2 opcode table, 9.7.5.1 syndromes, table 45 RNR timer values).
#pragma once
#include <cstdint>

#include "base/psn.h"
#include "base/units.h"
#include "fabric/packet/opcode.h"
#include "hwif/cmd.h"
#include "hwif/wqe.h"

namespace softhca::hca {

using fabric::BthOpcode;
using fabric::PacketPosition;

// 24-bit PSN arithmetic on raw values (see base/psn.h).
inline uint32_t psn_add(uint32_t psn, uint32_t n) { return (psn + n) & Psn::kMask; }
inline int32_t psn_cmp(uint32_t a, uint32_t b) { return distance(Psn(a), Psn(b)); }

constexpr PacketPosition position_of(uint32_t index, uint32_t count) {
  if (count <= 1) return PacketPosition::kOnly;
  if (index == 0) return PacketPosition::kFirst;
  return index + 1 == count ? PacketPosition::kLast : PacketPosition::kMiddle;
}

namespace wire_detail {
// Operation codes 0x00-0x0b shared by RC and UC (IBA 9.2): SEND first..only-imm, WRITE the same.
constexpr uint8_t send_write_code(bool write, bool imm, PacketPosition pos) {
  const uint8_t base = write ? 0x06 : 0x00;
  switch (pos) {
    case PacketPosition::kFirst: return base + 0;
    case PacketPosition::kMiddle: return base + 1;
    case PacketPosition::kLast: return static_cast<uint8_t>(base + (imm ? 3 : 2));
    case PacketPosition::kOnly: return static_cast<uint8_t>(base + (imm ? 5 : 4));
  }
  return base;
}
}  // namespace wire_detail

// An RC opcode as the reliable transport of `type` sends it: itself on RC, the same operation of
// transport 0b101 on XRC (IBA 9.2: XRC opcodes are RC's with 0xa0 set).
constexpr BthOpcode reliable_opcode(hwif::QpType type, BthOpcode rc_op) {
  return hwif::is_xrc(type) ? static_cast<BthOpcode>(0xa0 | static_cast<uint8_t>(rc_op)) : rc_op;
}

// The opcode of packet `pos` of a request message of this WQE opcode on this transport.
constexpr BthOpcode request_opcode(hwif::QpType type, hwif::WqeOpcode op, PacketPosition pos) {
  using hwif::QpType;
  using hwif::WqeOpcode;
  const bool imm = op == WqeOpcode::kSendImm || op == WqeOpcode::kRdmaWriteImm;
  if (type == QpType::kUd) return imm ? BthOpcode::kUdSendOnlyImm : BthOpcode::kUdSendOnly;
  switch (op) {
    case WqeOpcode::kRdmaRead: return reliable_opcode(type, BthOpcode::kRcRdmaReadRequest);
    case WqeOpcode::kAtomicCs: return reliable_opcode(type, BthOpcode::kRcCompareSwap);
    case WqeOpcode::kAtomicFa: return reliable_opcode(type, BthOpcode::kRcFetchAdd);
    case WqeOpcode::kSendInv:
      if (pos == PacketPosition::kLast) return reliable_opcode(type, BthOpcode::kRcSendLastInv);
      if (pos == PacketPosition::kOnly) return reliable_opcode(type, BthOpcode::kRcSendOnlyInv);
      break;
    default: break;
  }
  const bool write = op == WqeOpcode::kRdmaWrite || op == WqeOpcode::kRdmaWriteImm;
  const uint8_t transport = type == QpType::kUc ? 0x20 : hwif::is_xrc(type) ? 0xa0 : 0x00;
  return static_cast<BthOpcode>(transport | wire_detail::send_write_code(write, imm, pos));
}

using fabric::NakCode;
// ACK syndrome with no credit count (end-to-end flow control off).
constexpr uint8_t ack_syndrome() { return fabric::ack_syndrome(fabric::kAethCreditInvalid); }

// Response-class opcodes (READ responses, ACK, atomic ACK) go to the requester side of a QP.
bool is_response(BthOpcode op);
// True when a packet with this opcode may be delivered to a QP of this type (XRC: responses to
// an INI QP, requests to a TGT QP).
bool matches_transport(BthOpcode op, hwif::QpType type);

// Minimum RNR NAK timer values of IBA table 45 (encoding 0 = 655.36 ms, 1 = 0.01 ms, ...).
Picoseconds rnr_delay(uint8_t timer_code);
// Local ACK timeout: 4.096 us * 2^timeout (IBA 9.7.6.1.3); 0 means infinite (returns -1).
Picoseconds ack_timeout(uint8_t timeout);

}  // namespace softhca::hca
