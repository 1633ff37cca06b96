// BTH opcodes of the RC, UC, UD and XRC transports (IBA vol 1, 9.2 opcode table) with what each
// one carries after the BTH, and the AETH syndrome encoding (IBA 9.7.5.1). Left out: RD (0x40-0x5f),
// CNP (0x81), IBA 1.5 FLUSH/ATOMIC WRITE, manufacturer opcodes. Sizes in bytes.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fabric/packet/headers.h"

namespace softhca::fabric {

// OpCode = transport (3 bits) << 5 | operation (5 bits).
enum class BthOpcode : uint8_t {
  // Reliable Connection
  kRcSendFirst = 0x00,
  kRcSendMiddle = 0x01,
  kRcSendLast = 0x02,
  kRcSendLastImm = 0x03,
  kRcSendOnly = 0x04,
  kRcSendOnlyImm = 0x05,
  kRcRdmaWriteFirst = 0x06,
  kRcRdmaWriteMiddle = 0x07,
  kRcRdmaWriteLast = 0x08,
  kRcRdmaWriteLastImm = 0x09,
  kRcRdmaWriteOnly = 0x0a,
  kRcRdmaWriteOnlyImm = 0x0b,
  kRcRdmaReadRequest = 0x0c,
  kRcRdmaReadResponseFirst = 0x0d,
  kRcRdmaReadResponseMiddle = 0x0e,
  kRcRdmaReadResponseLast = 0x0f,
  kRcRdmaReadResponseOnly = 0x10,
  kRcAcknowledge = 0x11,
  kRcAtomicAcknowledge = 0x12,
  kRcCompareSwap = 0x13,
  kRcFetchAdd = 0x14,
  kRcSendLastInv = 0x16,
  kRcSendOnlyInv = 0x17,
  // Unreliable Connection
  kUcSendFirst = 0x20,
  kUcSendMiddle = 0x21,
  kUcSendLast = 0x22,
  kUcSendLastImm = 0x23,
  kUcSendOnly = 0x24,
  kUcSendOnlyImm = 0x25,
  kUcRdmaWriteFirst = 0x26,
  kUcRdmaWriteMiddle = 0x27,
  kUcRdmaWriteLast = 0x28,
  kUcRdmaWriteLastImm = 0x29,
  kUcRdmaWriteOnly = 0x2a,
  kUcRdmaWriteOnlyImm = 0x2b,
  // Unreliable Datagram
  kUdSendOnly = 0x64,
  kUdSendOnlyImm = 0x65,
  // Extended Reliable Connection (the RC operations, transport 0b101)
  kXrcSendFirst = 0xa0,
  kXrcSendMiddle = 0xa1,
  kXrcSendLast = 0xa2,
  kXrcSendLastImm = 0xa3,
  kXrcSendOnly = 0xa4,
  kXrcSendOnlyImm = 0xa5,
  kXrcRdmaWriteFirst = 0xa6,
  kXrcRdmaWriteMiddle = 0xa7,
  kXrcRdmaWriteLast = 0xa8,
  kXrcRdmaWriteLastImm = 0xa9,
  kXrcRdmaWriteOnly = 0xaa,
  kXrcRdmaWriteOnlyImm = 0xab,
  kXrcRdmaReadRequest = 0xac,
  kXrcRdmaReadResponseFirst = 0xad,
  kXrcRdmaReadResponseMiddle = 0xae,
  kXrcRdmaReadResponseLast = 0xaf,
  kXrcRdmaReadResponseOnly = 0xb0,
  kXrcAcknowledge = 0xb1,
  kXrcAtomicAcknowledge = 0xb2,
  kXrcCompareSwap = 0xb3,
  kXrcFetchAdd = 0xb4,
  kXrcSendLastInv = 0xb6,
  kXrcSendOnlyInv = 0xb7,
};

inline constexpr std::array<BthOpcode, 60> kAllOpcodes = {
    BthOpcode::kRcSendFirst,           BthOpcode::kRcSendMiddle,
    BthOpcode::kRcSendLast,            BthOpcode::kRcSendLastImm,
    BthOpcode::kRcSendOnly,            BthOpcode::kRcSendOnlyImm,
    BthOpcode::kRcRdmaWriteFirst,      BthOpcode::kRcRdmaWriteMiddle,
    BthOpcode::kRcRdmaWriteLast,       BthOpcode::kRcRdmaWriteLastImm,
    BthOpcode::kRcRdmaWriteOnly,       BthOpcode::kRcRdmaWriteOnlyImm,
    BthOpcode::kRcRdmaReadRequest,     BthOpcode::kRcRdmaReadResponseFirst,
    BthOpcode::kRcRdmaReadResponseMiddle, BthOpcode::kRcRdmaReadResponseLast,
    BthOpcode::kRcRdmaReadResponseOnly, BthOpcode::kRcAcknowledge,
    BthOpcode::kRcAtomicAcknowledge,   BthOpcode::kRcCompareSwap,
    BthOpcode::kRcFetchAdd,            BthOpcode::kRcSendLastInv,
    BthOpcode::kRcSendOnlyInv,         BthOpcode::kUcSendFirst,
    BthOpcode::kUcSendMiddle,          BthOpcode::kUcSendLast,
    BthOpcode::kUcSendLastImm,         BthOpcode::kUcSendOnly,
    BthOpcode::kUcSendOnlyImm,         BthOpcode::kUcRdmaWriteFirst,
    BthOpcode::kUcRdmaWriteMiddle,     BthOpcode::kUcRdmaWriteLast,
    BthOpcode::kUcRdmaWriteLastImm,    BthOpcode::kUcRdmaWriteOnly,
    BthOpcode::kUcRdmaWriteOnlyImm,    BthOpcode::kUdSendOnly,
    BthOpcode::kUdSendOnlyImm,
    BthOpcode::kXrcSendFirst,
    BthOpcode::kXrcSendMiddle,
    BthOpcode::kXrcSendLast,
    BthOpcode::kXrcSendLastImm,
    BthOpcode::kXrcSendOnly,
    BthOpcode::kXrcSendOnlyImm,
    BthOpcode::kXrcRdmaWriteFirst,
    BthOpcode::kXrcRdmaWriteMiddle,
    BthOpcode::kXrcRdmaWriteLast,
    BthOpcode::kXrcRdmaWriteLastImm,
    BthOpcode::kXrcRdmaWriteOnly,
    BthOpcode::kXrcRdmaWriteOnlyImm,
    BthOpcode::kXrcRdmaReadRequest,
    BthOpcode::kXrcRdmaReadResponseFirst,
    BthOpcode::kXrcRdmaReadResponseMiddle,
    BthOpcode::kXrcRdmaReadResponseLast,
    BthOpcode::kXrcRdmaReadResponseOnly,
    BthOpcode::kXrcAcknowledge,
    BthOpcode::kXrcAtomicAcknowledge,
    BthOpcode::kXrcCompareSwap,
    BthOpcode::kXrcFetchAdd,
    BthOpcode::kXrcSendLastInv,
    BthOpcode::kXrcSendOnlyInv,
};

// The transport a BTH opcode belongs to (its top three bits).
enum class Service : uint8_t { kRc = 0, kUc = 1, kRd = 2, kUd = 3, kXrc = 5 };

enum class OpKind : uint8_t {
  kSend,
  kRdmaWrite,
  kRdmaReadRequest,
  kRdmaReadResponse,
  kAcknowledge,
  kAtomicAcknowledge,
  kCompareSwap,
  kFetchAdd,
};

// Where the packet sits in its message. Single-packet operations (READ request, ACK, atomics) are kOnly.
enum class PacketPosition : uint8_t { kFirst, kMiddle, kLast, kOnly };

struct OpcodeInfo {
  bool valid = false;
  Service service = Service::kRc;
  OpKind kind = OpKind::kSend;
  PacketPosition position = PacketPosition::kOnly;
  bool has_payload = false;  // a payload (possibly 0 bytes) follows the headers
  // Extension headers after the BTH; on the wire they come in this order (IBA 9.2 opcode table).
  bool deth = false;
  bool xrceth = false;  // XRC requests
  bool reth = false;
  bool atomic_eth = false;
  bool aeth = false;
  bool atomic_ack_eth = false;
  bool immdt = false;
  bool ieth = false;

