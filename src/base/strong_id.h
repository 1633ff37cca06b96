// Strong integer ids: a Qpn is not an LKey even though both are 32 bits.
// Each id is a distinct type with explicit construction and comparison only; no arithmetic.
#pragma once
#include <compare>
#include <cstdint>
#include <functional>

namespace softhca {

template <class Tag, class Rep>
class StrongId {
 public:
  using rep_type = Rep;
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep v) : v_(v) {}
  [[nodiscard]] constexpr Rep value() const { return v_; }
  constexpr auto operator<=>(const StrongId&) const = default;

 private:
  Rep v_{};
};

// Queue pair number: 24 bits on the wire (IBA 9.2 BTH DestQP).
using Qpn = StrongId<struct QpnTag, uint32_t>;
using Cqn = StrongId<struct CqnTag, uint32_t>;
using Srqn = StrongId<struct SrqnTag, uint32_t>;
using Pdn = StrongId<struct PdnTag, uint32_t>;
using Eqn = StrongId<struct EqnTag, uint32_t>;
using LKey = StrongId<struct LKeyTag, uint32_t>;
using RKey = StrongId<struct RKeyTag, uint32_t>;
// Local identifier: 16 bits (IBA 4.1.3).
using Lid = StrongId<struct LidTag, uint16_t>;

inline constexpr uint32_t kQpnMask = 0xffffff;

}  // namespace softhca

template <class Tag, class Rep>
struct std::hash<softhca::StrongId<Tag, Rep>> {
  size_t operator()(const softhca::StrongId<Tag, Rep>& id) const noexcept {
    return std::hash<Rep>{}(id.value());
  }
};
