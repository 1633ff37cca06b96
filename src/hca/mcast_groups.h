// The multicast groups of a device (IBA 10.5, ibv_attach_mcast(3)), in the device region: each
// group is a multicast GID and LID with the QPs of this host attached to it. A UD datagram to a
// multicast address is delivered to every QP attached on every host of the fabric (the runtime's
// carrier fans it out, runtime/shared_runtime.cc); the table says which QPs of this host take it.
// Plain data, under the device lock.
#pragma once
#include <array>
#include <cstdint>
#include <type_traits>

namespace softhca::hca {

inline constexpr uint32_t kMaxMcastGroups = 256;
inline constexpr uint32_t kMaxMcastQpAttach = 64;  // QPs per group
inline constexpr uint32_t kMcastQpn = 0xffffff;    // BTH DestQP of a multicast datagram (IBA 10.5.2.1)

// A multicast LID: 0xC000..0xFFFE (0xFFFF is the permissive LID, IBA 4.1.3).
[[nodiscard]] constexpr bool is_multicast_lid(uint16_t lid) { return lid >= 0xc000 && lid != 0xffff; }
// A multicast GID: ff00::/8 (IBA 4.1.1), or on RoCEv2 an IPv4-mapped multicast address
// ::ffff:224.0.0.0/4, which is how rdma_cm names an IPv4 group there.
[[nodiscard]] constexpr bool is_multicast_gid(const std::array<uint8_t, 16>& g) {
  if (g[0] == 0xff) return true;
  for (int i = 0; i < 10; ++i) {
    if (g[i] != 0) return false;
  }
  return g[10] == 0xff && g[11] == 0xff && (g[12] & 0xf0) == 0xe0;
}

struct McastGroup {
  std::array<uint8_t, 16> gid{};
  uint16_t lid = 0;
  uint16_t attached = 0;  // 0: a free entry
  std::array<uint32_t, kMaxMcastQpAttach> qpns{};
};

struct McastState {
  std::array<McastGroup, kMaxMcastGroups> groups{};
};
static_assert(std::is_trivially_copyable_v<McastState> && std::is_standard_layout_v<McastState>);

class McastGroups {
 public:
  explicit McastGroups(McastState& s) : s_(s) {}
  // 0, EINVAL (already attached: ibv_attach_mcast allows it, counted once), ENOMEM (table full).
  int attach(const std::array<uint8_t, 16>& gid, uint16_t lid, uint32_t qpn);
  int detach(const std::array<uint8_t, 16>& gid, uint16_t lid, uint32_t qpn);  // 0 or EINVAL
  void detach_all(uint32_t qpn);
  // The group a datagram to (gid if global, else lid) reaches, or nullptr.
  [[nodiscard]] const McastGroup* find(const std::array<uint8_t, 16>* gid, uint16_t lid) const;

 private:
  McastState& s_;
};

}  // namespace softhca::hca
