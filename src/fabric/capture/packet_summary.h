// What a capture, a trace or a sequence diagram shows of one packet: its addresses and transport
// header fields, read from the wire bytes without checking CRCs or lengths (fabric::parse does
// that). Native IB (LRH first) or RoCEv2 (IPv4 header first, roce.h; no LIDs: slid/dlid 0). Sizes in
// bytes.
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace softhca::fabric {

struct PacketSummary {
  bool valid = false;  // false: too short for LRH (+GRH) + BTH, or not an IBA transport packet
  uint16_t slid = 0;
  uint16_t dlid = 0;
  uint8_t opcode = 0;  // raw BTH opcode
  uint32_t dest_qp = 0;
  uint32_t psn = 0;
  bool ack_req = false;
  bool has_aeth = false;  // the opcode carries an AETH (ACK, atomic ACK, read response first/last/only)
  uint8_t syndrome = 0;
  uint32_t msn = 0;
  uint32_t wire_bytes = 0;  // LRH through VCRC (RoCEv2: IPv4 header through ICRC)
};

// Reads the LRH and the GRH if LNH says so (or the IPv4 and UDP headers of RoCEv2), the BTH and, for opcodes that carry one, the AETH.
PacketSummary summarize(std::span<const uint8_t> packet);

// A short label: "RC RDMA WRITE Only PSN 5", "RC Acknowledge PSN 5 ACK MSN 1" (NAK and RNR NAK
// syndromes say so), or "packet (N B)" when not valid.
std::string describe(const PacketSummary& s);

}  // namespace softhca::fabric
