#include "cm/cma_header.h"

#include <algorithm>
#include <cstring>

#include "base/endian.h"

namespace softhca::cm {
namespace {

// Offsets of the CMA header (rdmacm.md 4.10).
constexpr size_t kVersionAt = 0;
constexpr size_t kIpVersionAt = 1;
constexpr size_t kPortAt = 2;
constexpr size_t kSrcAddrAt = 4;
constexpr size_t kDstAddrAt = 20;
constexpr size_t kIpv4Offset = 12;  // an IPv4 address sits in the last 4 bytes of its 16

std::array<uint8_t, 16> ipv4_field(uint32_t addr) {
  std::array<uint8_t, 16> a{};
  store_as(a.data() + kIpv4Offset, Be32(addr));
  return a;
}

template <size_t N>
bool set_with_header(PrivateData<N>& pd, const CmaHeader& h, std::span<const uint8_t> user) {
  if (user.size() > N - kCmaHeaderBytes) return false;
  std::array<uint8_t, N> bytes{};
  encode_cma_header(h, std::span<uint8_t, kCmaHeaderBytes>(bytes.data(), kCmaHeaderBytes));
  std::copy(user.begin(), user.end(), bytes.begin() + kCmaHeaderBytes);
  pd.bytes = bytes;
  pd.length = kCmaHeaderBytes + user.size();
  return true;
}

template <size_t N>
std::span<const uint8_t> after_header(const PrivateData<N>& pd) {
  return std::span<const uint8_t>(pd.bytes).subspan(kCmaHeaderBytes);
}

}  // namespace

std::optional<PortSpace> port_space_of(ServiceId id) {
  if ((id.value() >> 32) != 0) return std::nullopt;
  const auto ps = static_cast<uint16_t>(id.value() >> 16);
  switch (static_cast<PortSpace>(ps)) {
    case PortSpace::kIpoib:
    case PortSpace::kTcp:
    case PortSpace::kUdp:
    case PortSpace::kIb: return static_cast<PortSpace>(ps);
  }
  return std::nullopt;
}

CmaHeader CmaHeader::ipv4(uint32_t src, uint16_t src_port_v, uint32_t dst) {
  CmaHeader h;
  h.ip_version = IpVersion::kV4;
  h.src_port = src_port_v;
  h.src_addr = ipv4_field(src);
  h.dst_addr = ipv4_field(dst);
  return h;
}

uint32_t CmaHeader::src_ipv4() const { return load_as<Be32>(src_addr.data() + kIpv4Offset).get(); }
uint32_t CmaHeader::dst_ipv4() const { return load_as<Be32>(dst_addr.data() + kIpv4Offset).get(); }

void encode_cma_header(const CmaHeader& h, std::span<uint8_t, kCmaHeaderBytes> out) {
  std::fill(out.begin(), out.end(), uint8_t{0});
  out[kVersionAt] = kCmaVersion;
  out[kIpVersionAt] = static_cast<uint8_t>(static_cast<uint8_t>(h.ip_version) << 4);
  store_as(out.data() + kPortAt, Be16(h.src_port));
  if (h.ip_version == IpVersion::kV4) {
    std::memcpy(out.data() + kSrcAddrAt + kIpv4Offset, h.src_addr.data() + kIpv4Offset, 4);
    std::memcpy(out.data() + kDstAddrAt + kIpv4Offset, h.dst_addr.data() + kIpv4Offset, 4);
  } else {
    std::memcpy(out.data() + kSrcAddrAt, h.src_addr.data(), 16);
    std::memcpy(out.data() + kDstAddrAt, h.dst_addr.data(), 16);
  }
}

CmaHeaderStatus decode_cma_header(std::span<const uint8_t> bytes, CmaHeader& out) {
  if (bytes.size() < kCmaHeaderBytes) return CmaHeaderStatus::kTooShort;
  if (bytes[kVersionAt] != kCmaVersion) return CmaHeaderStatus::kBadVersion;
  const uint8_t ipv = bytes[kIpVersionAt] >> 4;
  if (ipv != 4 && ipv != 6) return CmaHeaderStatus::kBadIpVersion;
  CmaHeader h;
  h.ip_version = static_cast<IpVersion>(ipv);
  h.src_port = load_as<Be16>(bytes.data() + kPortAt).get();
  if (h.ip_version == IpVersion::kV4) {
    std::memcpy(h.src_addr.data() + kIpv4Offset, bytes.data() + kSrcAddrAt + kIpv4Offset, 4);
    std::memcpy(h.dst_addr.data() + kIpv4Offset, bytes.data() + kDstAddrAt + kIpv4Offset, 4);
  } else {
    std::memcpy(h.src_addr.data(), bytes.data() + kSrcAddrAt, 16);
    std::memcpy(h.dst_addr.data(), bytes.data() + kDstAddrAt, 16);
  }
  out = h;
  return CmaHeaderStatus::kOk;
}

bool set_req_private_data(Req& req, const CmaHeader& h, std::span<const uint8_t> user) {
  return set_with_header(req.private_data, h, user);
}
bool set_sidr_req_private_data(SidrReq& req, const CmaHeader& h, std::span<const uint8_t> user) {
  return set_with_header(req.private_data, h, user);
}
std::span<const uint8_t> req_user_data(const Req& req) { return after_header(req.private_data); }
std::span<const uint8_t> sidr_req_user_data(const SidrReq& req) { return after_header(req.private_data); }

}  // namespace softhca::cm
