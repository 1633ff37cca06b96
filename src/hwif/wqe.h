// Send and receive work-queue entries as the device reads them from host memory: mlx5-style
// 64-byte basic blocks made of 16-byte segments (../shared/reference/verbs-abi.md §6.1, §6.2).
// Everything is big-endian; reserved gaps are named by their byte offset.
#pragma once
#include <cstddef>
#include <cstdint>

#include "base/endian.h"

namespace softhca::hwif {

inline constexpr uint32_t kSendWqeBbBytes = 64;  // MLX5_SEND_WQE_BB, figures.md K2
inline constexpr uint32_t kDsBytes = 16;         // WQE size unit ("DS")
inline constexpr uint32_t kMaxWqeBbs = 16;       // MLX5_SEND_WQE_MAX_WQEBBS: WQEs up to 1 KiB
inline constexpr uint32_t kMaxDs = 63;           // qpn_ds keeps ds in 6 bits

enum class WqeOpcode : uint8_t {
  kNop = 0x00,
  kSendInv = 0x01,
  kRdmaWrite = 0x08,
  kRdmaWriteImm = 0x09,
  kSend = 0x0a,
  kSendImm = 0x0b,
  kRdmaRead = 0x10,
  kAtomicCs = 0x11,
  kAtomicFa = 0x12,
  // Memory-window operations (ours, not mlx5's UMR): executed by the device in send-queue order,
  // no packet. kBindMw carries a BindSeg; kLocalInv the key to invalidate in the control
  // segment's imm, as kSendInv does (big-endian).
  kBindMw = 0x25,
  kLocalInv = 0x27,
};

// fm_ce_se flags of the control segment.
inline constexpr uint8_t kCtrlSolicited = 0x02;
inline constexpr uint8_t kCtrlCqUpdate = 0x08;  // signaled: write a CQE for this WQE
inline constexpr uint8_t kCtrlFence = 0x80;

struct CtrlSeg {
  Be32 opmod_idx_opcode;  // opmod<<24 | wqe_index<<8 | opcode
  Be32 qpn_ds;            // qpn<<8 | ds (size in 16-byte units, ctrl included)
  uint8_t signature;
  uint8_t rsvd9[2];
  uint8_t fm_ce_se;
  Be32 imm;  // immediate data, already in network order as the application gave it

  [[nodiscard]] WqeOpcode opcode() const { return static_cast<WqeOpcode>(opmod_idx_opcode.get() & 0xff); }
  [[nodiscard]] uint16_t wqe_index() const { return static_cast<uint16_t>(opmod_idx_opcode.get() >> 8); }
  [[nodiscard]] uint32_t qpn() const { return qpn_ds.get() >> 8; }
  [[nodiscard]] uint32_t ds() const { return qpn_ds.get() & 0x3f; }
  void set(WqeOpcode op, uint16_t index, uint32_t qpn, uint32_t ds_count, uint8_t flags) {
    opmod_idx_opcode = (static_cast<uint32_t>(index) << 8) | static_cast<uint8_t>(op);
    qpn_ds = (qpn << 8) | (ds_count & 0x3f);
    signature = 0;
    rsvd9[0] = rsvd9[1] = 0;
    fm_ce_se = flags;
  }
};
static_assert(sizeof(CtrlSeg) == 16);
static_assert(offsetof(CtrlSeg, qpn_ds) == 4);
static_assert(offsetof(CtrlSeg, fm_ce_se) == 11);
static_assert(offsetof(CtrlSeg, imm) == 12);

struct RaddrSeg {
  Be64 raddr;
  Be32 rkey;
  Be32 rsvd12;
};
static_assert(sizeof(RaddrSeg) == 16);
static_assert(offsetof(RaddrSeg, rkey) == 8);

struct AtomicSeg {
  Be64 swap_add;  // CAS: the swap value; FA: the value to add
  Be64 compare;   // CAS only
};
static_assert(sizeof(AtomicSeg) == 16);

// A data segment's length has 31 bits: bit 31 of a segment's first word marks an inline segment
// (kInlineSegFlag), so a send WQE's data segment never carries it (kMaxDataSegBytes).
struct DataSeg {
  Be32 byte_count;
  Be32 lkey;
  Be64 addr;
};
static_assert(sizeof(DataSeg) == 16);
static_assert(offsetof(DataSeg, addr) == 8);

inline constexpr uint32_t kInlineSegFlag = 0x80000000;  // MLX5_INLINE_SEG
inline constexpr uint32_t kMaxDataSegBytes = kInlineSegFlag - 1;
inline constexpr uint32_t kInvalidLkey = 0x100;          // MLX5_INVALID_LKEY: RQ SGE terminator

// Header of an inline segment; the payload bytes follow it contiguously (and may wrap the ring).
struct InlineHdr {
  Be32 byte_count;  // length | kInlineSegFlag
};
static_assert(sizeof(InlineHdr) == 4);

// The segment after the control segment of every XRC INI send WQE (mlx5_wqe_xrc_seg): the SRQ
// of the target's XRC domain the message goes to (XRCETH, IBA 9.3).
struct XrcSeg {
  Be32 xrc_srqn;  // 24 bits
  uint8_t rsvd4[12];
};
static_assert(sizeof(XrcSeg) == 16);

// The segment after the control segment of a kBindMw WQE (ibv_bind_mw, IBV_WR_BIND_MW): the
// window by its key now, the key it takes (same index, the variant the application chose with
// ibv_inc_rkey), the MR it opens onto and the range and rights it grants. A type 1 window with
// mr_lkey 0 and length 0 is unbound.
struct BindSeg {
  Be32 mw_key;
  Be32 new_key;
  Be32 mr_lkey;
  Be32 access;  // MkeyAccess bits (cmd.h), kAccessZeroBased among them
  Be64 addr;
  Be64 length;
};
static_assert(sizeof(BindSeg) == 32);

// The address vector of a UD send (MLX5 datagram segment).
inline constexpr uint32_t kExtendedUdAv = 0x80000000;
struct DatagramSeg {
  Be32 qkey;
  uint8_t rsvd4[4];
  Be32 dqp_dct;  // remote QPN | kExtendedUdAv
  uint8_t stat_rate_sl;  // rate<<4 | sl
  uint8_t fl_mlid;       // src_path_bits & 0x7f
  Be16 rlid;
  uint8_t rsvd16[4];
  uint8_t rmac[6];
  uint8_t tclass;
  uint8_t hop_limit;
  Be32 grh_gid_fl;  // grh<<30 | sgid_index<<20 | flow_label
  uint8_t rgid[16];
};
static_assert(sizeof(DatagramSeg) == 48);
static_assert(offsetof(DatagramSeg, dqp_dct) == 8);
static_assert(offsetof(DatagramSeg, rlid) == 14);
static_assert(offsetof(DatagramSeg, rmac) == 20);
static_assert(offsetof(DatagramSeg, tclass) == 26);
static_assert(offsetof(DatagramSeg, grh_gid_fl) == 28);
static_assert(offsetof(DatagramSeg, rgid) == 32);

// SRQ WQEs start with a link to the next WQE of the SRQ's list (mlx5_wqe_srq_next_seg).
struct SrqNextSeg {
  uint8_t rsvd0[2];
  Be16 next_wqe_index;
  uint8_t rsvd4[12];
};
static_assert(sizeof(SrqNextSeg) == 16);

}  // namespace softhca::hwif
