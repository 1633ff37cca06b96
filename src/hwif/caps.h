// What the device reports about itself and its port: the answers behind ibv_query_device/port.
// Values are chosen at device creation (hca::DeviceConfig); the defaults are documented in
// docs/device.md with their sources.
#pragma once
#include <array>
#include <cstdint>

namespace softhca::hwif {

inline constexpr uint32_t kGidTableLen = 4;
inline constexpr uint32_t kPkeyTableLen = 2;

enum class LinkLayer : uint8_t { kInfiniBand = 1, kEthernet = 2 };
// PortPhysicalState (IBA 14.2.5.6) of a port set down by its management (hwif::SetPortStateIn).
inline constexpr uint8_t kPhysStateDisabled = 3;
enum class PortState : uint8_t { kDown = 1, kInit = 2, kArmed = 3, kActive = 4 };
// IB MTU enum as in IBA 7.7.? / ibv_mtu: 1=256 ... 5=4096.
enum class Mtu : uint8_t { k256 = 1, k512 = 2, k1024 = 3, k2048 = 4, k4096 = 5 };
constexpr uint32_t mtu_bytes(Mtu m) { return 128u << static_cast<uint8_t>(m); }

struct DeviceCaps {
  uint64_t fw_ver = 0;
  uint64_t node_guid = 0;      // the EUI-64 as a number (host order); verbs reports it big-endian
  uint64_t sys_image_guid = 0;
  uint64_t max_mr_size = 0;
  uint64_t page_size_cap = 0;
  // The free-running clock CQE timestamps count (Cqe64::timestamp): its rate in kHz and the bits
  // it keeps (ibv_device_attr_ex hca_core_clock and completion_timestamp_mask; 0: no clock).
  uint64_t hca_core_clock_khz = 0;
  uint64_t timestamp_mask = 0;
  uint64_t max_dm_size = 0;      // bytes of device memory (ibv_alloc_dm); 0: none
  uint32_t vendor_id = 0;
  uint32_t vendor_part_id = 0;
  uint32_t hw_ver = 0;
  uint32_t max_qp = 0;
  uint32_t max_qp_wr = 0;
  uint32_t max_sge = 0;
  uint32_t max_sge_rd = 0;
  uint32_t max_cq = 0;
  uint32_t max_cqe = 0;
  uint32_t max_mr = 0;
  uint32_t max_pd = 0;
  uint32_t max_qp_rd_atom = 0;
  uint32_t max_qp_init_rd_atom = 0;
  uint32_t max_srq = 0;
  uint32_t max_srq_wr = 0;
  uint32_t max_srq_sge = 0;
  uint32_t max_ah = 0;
  uint32_t max_mcast_grp = 0;
  uint32_t max_mcast_qp_attach = 0;  // QPs per group
  uint32_t max_inline_data = 0;  // largest inline payload a WQE may carry
  uint32_t max_msg_sz = 0;
  uint32_t num_comp_vectors = 0;
  uint32_t num_uars = 0;         // UAR pages in the BAR after the init segment
  uint16_t max_pkeys = 0;
  uint16_t max_cq_moderation_count = 0;      // ibv_device_attr_ex cq_mod_caps.max_cq_count
  uint16_t max_cq_moderation_period_us = 0;  // cq_mod_caps.max_cq_period [us]
  uint8_t local_ca_ack_delay = 0;
  uint8_t phys_port_cnt = 0;
  bool atomic_hca = false;       // atomics are atomic against other HCA atomics (IBV_ATOMIC_HCA)
};

struct Gid {
  std::array<uint8_t, 16> raw{};
  bool operator==(const Gid&) const = default;
};

struct PortCaps {
  PortState state = PortState::kDown;
  LinkLayer link_layer = LinkLayer::kInfiniBand;
  Mtu max_mtu = Mtu::k4096;
  Mtu active_mtu = Mtu::k4096;
  uint16_t lid = 0;
  uint16_t sm_lid = 0;
  uint8_t lmc = 0;
  uint8_t active_width = 0;  // IBV_WIDTH_* code (2 = 4x)
  uint8_t active_speed = 0;  // IBV_SPEED_* code (32 = EDR)
  uint8_t phys_state = 0;    // 5 = LinkUp
  uint32_t port_cap_flags = 0;
  uint32_t max_msg_sz = 0;
  std::array<Gid, kGidTableLen> gids{};
  std::array<uint16_t, kPkeyTableLen> pkeys{};
};

}  // namespace softhca::hwif
