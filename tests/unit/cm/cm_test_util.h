// Helpers of the cm tests: a MAD built by hand, byte by byte, at the MAD offsets of rdmacm.md 4.2-4.7.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <variant>

#include "cm/mad_codec.h"

namespace softhca::cm::test {

// Writes bytes at MAD offset off.
inline void put(MadBytes& m, size_t off, std::initializer_list<uint8_t> bytes) {
  for (uint8_t b : bytes) m[off++] = b;
}
inline void fill(MadBytes& m, size_t off, size_t n, uint8_t v) {
  for (size_t i = 0; i < n; ++i) m[off + i] = v;
}

// A MAD whose common header is BaseVersion 1, class 0x07, version 2, SEND, status 0, class
// specific 0, the given TID, AttributeID and AttributeModifier; everything after byte 23 zero.
inline MadBytes hand_header(uint16_t attr, uint64_t tid, uint32_t attr_mod = 0) {
  MadBytes m{};
  put(m, 0, {0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00});
  for (int i = 0; i < 8; ++i) m[8 + static_cast<size_t>(i)] = static_cast<uint8_t>(tid >> (56 - 8 * i));
  put(m, 16, {static_cast<uint8_t>(attr >> 8), static_cast<uint8_t>(attr), 0x00, 0x00});
  put(m, 20, {static_cast<uint8_t>(attr_mod >> 24), static_cast<uint8_t>(attr_mod >> 16),
              static_cast<uint8_t>(attr_mod >> 8), static_cast<uint8_t>(attr_mod)});
  return m;
}

// The message of a MAD the code under test produced (fails the test on a bad MAD).
template <class M>
M decoded_as(const MadBytes& bytes, CmMad* mad_out = nullptr) {
  CmMad mad;
  const DecodeStatus s = decode(bytes, mad);
  if (s != DecodeStatus::kOk) return M{};
  if (mad_out != nullptr) *mad_out = mad;
  const M* m = std::get_if<M>(&mad.message);
  return m != nullptr ? *m : M{};
}

inline AttributeId attribute_in(const MadBytes& bytes) {
  return static_cast<AttributeId>((bytes[16] << 8) | bytes[17]);
}

}  // namespace softhca::cm::test
