// ERF (Endace Extensible Record Format) records as a packet capture holds them: a 16-byte header,
// then the packet. softhca writes native InfiniBand packets (LRH through VCRC) as ERF records of
// type InfiniBand inside pcap files of link type ERF, which Debian's tshark/Wireshark 4.0 decodes
// (it cannot read the raw-IB link type 247). Left out: extension headers, multi-channel and Ethernet
// subheaders, metadata records. Sizes in bytes.
//
// Header layout (Endace "ERF Types" document; Wireshark wiretap/erf_record.h names the same fields):
//   0  ts    8  64-bit fixed point, LITTLE-endian: seconds since the Unix epoch in the high 32 bits,
//               the binary fraction of a second in the low 32 bits
//   8  type  1  bit 7: an extension header follows; bits 6..0: the record type
//   9  flags 1  bits 1..0: capture interface; bit 2: varying record length; bit 3: truncated;
//               bit 4: receive error; bit 5: DS error; bit 6: capture interface bit 2
//  10  rlen  2  big-endian: record length, this header included
//  12  lctr  2  big-endian: loss counter (packets lost since the previous record)
//  14  wlen  2  big-endian: length of the packet on the wire
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "base/units.h"

namespace softhca::fabric::erf {

inline constexpr int kLinkTypeErf = 197;      // LINKTYPE_ERF / DLT_ERF (tcpdump.org link types)
inline constexpr uint8_t kTypeInfiniband = 21;  // ERF_TYPE_INFINIBAND: the packet starts at the LRH
inline constexpr size_t kHeaderBytes = 16;

inline constexpr uint8_t kTypeMask = 0x7f;
inline constexpr uint8_t kTypeExtensionHeader = 0x80;
inline constexpr uint8_t kFlagInterfaceMask = 0x03;
inline constexpr uint8_t kFlagVaryingLength = 0x04;
inline constexpr uint8_t kFlagTruncated = 0x08;
inline constexpr uint8_t kFlagRxError = 0x10;

struct Header {
  uint64_t ts = 0;  // the fixed-point timestamp, as timestamp() makes it
  uint8_t type = kTypeInfiniband;
  uint8_t flags = kFlagVaryingLength;
  uint16_t rlen = kHeaderBytes;
  uint16_t lctr = 0;
  uint16_t wlen = 0;
  bool operator==(const Header&) const = default;
};

inline constexpr int64_t kNanosPerSecond = 1'000'000'000;

// The ERF timestamp of a time since the Unix epoch (not before it). The fraction is rounded down,
// so it never carries into the seconds: 1.5 s is 0x0000'0001'8000'0000.
constexpr uint64_t timestamp(Nanoseconds since_epoch) {
  const auto ns = static_cast<uint64_t>(since_epoch.count() < 0 ? 0 : since_epoch.count());
  const uint64_t seconds = ns / kNanosPerSecond;
  const uint64_t frac_ns = ns % kNanosPerSecond;  // < 2^30, so frac_ns << 32 fits in 64 bits
  return (seconds << 32) | ((frac_ns << 32) / kNanosPerSecond);
}

// The time since the Unix epoch an ERF timestamp stands for, rounded down to a nanosecond.
constexpr Nanoseconds to_time(uint64_t ts) {
  const uint64_t seconds = ts >> 32;
  const uint64_t frac = ts & 0xffffffffu;
  return Nanoseconds(static_cast<int64_t>(seconds * kNanosPerSecond + ((frac * kNanosPerSecond) >> 32)));
}

constexpr std::array<uint8_t, kHeaderBytes> encode(const Header& h) {
  std::array<uint8_t, kHeaderBytes> b{};
  for (size_t i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(h.ts >> (8 * i));  // little-endian
  b[8] = h.type;
  b[9] = h.flags;
  const auto put16 = [&b](size_t at, uint16_t v) {  // big-endian
    b[at] = static_cast<uint8_t>(v >> 8);
    b[at + 1] = static_cast<uint8_t>(v & 0xff);
  };
  put16(10, h.rlen);
  put16(12, h.lctr);
  put16(14, h.wlen);
  return b;
}

// Reads the header at the start of bytes; false when there are fewer than kHeaderBytes.
constexpr bool decode(std::span<const uint8_t> bytes, Header& out) {
  if (bytes.size() < kHeaderBytes) return false;
  uint64_t ts = 0;
  for (size_t i = 8; i-- > 0;) ts = (ts << 8) | bytes[i];
  const auto get16 = [&bytes](size_t at) { return static_cast<uint16_t>((bytes[at] << 8) | bytes[at + 1]); };
  out = Header{ts, bytes[8], bytes[9], get16(10), get16(12), get16(14)};
  return true;
}

}  // namespace softhca::fabric::erf
