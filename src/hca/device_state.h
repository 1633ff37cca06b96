// The device's state as it lies in its region (docs/live-mode.md, "Hosts, fabrics, devices"): a
// header with the counters, the object tables' bookkeeping and the heap's, then the tables' slot
// arrays, then the device memory window (device_memory.h), then the heap that holds the objects and
// the per-QP arrays. Offsets only, so any process
// may map the region at any address.
//
// Table capacities follow DeviceConfig caps: PDs max_pd, memory keys max_mr, CQs max_cq, SRQs
// max_srq, QPs max_qp, EQs kMaxEqs, XRC domains kMaxXrcds. Each costs 16 bytes of slot array per entry whether used or
// not (the default caps: about 21 MiB, touched only as slots are first used); objects and per-QP
// arrays come from the heap, so the region's size beyond the slot arrays decides how many objects
// and how large send queues fit (ENOMEM from the command when it is full).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "hca/device_config.h"
#include "hca/device_memory.h"
#include "hca/device_stats.h"
#include "hca/mad_agents.h"
#include "hca/mcast_groups.h"
#include "hca/memory_keys.h"
#include "hca/object_table.h"
#include "hca/region_heap.h"

namespace softhca::hca {

// A device's QPNs are a run from a first QPN drawn from its seed in [kFirstQpn, kQpnLimit -
// max_qp]: 0 and 1 are the special QPs (IBA 3.5.5), and a QPN is 24 bits (BTH DestQP, IBA 9.2).
inline constexpr uint32_t kFirstQpn = 0x10;
inline constexpr uint32_t kQpnLimit = 1u << 24;
inline constexpr uint32_t kFirstNumber = 1;  // 0 is never a valid object number
inline constexpr uint32_t kMaxEqs = 1024;
inline constexpr uint32_t kMaxXrcds = 1u << 12;  // XRC domains of a host (mlx5 reports max_xrcds 2^24)
// The least heap a region must have beyond its slot arrays: a handful of objects and QPs.
inline constexpr uint64_t kMinHeapBytes = uint64_t{1} << 20;
// Banks of packet counters: each process of a host counts into bank (its slot mod this), so two
// processes working one after the other do not pass the counters' lines between cores on every
// message; the device's counts are the sum of the banks (DeviceState::total_stats()).
inline constexpr uint32_t kStatsBanks = 8;

struct DeviceState {
  static constexpr uint64_t kMagic = 0x31'41'43'48'54'46'4f'53ull;  // "SOFTHCA1", little-endian
  // 2: per-QP counters; 3: hot counters on lines of their own; 4: send records with their SGE slots
  // last; 5: a send record's first SGE in its first 128 bytes, the UD address after the SGE slots;
  // 6: the bad_source drop counter; 7: key variants and indexes drawn from the seed (MemoryKeysState);
  // 8: QP1's MAD agents and bound services (MadState), the no_mad_agent drop counter; 9: connections
  // tracked for their DREQ, multicast groups (McastState); 10: async events (EQ consumer index and
  // held events, objects' async EQs, the port_down byte, the port_down drop counter); 11: CQ
  // timestamps and moderation; 12: XRC domains, XRC SRQs and TGT QPs; 13: a CQ's pi at its last
  // completion event (CompletionQueue::event_pi); 14: device memory (DeviceMemoryState, a memory
  // key's dmn); 15: memory windows (a memory key's kind, MR, QP and window count)
  static constexpr uint32_t kVersion = 16;

  uint64_t magic = 0;
  uint32_t version = 0;
  uint32_t reserved = 0;
  uint64_t region_bytes = 0;  // the size it was formatted for
  // The port's link layer and, on Ethernet, its IPv4 address and RoCE UDP port: every process of
  // a host must run the device on the same wire (checked at attach).
  uint8_t link_layer = 0;     // hwif::LinkLayer
  uint8_t port_down = 0;      // set down by SetPortStateIn (hwif/cmd.h): no packets in or out
  uint16_t roce_udp_port = 0;
  uint32_t ipv4 = 0;
  std::array<DeviceStats, kStatsBanks> stats{};
  alignas(64) TableState pds{};
  TableState eqs{};
  TableState cqs{};
  TableState srqs{};
  TableState qps{};
  MemoryKeysState mkeys{};
  HeapState heap{};
  MadState mad{};
  McastState mcast{};
  TableState xrcds{};
  DeviceMemoryState dm{};

  [[nodiscard]] DeviceStats total_stats() const {
    DeviceStats sum;
    for (const DeviceStats& bank : stats) sum += bank;
    return sum;
  }
};
static_assert(std::is_trivially_copyable_v<DeviceState> && std::is_standard_layout_v<DeviceState>);

// Header plus slot arrays for `config`: what a region holds before any object.
[[nodiscard]] uint64_t region_layout_bytes(const DeviceConfig& config);

// Formats (kFormat) or checks (kAttach) the region and returns its state. Throws
// std::invalid_argument for a region that is too small, misaligned, not formatted, or formatted
// for other capacities (or capacities no 24-bit number fits) or another link (link layer, IPv4 address, RoCE port) than `config` gives;
// the message of a link mismatch names both links.
DeviceState& open_region(const DeviceRegion& region, RegionInit init, const DeviceConfig& config);

// A region in this process's private memory (the single-process device): mapped lazily, so the
// pages of unused slots and heap cost nothing.
class PrivateRegion {
 public:
  PrivateRegion() = default;
  explicit PrivateRegion(size_t bytes);  // throws std::bad_alloc
  ~PrivateRegion();
  PrivateRegion(PrivateRegion&& other) noexcept;
  PrivateRegion& operator=(PrivateRegion&&) = delete;
  PrivateRegion(const PrivateRegion&) = delete;
  PrivateRegion& operator=(const PrivateRegion&) = delete;

  [[nodiscard]] DeviceRegion region() const { return region_; }

 private:
  DeviceRegion region_{};
};

}  // namespace softhca::hca
