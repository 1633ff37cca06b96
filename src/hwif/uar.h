// The device BAR as the driver sees it: page 0 is the initialization segment, pages 1..N are UAR
// pages (then, at 1 GiB, the device memory window), each with a CQ doorbell, an EQ doorbell and four bfregs (send doorbell + two alternating BlueFlame buffers).
// Geometry follows mlx5 (../shared/reference/verbs-abi.md §6.1 "UAR / BlueFlame geometry").
#pragma once
#include <cstdint>

namespace softhca::hwif {

inline constexpr uint64_t kUarPageBytes = 4096;       // MLX5_ADAPTER_PAGE_SIZE
inline constexpr uint64_t kInitSegBytes = kUarPageBytes;
inline constexpr uint64_t kCqDoorbellOffset = 0x20;   // MLX5_CQ_DOORBELL: 8-byte arm doorbell
// EQ doorbell: the driver publishes an EQ's consumer index (two big-endian words: high = consumer
// index, free-running; low = EQN), so the device never writes over an EQE not yet taken.
inline constexpr uint64_t kEqDoorbellOffset = 0x40;   // MLX5_EQ_DOORBEL_OFFSET (update, no arm)
inline constexpr uint64_t kBfOffset = 0x800;          // MLX5_BF_OFFSET: first bfreg
inline constexpr uint32_t kBfregsPerUar = 4;          // NUM_BFREGS_PER_UAR
inline constexpr uint64_t kBfRegBytes = 512;          // 1 << log_bf_reg_size, typical (unverified)
inline constexpr uint64_t kBfBufBytes = kBfRegBytes / 2;  // each of the two alternating halves
inline constexpr uint64_t kDoorbellBytes = 8;         // mmio_write64_be
inline constexpr uint64_t kWriteCombineBytes = 64;    // BlueFlame copies 64-byte chunks (K2)

inline constexpr uint64_t uar_page_offset(uint32_t uar_index) { return kInitSegBytes + uar_index * kUarPageBytes; }
// Device memory (ibv_alloc_dm) is a window of the BAR after every UAR page, as mlx5's MEMIC is
// (memic_bar_start_addr): an allocation's bytes are at kDeviceMemoryBarOffset + its offset.
inline constexpr uint64_t kDeviceMemoryBarOffset = uint64_t{1} << 30;
// bfreg k of a UAR page; bfreg 0 carries doorbells only (no BlueFlame, no alternation).
inline constexpr uint64_t bfreg_offset(uint32_t bfreg) { return kBfOffset + bfreg * kBfRegBytes; }

// CQ arm doorbell value (two big-endian words): high = sn<<28 | cmd | ci, low = cqn.
inline constexpr uint32_t kCqArmSolicited = 1u << 24;  // MLX5_CQ_DB_REQ_NOT_SOL; 0 = any completion
inline constexpr uint32_t kCqIndexMask = 0xffffff;     // ci: the consumer index, 24 bits

}  // namespace softhca::hwif
