// Big-endian field types for structures that cross the driver/device or wire boundary.
// Byte arrays with alignment 1: layouts are exactly what the static_asserts say, no bitfields.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace softhca {

template <class T>
class BigEndian {
  static_assert(std::is_unsigned_v<T>);

 public:
  constexpr BigEndian() = default;
  constexpr explicit BigEndian(T v) { set(v); }
  [[nodiscard]] constexpr T get() const {
    if (!std::is_constant_evaluated() && std::endian::native == std::endian::little) {
      // One load and a byte swap: the byte loop below is not always recognised as one.
      T v;
      std::memcpy(&v, b_, sizeof(T));
      return swap(v);
    }
    T v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v = static_cast<T>((v << 8) | b_[i]);
    return v;
  }
  constexpr void set(T v) {
    if (!std::is_constant_evaluated() && std::endian::native == std::endian::little) {
      const T s = swap(v);
      std::memcpy(b_, &s, sizeof(T));
      return;
    }
    for (size_t i = sizeof(T); i-- > 0;) {
      b_[i] = static_cast<uint8_t>(v & 0xff);
      if constexpr (sizeof(T) > 1) v = static_cast<T>(v >> 8);
    }
  }
  constexpr BigEndian& operator=(T v) { set(v); return *this; }
  constexpr bool operator==(const BigEndian&) const = default;

 private:
  static T swap(T v) {
    if constexpr (sizeof(T) == 1) {
      return v;
    } else if constexpr (sizeof(T) == 2) {
      return __builtin_bswap16(v);
    } else if constexpr (sizeof(T) == 4) {
      return __builtin_bswap32(v);
    } else {
      return __builtin_bswap64(v);
    }
  }
  uint8_t b_[sizeof(T)]{};
};

using Be16 = BigEndian<uint16_t>;
using Be32 = BigEndian<uint32_t>;
using Be64 = BigEndian<uint64_t>;
static_assert(sizeof(Be16) == 2 && alignof(Be16) == 1);
static_assert(sizeof(Be32) == 4 && alignof(Be32) == 1);
static_assert(sizeof(Be64) == 8 && alignof(Be64) == 1);

// Reads a trivially copyable struct from untyped bytes (no aliasing games).
template <class T>
T load_as(const void* p) {
  T t;
  std::memcpy(&t, p, sizeof(T));
  return t;
}
template <class T>
void store_as(void* p, const T& t) {
  std::memcpy(p, &t, sizeof(T));
}

}  // namespace softhca
