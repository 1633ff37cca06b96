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

// The opcode of packet `pos` of a request message of this WQE opcode on this transport.
BthOpcode request_opcode(hwif::QpType type, hwif::WqeOpcode op, PacketPosition pos);
PacketPosition position_of(uint32_t index, uint32_t count);

using fabric::NakCode;
// ACK syndrome with no credit count (end-to-end flow control off).
constexpr uint8_t ack_syndrome() { return fabric::ack_syndrome(fabric::kAethCreditInvalid); }

// Response-class opcodes (READ responses, ACK, atomic ACK) go to the requester side of a QP.
bool is_response(BthOpcode op);
// True when a packet with this opcode may be delivered to a QP of this type.
bool matches_transport(BthOpcode op, hwif::QpType type);

// Minimum RNR NAK timer values of IBA table 45 (encoding 0 = 655.36 ms, 1 = 0.01 ms, ...).
Picoseconds rnr_delay(uint8_t timer_code);
// Local ACK timeout: 4.096 us * 2^timeout (IBA 9.7.6.1.3); 0 means infinite (returns -1).
Picoseconds ack_timeout(uint8_t timeout);

}  // namespace softhca::hca
