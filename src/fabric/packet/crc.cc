#include "fabric/packet/crc.h"

#include <array>

namespace softhca::fabric {
namespace {

// Slicing-by-8 tables for the reflected CRCs, built at compile time: row 0 is the classic
// byte-at-a-time table; row k advances a byte's contribution by k more bytes of zeros.
template <class T, T kPoly>
constexpr std::array<std::array<T, 256>, 8> make_tables() {
  std::array<std::array<T, 256>, 8> t{};
  for (uint32_t n = 0; n < 256; ++n) {
    T c = static_cast<T>(n);
    for (int k = 0; k < 8; ++k) c = static_cast<T>((c & 1) ? (c >> 1) ^ kPoly : (c >> 1));
    t[0][n] = c;
  }
  for (size_t k = 1; k < 8; ++k)
    for (uint32_t n = 0; n < 256; ++n) t[k][n] = static_cast<T>((t[k - 1][n] >> 8) ^ t[0][t[k - 1][n] & 0xff]);
  return t;
}

constexpr auto kCrc32Tables = make_tables<uint32_t, Crc32::kReflectedPoly>();
constexpr auto kVcrcTables = make_tables<uint16_t, Crc16Vcrc::kReflectedPoly>();
static_assert(kCrc32Tables[0][1] == 0x77073096 && kCrc32Tables[0][255] == 0x2d02ef8d);  // the well-known table

// A reflected CRC over bytes: eight bytes per step (the register XORed into the first bytes of the
// little-endian word, each byte then looked up in the row for its distance from the end), then
// byte at a time for the tail.
template <class T>
T reflected_crc(const std::array<std::array<T, 256>, 8>& t, T c, std::span<const uint8_t> bytes) {
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  while (n >= 8) {
    uint64_t w = 0;
    for (int i = 7; i >= 0; --i) w = (w << 8) | p[i];  // little-endian load, alignment-free
    w ^= c;
    c = static_cast<T>(t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^
                       t[4][(w >> 24) & 0xff] ^ t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^
                       t[1][(w >> 48) & 0xff] ^ t[0][w >> 56]);
    p += 8;
    n -= 8;
  }
  for (; n > 0; --n, ++p) c = static_cast<T>(t[0][(c ^ *p) & 0xff] ^ (c >> 8));
  return c;
}

}  // namespace

Crc32& Crc32::update(std::span<const uint8_t> bytes) {
  state_ = reflected_crc(kCrc32Tables, state_, bytes);
  return *this;
}

namespace {

constexpr uint32_t multiply(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  // a's coefficients from x^0 (bit 31) up; b runs through b * x^i alongside.
  for (uint32_t bit = kCrc32One; bit != 0 && a != 0; bit >>= 1) {
    if ((a & bit) != 0) {
      product ^= b;
      a ^= bit;
    }
    b = (b & 1) ? (b >> 1) ^ Crc32::kReflectedPoly : (b >> 1);  // b * x
  }
  return product;
}

// x^(2^k) and x^-(2^k) for every k an exponent's bits can have, so a power is one multiplication
// per set bit of its exponent. x^-1: the register that one zero bit turns into 1, i.e. the shift
// undone: 1 has bit 31 set, which only the polynomial's reduction can leave there.
constexpr uint32_t kX = kCrc32One >> 1;
constexpr uint32_t kXInverse = ((kCrc32One ^ Crc32::kReflectedPoly) << 1) | 1;
static_assert(kXInverse == 0xdb710641 && multiply(kX, kXInverse) == kCrc32One);
constexpr std::array<uint32_t, 64> squarings(uint32_t x) {
  std::array<uint32_t, 64> t{};
  for (size_t k = 0; k < t.size(); ++k, x = multiply(x, x)) t[k] = x;
  return t;
}
constexpr auto kXPow2 = squarings(kX);
constexpr auto kXInversePow2 = squarings(kXInverse);

}  // namespace

uint32_t crc32_multiply(uint32_t a, uint32_t b) { return multiply(a, b); }

uint32_t crc32_x_power(int64_t n) {
  const auto& table = n < 0 ? kXInversePow2 : kXPow2;
  // |n| without overflow for the most negative n
  uint64_t e = n < 0 ? uint64_t{0} - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  uint32_t result = kCrc32One;
  for (size_t k = 0; e != 0; ++k, e >>= 1) {
    if ((e & 1) != 0) result = multiply(result, table[k]);
  }
  return result;
}

Crc16Vcrc& Crc16Vcrc::update(std::span<const uint8_t> bytes) {
  state_ = reflected_crc(kVcrcTables, state_, bytes);
  return *this;
}

}  // namespace softhca::fabric
