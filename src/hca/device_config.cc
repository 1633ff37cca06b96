#include "hca/device_config.h"
#include "hca/mcast_groups.h"

#include "fabric/packet/roce.h"

namespace softhca::hca {

namespace {
// Vendor id 0xFFFFFF: the value Linux Soft-RoCE reports, neither Mellanox's (0x02c9) nor
// Amazon's (0x1d0f), so vendor-specific code paths stay off (verbs-abi.md §2.4, §5.3).
constexpr uint32_t kVendorId = 0xffffff;
// vendor_part_id 4123 (ConnectX-6): perftest then uses its ibv_wr_* path and inline defaults.
constexpr uint32_t kVendorPartId = 4123;
constexpr uint16_t kDefaultPkey = 0xffff;  // full-membership default partition (IBA 10.9.1.2)
// 8 MiB, as Linux rxe (figures.md R1): every packet of a message may be queued at once in live mode,
// so the message size bounds the memory a single work request can hold.
constexpr uint32_t kMaxMsgBytes = 8u << 20;
// Port capability bits reported to ibv_devinfo: IsSM (0x2)? no; IsTrapSupported etc. not needed.
constexpr uint32_t kPortCapFlags = 0;
// The device clock: one tick per nanosecond of the engine clock (EngineClock::now() / 1 ns), so
// 1,000,000 kHz; its ticks never wrap (int64 picoseconds end first), so every bit is kept.
constexpr uint64_t kCoreClockKhz = 1'000'000;
constexpr uint64_t kTimestampMask = ~uint64_t{0};
// CQ moderation limits of mlx5 (the kernel's MLX5_MAX_CQ_COUNT 16 bits, MLX5_MAX_CQ_PERIOD 12 bits).
constexpr uint16_t kMaxCqModerationCount = 0xffff;
constexpr uint16_t kMaxCqModerationPeriodUs = 0xfff;
}  // namespace

DeviceConfig default_device_config(uint32_t index, uint32_t fabric_id) {
  DeviceConfig c;
  hwif::DeviceCaps& d = c.caps;
  // GUID: a locally administered EUI-64 with the fabric and device number in the low bytes.
  const uint64_t guid = 0x02'50'56'ff'fe'00'00'00ull | (static_cast<uint64_t>(fabric_id & 0xff) << 16) |
                        static_cast<uint64_t>((index + 1) & 0xffff);
  d.fw_ver = 0x0001'0000'0000ull;
  d.node_guid = guid;
  d.sys_image_guid = guid;
  d.max_mr_size = 1ull << 40;
  d.page_size_cap = 4096;
  d.hca_core_clock_khz = kCoreClockKhz;
  d.timestamp_mask = kTimestampMask;
  d.max_dm_size = 128 * 1024;  // ConnectX-5's MEMIC reports 128 KiB (ibv_devinfo -v max_dm_size)
  d.max_cq_moderation_count = kMaxCqModerationCount;
  d.max_cq_moderation_period_us = kMaxCqModerationPeriodUs;
  d.vendor_id = kVendorId;
  d.vendor_part_id = kVendorPartId;
  d.hw_ver = 0;
  d.max_qp = 1u << 16;
  d.max_qp_wr = 1u << 14;     // R1: rxe allows 16384 WRs per QP
  d.max_sge = 30;             // a legacy RC WQE of 1 KiB: (1024 - 192 overhead) / 16 = 52, kept at 30 as ConnectX-4
  d.max_sge_rd = 30;
  d.max_cq = 1u << 16;
  d.max_cqe = (1u << 22) - 1;
  d.max_mr = 1u << 20;
  d.max_pd = 1u << 16;
  d.max_qp_rd_atom = 16;
  d.max_qp_init_rd_atom = 16;
  d.max_srq = 1u << 16;
  d.max_srq_wr = (1u << 14) - 1;
  d.max_srq_sge = 31;
  d.max_ah = 1u << 20;
  d.max_mcast_grp = kMaxMcastGroups;  // hca/mcast_groups.h
  d.max_mcast_qp_attach = kMaxMcastQpAttach;
  d.max_inline_data = 956;    // 1 KiB WQE - 16 ctrl - 48 datagram - 4 inline header
  d.max_msg_sz = kMaxMsgBytes;
  d.num_comp_vectors = 4;
  d.num_uars = 64;
  d.max_pkeys = hwif::kPkeyTableLen;
  d.local_ca_ack_delay = 16;
  d.phys_port_cnt = 1;
  d.atomic_hca = true;

  hwif::PortCaps& p = c.port;
  p.state = hwif::PortState::kActive;
  p.link_layer = hwif::LinkLayer::kInfiniBand;
  p.max_mtu = hwif::Mtu::k4096;
  p.active_mtu = hwif::Mtu::k4096;
  p.lid = static_cast<uint16_t>(index + 1);
  p.sm_lid = 1;
  p.lmc = 0;
  p.active_width = 2;   // 4x (IBV_WIDTH_4X)
  p.active_speed = 32;  // EDR (IBV_SPEED_EDR)
  p.phys_state = 5;     // LinkUp
  p.port_cap_flags = kPortCapFlags;
  p.max_msg_sz = kMaxMsgBytes;
  // GID 0: the link-local prefix fe80::/64 with the port GUID as interface id (IBA 4.1.1).
  auto& gid = p.gids[0].raw;
  gid[0] = 0xfe;
  gid[1] = 0x80;
  for (int i = 0; i < 8; ++i) gid[8 + i] = static_cast<uint8_t>(guid >> (56 - 8 * i));
  p.pkeys[0] = kDefaultPkey;
  return c;
}

hwif::Mtu roce_active_mtu(uint32_t netdev_mtu_bytes) {
  // The header room iboe_get_mtu() subtracts (include/rdma/ib_addr.h): GRH 40, UDP 8, BTH 12,
  // XRC ETH 4, AtomicETH 28, ICRC 4.
  constexpr uint32_t kRoceHeaderRoomBytes = 40 + 8 + 12 + 4 + 28 + 4;
  const uint32_t room = netdev_mtu_bytes > kRoceHeaderRoomBytes ? netdev_mtu_bytes - kRoceHeaderRoomBytes : 0;
  for (hwif::Mtu m : {hwif::Mtu::k4096, hwif::Mtu::k2048, hwif::Mtu::k1024, hwif::Mtu::k512}) {
    if (room >= hwif::mtu_bytes(m)) return m;
  }
  return hwif::Mtu::k256;
}

void use_ethernet_link(DeviceConfig& config, uint32_t ipv4, uint32_t netdev_mtu_bytes, uint16_t roce_udp_port) {
  hwif::PortCaps& p = config.port;
  p.link_layer = hwif::LinkLayer::kEthernet;
  p.lid = 0;
  p.sm_lid = 0;
  p.lmc = 0;
  p.active_mtu = roce_active_mtu(netdev_mtu_bytes);
  p.gids = {};
  p.gids[0].raw = fabric::ipv4_mapped_gid(ipv4);
  config.ipv4 = ipv4;
  config.roce_udp_port = roce_udp_port;
}

}  // namespace softhca::hca
