// Ring helpers of the data path: where a send WQE's segments go (wrapping at the ring end), how
// inline data is copied, how a batch of WQEs is published and rung (doorbell record, then either
// BlueFlame or one 8-byte doorbell), and the receive-side segment writers. Shared by post_send,
// the ibv_wr_* builders and post_recv/post_srq_recv. verbs-abi.md §6.1, §6.2.
//
// Locks: every function here that touches a SendQueue runs under SendQueue::lock; the receive
// writers run under the RQ or SRQ lock. Nothing here allocates or logs.
// Memory order: WQE bytes are plain stores; publish_wqes() stores the SQ doorbell record with
// release ordering, which makes every WQE byte written before it visible to whoever reads the
// record with acquire; the doorbell MMIO write is issued after it (the device reads WQEs only
// after it sees the doorbell, and the MMIO path itself hands the bytes over in program order).
// No standalone fence: a release store is enough, and TSan does not model fences.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "base/copy.h"
#include "base/endian.h"
#include "driver/objects.h"
#include "hwif/uar.h"
#include "hwif/wqe.h"
#include "pcie/tlp.h"

namespace softhca::driver {

// ---- send ring ---------------------------------------------------------------------------------

inline uint8_t* sq_wqe(const SendQueue& sq, uint32_t bb_index) {
  return sq.buf.data() + static_cast<size_t>(bb_index & (sq.wqe_cnt - 1)) * hwif::kSendWqeBbBytes;
}
// A send ring's bounds, taken once per WQE or post: WQE bytes are stored through byte pointers,
// after which the compiler must reload every SendQueue field, so the bounds travel by value.
struct SqRing {
  uint8_t* begin;
  uint8_t* end;
};
inline SqRing sq_ring(const SendQueue& sq) {
  return {sq.buf.data(), sq.buf.data() + static_cast<size_t>(sq.wqe_cnt) * hwif::kSendWqeBbBytes};
}
// The segment slot after a segment of `bytes` (a multiple of 16) at p; continues at the ring start
// when it reaches the end. Segments never straddle the end because they are 16-byte units in a
// ring of 64-byte blocks.
inline uint8_t* sq_advance(SqRing r, uint8_t* p, uint32_t bytes) {
  p += bytes;
  return p >= r.end ? r.begin + (p - r.end) : p;
}

template <class Seg>
inline uint8_t* sq_put(SqRing r, uint8_t* p, const Seg& seg) {
  static_assert(sizeof(Seg) % hwif::kDsBytes == 0);
  store_as(p, seg);
  return sq_advance(r, p, sizeof(Seg));
}

inline hwif::RaddrSeg make_raddr(uint64_t raddr, uint32_t rkey) {
  hwif::RaddrSeg s{};
  s.raddr = raddr;
  s.rkey = rkey;
  return s;
}
inline hwif::AtomicSeg make_atomic(uint64_t swap_add, uint64_t compare) {
  hwif::AtomicSeg s{};
  s.swap_add = swap_add;
  s.compare = compare;
  return s;
}
// A send data segment holds 31 bits of length (hwif::kMaxDataSegBytes): a longer SGE, 2 GiB or
// more, is written as the longest one, so the device fails the WQE with a local length error
// (longer than max_msg_sz) instead of reading the length's top bit as an inline segment.
inline hwif::DataSeg make_data(uint32_t lkey, uint64_t addr, uint32_t len) {
  hwif::DataSeg s{};
  s.byte_count = len < hwif::kMaxDataSegBytes ? len : hwif::kMaxDataSegBytes;
  s.lkey = lkey;
  s.addr = addr;
  return s;
}
// A window bind (ibv_bind_mw, IBV_WR_BIND_MW): the window's key now and the one it takes; no MR
// and no length unbind a type 1 window. The rights are the verbs bits, which MkeyAccess shares.
constexpr bool same_access_bit(unsigned int verbs_bit, uint32_t mkey_bit) { return verbs_bit == mkey_bit; }
static_assert(same_access_bit(IBV_ACCESS_REMOTE_WRITE, hwif::kAccessRemoteWrite) &&
              same_access_bit(IBV_ACCESS_REMOTE_READ, hwif::kAccessRemoteRead) &&
              same_access_bit(IBV_ACCESS_REMOTE_ATOMIC, hwif::kAccessRemoteAtomic) &&
              same_access_bit(IBV_ACCESS_ZERO_BASED, hwif::kAccessZeroBased) &&
              same_access_bit(IBV_ACCESS_MW_BIND, hwif::kAccessMwBind));
inline hwif::BindSeg make_bind(const ibv_mw& mw, uint32_t new_rkey, const ibv_mw_bind_info& info) {
  hwif::BindSeg s{};
  s.mw_key = mw.rkey;
  s.new_key = new_rkey;
  s.mr_lkey = info.mr != nullptr ? info.mr->lkey : 0;
  s.access = info.mw_access_flags & (hwif::kAccessRemote | hwif::kAccessZeroBased);
  s.addr = info.addr;
  s.length = info.length;
  return s;
}
inline hwif::XrcSeg make_xrc(uint32_t remote_srqn) {
  hwif::XrcSeg s{};
  s.xrc_srqn = remote_srqn & 0xffffff;
  return s;
}
inline hwif::DatagramSeg make_datagram(const Ah& ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  hwif::DatagramSeg d = ah.av;
  d.qkey = remote_qkey;
  d.dqp_dct = (remote_qpn & 0xffffff) | hwif::kExtendedUdAv;
  return d;
}

// Copies len bytes into the ring at p, continuing at the ring start at the end. Returns the
// position after the copy.
inline uint8_t* sq_copy(SqRing r, uint8_t* p, const void* src, size_t len) {
  const auto* s = static_cast<const uint8_t*>(src);
  if (len == 0) return p;  // an empty piece may have no address at all
  const auto room = static_cast<size_t>(r.end - p);
  if (len < room) {  // the usual case: one piece, short of the ring's end
    move_bytes(p, s, len);
    return p + len;
  }
  move_bytes(p, s, room);
  move_bytes(r.begin, s + room, len - room);
  return r.begin + (len - room);
}

// Writes one inline segment at p (a 16-byte aligned slot): header, then the pieces produced by
// `for_each(copy)` back to back. total is their summed length (> 0). Returns its size in DS.
template <class ForEachPiece>
inline uint32_t sq_put_inline(SqRing r, uint8_t* p, uint32_t total, ForEachPiece&& for_each) {
  hwif::InlineHdr hdr{};
  hdr.byte_count = total | hwif::kInlineSegFlag;
  store_as(p, hdr);
  uint8_t* q = p + sizeof(hdr);  // a 16-byte slot: the header never reaches the ring end
  for_each([&](const void* src, size_t len) { q = sq_copy(r, q, src, len); });
  return static_cast<uint32_t>((sizeof(hdr) + total + hwif::kDsBytes - 1) / hwif::kDsBytes);
}

// The control segment's fm_ce_se flags for a WR's send_flags: IBV_SEND_FENCE, _SIGNALED and
// _SOLICITED are its three low bits, looked up rather than tested one by one. sig_all: the QP
// signals every WR.
inline uint8_t ctrl_flags(unsigned int send_flags, bool sig_all) {
  static_assert(IBV_SEND_FENCE == 1 && IBV_SEND_SIGNALED == 2 && IBV_SEND_SOLICITED == 4);
  static constexpr std::array<uint8_t, 8> kFlags = [] {
    std::array<uint8_t, 8> t{};
    for (unsigned i = 0; i < t.size(); ++i) {
      t[i] = static_cast<uint8_t>(((i & IBV_SEND_FENCE) ? hwif::kCtrlFence : 0) |
                                  ((i & IBV_SEND_SIGNALED) ? hwif::kCtrlCqUpdate : 0) |
                                  ((i & IBV_SEND_SOLICITED) ? hwif::kCtrlSolicited : 0));
    }
    return t;
  }();
  return static_cast<uint8_t>(kFlags[send_flags & 7] | (sig_all ? hwif::kCtrlCqUpdate : 0));
}

inline uint32_t ds_to_bbs(uint32_t ds) {
  return (ds * hwif::kDsBytes + hwif::kSendWqeBbBytes - 1) / hwif::kSendWqeBbBytes;
}

// Room for nreq more WRs? tail is stored by poll_cq (release); acquire pairs with it so that the
// retired WQEs' slots are free to overwrite.
inline bool sq_full(const SendQueue& sq, uint32_t nreq) {
  uint32_t used = sq.head + nreq - sq.tail.load(std::memory_order_acquire);
  return used >= sq.max_post;
}

// Stores a big-endian counter of a doorbell record with release ordering: everything written
// before (WQEs, CQE consumption) is visible to whoever reads the counter with acquire.
inline void store_dbrec(Be32& field, uint32_t value) {
  std::atomic_ref<Be32>(field).store(Be32(value), std::memory_order_release);
}

// Publishes the WQEs written so far: the SQ producer counter (in BBs), a release store
// (named barrier, STYLE.md 3).
inline void publish_wqes(const SendQueue& sq, hwif::QpDbRec& dbrec) { store_dbrec(dbrec.sq_counter, sq.cur_post & 0xffff); }

// Rings the SQ after nreq WQEs were written (verbs-abi.md §6.1 "Post list vs. BlueFlame"):
// updates the doorbell record, then writes either the whole single WQE through the BlueFlame
// buffer or the first 8 bytes of the last WQE's control segment as the doorbell, into the current
// half of bfreg 1 of the context's UAR page, and flips the half.
// last_idx/last_ds: the last WQE's BB index and size. inline_wqe: that WQE carries inline data.
inline void ring_send_doorbell(Qp& qp, uint32_t nreq, uint32_t last_idx, uint32_t last_ds, bool inline_wqe) {
  SendQueue& sq = qp.sq;
  Context& ctx = *qp.ctx;
  sq.head += nreq;
  publish_wqes(sq, *qp.dbrec);

  const uint64_t half = ctx.bf_half.fetch_xor(hwif::kBfBufBytes, std::memory_order_relaxed);
  const uint64_t bar_offset = hwif::uar_page_offset(ctx.link.uar_index) + hwif::bfreg_offset(1) + half;
  const uint32_t wqe_bytes = ds_to_bbs(last_ds) * hwif::kSendWqeBbBytes;
  const BlueFlameMode mode = ctx.link.blueflame;
  const bool blueflame = nreq == 1 && mode != BlueFlameMode::kOff && last_ds > 1 &&
                         wqe_bytes <= hwif::kBfBufBytes &&
                         (mode == BlueFlameMode::kPrefer || inline_wqe);
  if (blueflame) {
    // The WQE may wrap the ring: gather its BBs into one contiguous copy.
    alignas(64) uint8_t bf[hwif::kBfBufBytes];
    for (uint32_t off = 0; off < wqe_bytes; off += hwif::kSendWqeBbBytes) {
      std::memcpy(bf + off, sq_wqe(sq, last_idx + off / hwif::kSendWqeBbBytes), hwif::kSendWqeBbBytes);
    }
    ctx.link.host_port->write_combined(bar_offset, bf, wqe_bytes, pcie::TlpCause::kBlueFlame);
  } else {
    uint8_t db[hwif::kDoorbellBytes];
    std::memcpy(db, sq_wqe(sq, last_idx), sizeof(db));
    ctx.link.host_port->write_doorbell(bar_offset, db, pcie::TlpCause::kDoorbell);
  }
}

// ---- receive rings -----------------------------------------------------------------------------

// Writes the scatter list of a receive WQE at p (max_gs slots): non-empty SGEs, then a terminator
// when fewer than max_gs were written (verbs-abi.md §6.2).
inline void put_recv_sges(uint8_t* p, const ibv_sge* sg, int num_sge, uint32_t max_gs) {
  uint32_t j = 0;
  for (int i = 0; i < num_sge; ++i) {
    if (sg[i].length == 0) continue;
    store_as(p + j * sizeof(hwif::DataSeg), make_data(sg[i].lkey, sg[i].addr, sg[i].length));
    ++j;
  }
  if (j < max_gs) store_as(p + j * sizeof(hwif::DataSeg), make_data(hwif::kInvalidLkey, 0, 0));
}

inline uint8_t* srq_wqe(const Srq& srq, uint32_t idx) {
  return srq.buf.data() + (static_cast<size_t>(idx) << srq.log_stride);
}

}  // namespace softhca::driver