  // [bytes] all extension headers together.
  [[nodiscard]] constexpr size_t ext_bytes() const {
    return (deth ? kDethBytes : 0) + (xrceth ? kXrcethBytes : 0) + (reth ? kRethBytes : 0) + (atomic_eth ? kAtomicEthBytes : 0) +
           (aeth ? kAethBytes : 0) + (atomic_ack_eth ? kAtomicAckEthBytes : 0) + (immdt ? kImmDtBytes : 0) +
           (ieth ? kIethBytes : 0);
  }
  [[nodiscard]] constexpr bool starts_message() const {
    return position == PacketPosition::kFirst || position == PacketPosition::kOnly;
  }
  [[nodiscard]] constexpr bool ends_message() const {
    return position == PacketPosition::kLast || position == PacketPosition::kOnly;
  }
};

namespace opcode_detail {

// The operation codes (low five bits) shared by RC and UC: SEND and RDMA WRITE, 0x00-0x0b.
constexpr OpcodeInfo send_or_write(uint8_t code) {
  OpcodeInfo i;
  i.valid = true;
  i.has_payload = true;
  i.kind = code < 0x06 ? OpKind::kSend : OpKind::kRdmaWrite;
  switch (code < 0x06 ? code : code - 0x06) {
    case 0: i.position = PacketPosition::kFirst; break;
    case 1: i.position = PacketPosition::kMiddle; break;
    case 2: i.position = PacketPosition::kLast; break;
    case 3: i.position = PacketPosition::kLast; i.immdt = true; break;
    case 4: i.position = PacketPosition::kOnly; break;
    default: i.position = PacketPosition::kOnly; i.immdt = true; break;  // 5
  }
  // RDMA WRITE First and Only (with or without immediate) carry the RETH.
  i.reth = i.kind == OpKind::kRdmaWrite && i.starts_message();
  return i;
}

constexpr OpcodeInfo rc(uint8_t code) {
  if (code <= 0x0b) return send_or_write(code);
  OpcodeInfo i;
  i.valid = true;
  switch (code) {
    case 0x0c: i.kind = OpKind::kRdmaReadRequest; i.reth = true; break;
    case 0x0d: i.kind = OpKind::kRdmaReadResponse; i.position = PacketPosition::kFirst; i.aeth = true; break;
    case 0x0e: i.kind = OpKind::kRdmaReadResponse; i.position = PacketPosition::kMiddle; break;
    case 0x0f: i.kind = OpKind::kRdmaReadResponse; i.position = PacketPosition::kLast; i.aeth = true; break;
    case 0x10: i.kind = OpKind::kRdmaReadResponse; i.aeth = true; break;
    case 0x11: i.kind = OpKind::kAcknowledge; i.aeth = true; break;
    case 0x12: i.kind = OpKind::kAtomicAcknowledge; i.aeth = true; i.atomic_ack_eth = true; break;
    case 0x13: i.kind = OpKind::kCompareSwap; i.atomic_eth = true; break;
    case 0x14: i.kind = OpKind::kFetchAdd; i.atomic_eth = true; break;
    case 0x16: i.kind = OpKind::kSend; i.position = PacketPosition::kLast; i.ieth = true; break;
    case 0x17: i.kind = OpKind::kSend; i.ieth = true; break;
    default: return OpcodeInfo{};  // 0x15 and 0x18-0x1f: reserved here
  }
  i.has_payload = i.kind == OpKind::kRdmaReadResponse || i.kind == OpKind::kSend;
  return i;
}

}  // namespace opcode_detail

namespace opcode_detail {

constexpr OpcodeInfo decode(uint8_t raw) {
  const uint8_t code = raw & 0x1f;
  OpcodeInfo i;
  switch (raw >> 5) {
    case 0: i = rc(code); i.service = Service::kRc; break;
    case 1:
      if (code <= 0x0b) i = send_or_write(code);
      i.service = Service::kUc;
      break;
    case 3:
      if (code == 0x04 || code == 0x05) {
        i = send_or_write(code);
        i.deth = true;
      }
      i.service = Service::kUd;
      break;
    case 5:
      // XRC: RC's operations; every request carries the XRCETH, responses do not (IBA 9.2).
      i = rc(code);
      i.xrceth = i.valid && i.kind != OpKind::kRdmaReadResponse && i.kind != OpKind::kAcknowledge &&
                 i.kind != OpKind::kAtomicAcknowledge;
      i.service = Service::kXrc;
      break;
    default: break;  // RD, CNP, manufacturer-specific
  }
  return i.valid ? i : OpcodeInfo{};
}

// Every opcode byte decoded once, at compile time: the data path looks an opcode up per packet
// (several times), and a table read is a load where decode() is a chain of branches.
inline constexpr std::array<OpcodeInfo, 256> kTable = [] {
  std::array<OpcodeInfo, 256> t{};
  for (int raw = 0; raw < 256; ++raw) t[static_cast<size_t>(raw)] = decode(static_cast<uint8_t>(raw));
  return t;
}();

}  // namespace opcode_detail

// What follows the BTH for a raw opcode byte; .valid is false for opcodes this model does not know.
constexpr OpcodeInfo opcode_info(uint8_t raw) { return opcode_detail::kTable[raw]; }
constexpr OpcodeInfo opcode_info(BthOpcode op) { return opcode_info(static_cast<uint8_t>(op)); }
constexpr bool is_valid_opcode(uint8_t raw) { return opcode_info(raw).valid; }

// Wireshark-style name ("RC RDMA WRITE Only"); "unknown" for an invalid opcode.
std::string_view opcode_name(BthOpcode op);

// ---- AETH syndrome (IBA 9.7.5.1): bit 7 reserved, bits 6:5 type, bits 4:0 value ----

enum class AethType : uint8_t {
  kAck = 0,       // value: credit count code
  kRnrNak = 1,    // value: RNR timer code
  kReserved = 2,
  kNak = 3,       // value: NakCode
};

enum class NakCode : uint8_t {
  kPsnSequenceError = 0,
  kInvalidRequest = 1,
  kRemoteAccessError = 2,
  kRemoteOperationalError = 3,
  kInvalidRdRequest = 4,
};

inline constexpr uint8_t kAethValueMask = 0x1f;
// ACK credit code meaning "no credit count carried" (end-to-end flow control off, e.g. SRQ).
inline constexpr uint8_t kAethCreditInvalid = 0x1f;

constexpr uint8_t make_syndrome(AethType type, uint8_t value) {
  return static_cast<uint8_t>((static_cast<uint8_t>(type) << 5) | (value & kAethValueMask));
}
constexpr uint8_t ack_syndrome(uint8_t credit_code) { return make_syndrome(AethType::kAck, credit_code); }
constexpr uint8_t rnr_nak_syndrome(uint8_t timer_code) { return make_syndrome(AethType::kRnrNak, timer_code); }
constexpr uint8_t nak_syndrome(NakCode code) { return make_syndrome(AethType::kNak, static_cast<uint8_t>(code)); }

constexpr AethType syndrome_type(uint8_t syndrome) { return static_cast<AethType>((syndrome >> 5) & 0x3); }
constexpr uint8_t syndrome_value(uint8_t syndrome) { return syndrome & kAethValueMask; }
constexpr bool is_ack(uint8_t syndrome) { return syndrome_type(syndrome) == AethType::kAck; }
constexpr bool is_rnr_nak(uint8_t syndrome) { return syndrome_type(syndrome) == AethType::kRnrNak; }
constexpr bool is_nak(uint8_t syndrome) { return syndrome_type(syndrome) == AethType::kNak; }

}  // namespace softhca::fabric
