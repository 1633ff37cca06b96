// What rdma_cm puts inside the CM messages for IP-addressed ids: the 36-byte CMA header at the start
// of REQ and SIDR_REQ private data (rdmacm.md 4.10), service IDs built from port space and port
// (3.5), and how much private data a user may give each message (3.12). AF_IB ids (no header) are
// only covered by the *_total limits. Addresses and ports in network byte order on the wire.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "cm/messages.h"

namespace softhca::cm {

// ---- service IDs (rdmacm.md 3.5) -----------------------------------------------------------------

// rdma_cm port spaces (librdmacm rdma_cma.h enum rdma_port_space).
enum class PortSpace : uint16_t {
  kIpoib = 0x0002,
  kTcp = 0x0106,
  kUdp = 0x0111,
  kIb = 0x013F,
};

// The service ID of (port space, port): 0x0000000001PPpppp style, (ps << 16) + port.
constexpr ServiceId service_id_of(PortSpace ps, uint16_t port) {
  return ServiceId((static_cast<uint64_t>(ps) << 16) | port);
}
// Port space of a service ID (bits 16..31) when it is one of the four and the bits above are 0.
std::optional<PortSpace> port_space_of(ServiceId id);
// The port (low 16 bits) of a service ID.
constexpr uint16_t port_of(ServiceId id) { return static_cast<uint16_t>(id.value() & 0xffff); }

// ---- CMA private-data header (rdmacm.md 4.10) ----------------------------------------------------

inline constexpr size_t kCmaHeaderBytes = 36;
inline constexpr uint8_t kCmaVersion = 0x00;     // CMA_VERSION; receivers refuse other values

enum class IpVersion : uint8_t { kV4 = 4, kV6 = 6 };

struct CmaHeader {
  IpVersion ip_version = IpVersion::kV4;
  uint16_t src_port = 0;  // the active id's port (the destination port is the service ID's)
  // IPv6 address, or an IPv4 address in the last 4 bytes (the first 12 are then zero on the wire).
  std::array<uint8_t, 16> src_addr{};
  std::array<uint8_t, 16> dst_addr{};
  bool operator==(const CmaHeader&) const = default;

  // An IPv4 header from host-order addresses (192.168.1.10 = 0xC0A8010A).
  static CmaHeader ipv4(uint32_t src, uint16_t src_port_v, uint32_t dst);
  // The IPv4 addresses in host order (meaningful when ip_version is kV4).
  [[nodiscard]] uint32_t src_ipv4() const;
  [[nodiscard]] uint32_t dst_ipv4() const;
};

enum class CmaHeaderStatus : uint8_t {
  kOk,
  kTooShort,       // fewer than 36 bytes
  kBadVersion,     // cma_version not 0
  kBadIpVersion,   // high nibble of byte 1 neither 4 nor 6 (an AF_IB peer, or garbage)
};

// Writes the 36 header bytes; an IPv4 header writes 12 zero bytes before each address.
void encode_cma_header(const CmaHeader& h, std::span<uint8_t, kCmaHeaderBytes> out);
// Reads the first 36 bytes; for IPv4 the 12 bytes before each address are ignored and given as 0.
CmaHeaderStatus decode_cma_header(std::span<const uint8_t> bytes, CmaHeader& out);

// REQ / SIDR_REQ private data as rdma_cm builds it: the header, then the user's bytes. False when the
// user data exceeds the limit (kReqUserBytes, kSidrReqUserBytes); the field is then left unchanged.
bool set_req_private_data(Req& req, const CmaHeader& h, std::span<const uint8_t> user);
bool set_sidr_req_private_data(SidrReq& req, const CmaHeader& h, std::span<const uint8_t> user);
// The user's part of a received REQ / SIDR_REQ (after the header): 56 / 180 bytes.
std::span<const uint8_t> req_user_data(const Req& req);
std::span<const uint8_t> sidr_req_user_data(const SidrReq& req);

// ---- private data limits for a user of rdma_cm (rdmacm.md 3.12) ---------------------------------
inline constexpr size_t kReqUserBytes = kReqPrivateDataBytes - kCmaHeaderBytes;          // 56
inline constexpr size_t kSidrReqUserBytes = kSidrReqPrivateDataBytes - kCmaHeaderBytes;  // 180
inline constexpr size_t kRepUserBytes = kRepPrivateDataBytes;                            // 196
inline constexpr size_t kRejUserBytes = kRejPrivateDataBytes;                            // 148
inline constexpr size_t kRtuUserBytes = kRtuPrivateDataBytes;                            // 224
inline constexpr size_t kDreqUserBytes = kDreqPrivateDataBytes;                          // 220
inline constexpr size_t kDrepUserBytes = kDrepPrivateDataBytes;                          // 224
inline constexpr size_t kMraUserBytes = kMraPrivateDataBytes;                            // 222
inline constexpr size_t kSidrRepUserBytes = kSidrRepPrivateDataBytes;                    // 136
static_assert(kReqUserBytes == 56 && kSidrReqUserBytes == 180);

}  // namespace softhca::cm
