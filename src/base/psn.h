// Packet sequence numbers: 24-bit counters that wrap (IBA 9.7.1).
// Comparison is only meaningful within half the space (2^23), as the spec's valid PSN windows are.
#pragma once
#include <cstdint>

namespace softhca {

class Psn {
 public:
  static constexpr uint32_t kMask = 0xffffff;       // 24 bits, IBA 9.2 BTH PSN
  static constexpr uint32_t kHalf = 0x800000;       // half the space: ahead vs behind

  constexpr Psn() = default;
  constexpr explicit Psn(uint32_t v) : v_(v & kMask) {}
  [[nodiscard]] constexpr uint32_t value() const { return v_; }

  constexpr Psn operator+(uint32_t n) const { return Psn(v_ + n); }
  constexpr Psn operator-(uint32_t n) const { return Psn(v_ - n); }
  constexpr Psn& operator++() { v_ = (v_ + 1) & kMask; return *this; }
  constexpr Psn& operator+=(uint32_t n) { v_ = (v_ + n) & kMask; return *this; }
  constexpr bool operator==(const Psn&) const = default;

  // Signed distance a - b in [-2^23, 2^23): positive when a is ahead of b.
  friend constexpr int32_t distance(Psn a, Psn b) {
    uint32_t d = (a.v_ - b.v_) & kMask;
    return d >= kHalf ? static_cast<int32_t>(d) - static_cast<int32_t>(kMask + 1)
                      : static_cast<int32_t>(d);
  }
  friend constexpr bool before(Psn a, Psn b) { return distance(a, b) < 0; }

 private:
  uint32_t v_ = 0;
};

}  // namespace softhca
