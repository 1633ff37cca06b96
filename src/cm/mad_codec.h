// CM MADs on the wire: the 24-byte MAD common header (IBA 13.4.3) and the CM messages of messages.h
// packed into one 256-byte MAD (IBA 12.6; rdmacm.md 4.2-4.7). Pure codec: no transport (QP1, GRH,
// P_Key/Q_Key checks) and no protocol rules. LAP, APR and ClassPortInfo are recognised and refused
// as kUnsupportedAttribute. Reserved bits are written as 0 and ignored on receive.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "cm/messages.h"

namespace softhca::cm {

inline constexpr size_t kMadBytes = 256;             // every CM MAD (IBA 13.4.1)
inline constexpr size_t kMadHeaderBytes = 24;        // common MAD header (IBA 13.4.3)
inline constexpr size_t kCmDataBytes = kMadBytes - kMadHeaderBytes;  // 232

inline constexpr uint8_t kMadBaseVersion = 1;        // IBA 13.4.3 BaseVersion
inline constexpr uint8_t kMgmtClassCm = 0x07;        // IBA Table 126: Communication Management
inline constexpr uint8_t kCmClassVersion = 2;        // IBA 12.6.1; the Linux CM agent takes only 2
inline constexpr uint8_t kMadMethodSend = 0x03;      // IBA 13.4.5; every CM message is a SEND
inline constexpr uint32_t kGsiQkey = 0x80010000;     // IBA 13.5.2.1: QP1's Q_Key (rdmacm.md 4.1)

// AttributeID of each CM message (IBA Table 103; rdmacm.md 4.3).
enum class AttributeId : uint16_t {
  kClassPortInfo = 0x0001,
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
  kLap = 0x0019,
  kApr = 0x001A,
};

using MadBytes = std::array<uint8_t, kMadBytes>;

// The common MAD header, every field as received (decode_mad_header() checks nothing but size).
struct MadHeader {
  uint8_t base_version = kMadBaseVersion;
  uint8_t mgmt_class = kMgmtClassCm;
  uint8_t class_version = kCmClassVersion;
  uint8_t method = kMadMethodSend;  // R bit (bit 7) and Method
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t transaction_id = 0;
  uint16_t attribute_id = 0;
  uint32_t attribute_modifier = 0;
  bool operator==(const MadHeader&) const = default;
};

// One decoded CM MAD: the header fields a CM message leaves variable, and the message (whose type
// gives the AttributeID). attribute_modifier carries the ECE options of REQ, REP and SIDR_REP in
// newer kernels; 0 otherwise.
struct CmMad {
  uint64_t transaction_id = 0;
  uint32_t attribute_modifier = 0;
  uint16_t status = 0;
  uint16_t class_specific = 0;
  CmMessage message;
  bool operator==(const CmMad&) const = default;
};

enum class DecodeStatus : uint8_t {
  kOk,
  kTooShort,               // fewer than 256 bytes
  kBadBaseVersion,         // BaseVersion not 1
  kBadClass,               // MgmtClass not 0x07 (not a CM MAD)
  kBadClassVersion,        // ClassVersion not 2
  kBadMethod,              // not SEND (0x03), or the R (response) bit set
  kUnsupportedAttribute,   // ClassPortInfo, LAP, APR: CM attributes this codec does not model
  kUnknownAttribute,       // any other AttributeID
  kBadField,               // a field with a reserved value: Message REJected/MRAed 3, an
                           // ARI / Additional Information length above 72
};
std::string_view to_string(DecodeStatus s);

AttributeId attribute_of(const CmMessage& m);

// Header fields of any MAD (bytes 0-23); false when bytes is shorter than 24 bytes.
bool decode_mad_header(std::span<const uint8_t> bytes, MadHeader& out);
void encode_mad_header(const MadHeader& h, std::span<uint8_t, kMadHeaderBytes> out);

// The 256-byte MAD of m: header (BaseVersion 1, class 0x07, version 2, SEND, m's AttributeID) and the
// message; private data beyond its length and every reserved bit are 0.
MadBytes encode(const CmMad& m);
void encode(const CmMad& m, std::span<uint8_t, kMadBytes> out);

// Decodes one CM MAD from the first 256 bytes of bytes (more are ignored: a receive buffer may be
// larger). Checks, in this order: size, BaseVersion, MgmtClass, ClassVersion, Method, AttributeID,
// the message's fields. On kOk out holds the MAD; otherwise out is untouched. Total for any input.
DecodeStatus decode(std::span<const uint8_t> bytes, CmMad& out);

}  // namespace softhca::cm
