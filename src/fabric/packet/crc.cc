#include "fabric/packet/crc.h"

#include <array>

namespace softhca::fabric {
namespace {

// Byte-at-a-time tables for the reflected CRCs, built at compile time.
template <class T, T kPoly>
constexpr std::array<T, 256> make_table() {
  std::array<T, 256> t{};
  for (uint32_t n = 0; n < 256; ++n) {
    T c = static_cast<T>(n);
    for (int k = 0; k < 8; ++k) c = static_cast<T>((c & 1) ? (c >> 1) ^ kPoly : (c >> 1));
    t[n] = c;
  }
  return t;
}

constexpr auto kCrc32Table = make_table<uint32_t, Crc32::kReflectedPoly>();
constexpr auto kVcrcTable = make_table<uint16_t, Crc16Vcrc::kReflectedPoly>();
static_assert(kCrc32Table[1] == 0x77073096 && kCrc32Table[255] == 0x2d02ef8d);  // the well-known table

}  // namespace

Crc32& Crc32::update(std::span<const uint8_t> bytes) {
  uint32_t c = state_;
  for (uint8_t b : bytes) c = kCrc32Table[(c ^ b) & 0xff] ^ (c >> 8);
  state_ = c;
  return *this;
}

Crc16Vcrc& Crc16Vcrc::update(std::span<const uint8_t> bytes) {
  uint16_t c = state_;
  for (uint8_t b : bytes) c = static_cast<uint16_t>(kVcrcTable[(c ^ b) & 0xff] ^ (c >> 8));
  state_ = c;
  return *this;
}

}  // namespace softhca::fabric
