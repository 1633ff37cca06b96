// The "prepare" stage of the send pipeline: a fetched WQE (bytes in the QP's shadow of its send
// ring) decoded into what the transport needs. Inline payload stays in the shadow ring and is
// read from there (it may wrap). Sizes in bytes; WQE positions in 64-byte basic blocks.
#pragma once
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <span>

#include "base/copy.h"
#include "hwif/caps.h"
#include "hwif/cmd.h"
#include "hwif/wqe.h"

namespace softhca::hca {

inline constexpr uint32_t kMaxSendSges = 60;  // a 1 KiB WQE holds at most 63 16-byte segments

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

struct UdAddress {
  uint32_t dest_qpn = 0;
  uint32_t qkey = 0;
  uint16_t dlid = 0;
  uint8_t sl = 0;
  bool has_grh = false;
  uint8_t sgid_index = 0;
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint32_t flow_label = 0;
  hwif::Gid dgid{};
};

// A bind WQE's BindSeg (hwif/wqe.h), decoded.
struct BindInfo {
  uint32_t mw_key = 0;
  uint32_t new_key = 0;
  uint32_t mr_lkey = 0;
  uint32_t access = 0;  // MkeyAccess bits
  uint64_t addr = 0;
  uint64_t length = 0;
};

enum class WqeParse : uint8_t { kOk, kBadOpcode, kBadSize, kBadSegment };

// Laid out for a small WQE to touch the fewest cache lines of its record (a SendRecord puts 32
// bytes before it): what every WQE has, then the SGE slots, of which a one-SGE WQE uses the
// first (within the record's first 128 bytes), then the datagram address only UD WQEs have.
struct SendWqe {
  hwif::WqeOpcode opcode = hwif::WqeOpcode::kNop;
  uint16_t wqe_index = 0;  // position in basic blocks (16-bit counter)
  uint32_t bbs = 1;        // basic blocks the WQE occupies
  bool signaled = false;
  bool solicited = false;
  bool fence = false;
  bool is_inline = false;
  uint32_t imm = 0;        // raw network-order immediate
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t inline_offset = 0;  // byte offset of the inline data in the shadow ring
  uint32_t num_sge = 0;
  uint32_t xrc_srqn = 0;  // an XRC INI QP's WQEs: the remote SRQ (XrcSeg)
  uint64_t length = 0;  // total payload bytes (or the atomic operand size, 8)
  uint64_t swap_add = 0;
  uint64_t compare = 0;
  std::array<Sge, kMaxSendSges> sge{};
  UdAddress ud{};  // a UD QP's WQEs only (parse_send_wqe() leaves it alone for the others)
  BindInfo bind{};  // kBindMw only

  // The key a kLocalInv or kSendInv WQE invalidates (carried big-endian where imm is).
  [[nodiscard]] uint32_t invalidate_key() const { return std::bit_cast<Be32>(imm).get(); }
  // Executed by the device on its own: no packet (bind, local invalidate).
  [[nodiscard]] bool is_memory_op() const {
    return opcode == hwif::WqeOpcode::kBindMw || opcode == hwif::WqeOpcode::kLocalInv;
  }

  [[nodiscard]] bool is_read() const { return opcode == hwif::WqeOpcode::kRdmaRead; }
  [[nodiscard]] bool is_atomic() const {
    return opcode == hwif::WqeOpcode::kAtomicCs || opcode == hwif::WqeOpcode::kAtomicFa;
  }
  [[nodiscard]] bool has_imm() const {
    return opcode == hwif::WqeOpcode::kSendImm || opcode == hwif::WqeOpcode::kRdmaWriteImm;
  }
  [[nodiscard]] bool is_send() const {
    return opcode == hwif::WqeOpcode::kSend || opcode == hwif::WqeOpcode::kSendImm ||
           opcode == hwif::WqeOpcode::kSendInv;
  }
  [[nodiscard]] bool is_write() const {
    return opcode == hwif::WqeOpcode::kRdmaWrite || opcode == hwif::WqeOpcode::kRdmaWriteImm;
  }
};

// What follows a send WQE's control segment on a QP of some type: a datagram segment (UD), an
// XRC segment (XRC INI), or neither (RC, UC).
enum class WqeShape : uint8_t { kConnected, kDatagram, kXrc };
constexpr WqeShape wqe_shape(hwif::QpType t) {
  return t == hwif::QpType::kUd ? WqeShape::kDatagram : t == hwif::QpType::kXrcIni ? WqeShape::kXrc : WqeShape::kConnected;
}

// Decodes the WQE that starts at basic block `bb` of a ring of 2^log_bbs blocks held in `ring`.
// `shape` selects the segment after the control segment. Every field of `out` is set (also on
// failure) except the SGE slots at and beyond out.num_sge, which are left as they were, and `ud`
// unless the shape is kDatagram.
WqeParse parse_send_wqe(std::span<const uint8_t> ring, uint32_t bb, WqeShape shape, SendWqe& out);
inline WqeParse parse_send_wqe(std::span<const uint8_t> ring, uint32_t bb, bool is_ud, SendWqe& out) {
  return parse_send_wqe(ring, bb, is_ud ? WqeShape::kDatagram : WqeShape::kConnected, out);
}

// Number of basic blocks of a WQE whose control segment says ds 16-byte units.
constexpr uint32_t wqe_bbs(uint32_t ds) { return (ds * hwif::kDsBytes + hwif::kSendWqeBbBytes - 1) / hwif::kSendWqeBbBytes; }

// The common shape of a small RDMA WRITE on a connected QP: control segment, remote address, then
// either one inline segment of at least one byte or exactly one data segment, the whole WQE
// before the ring's end. `start`: the byte offset in `ring` of the WQE's first basic block. For a
// WQE of that shape, decodes it into `out` exactly as parse_send_wqe(ring, bb, false, out) would
// (every field parse_send_wqe() sets, and sge[0] for a data segment; not `ud`) and returns true; returns
// false for any other WQE, leaving `out` partly written: parse_send_wqe() then decides what it is.
// The send pipeline's run of small WRITEs decodes with it (send_pipeline.cc).
inline bool decode_plain_write(std::span<const uint8_t> ring, uint32_t start, SendWqe& out) {
  using namespace hwif;
  const uint8_t* wqe = ring.data() + start;
  const auto ctrl = load_as<CtrlSeg>(wqe);
  const uint32_t ds = ctrl.ds();
  if (ctrl.opcode() != WqeOpcode::kRdmaWrite || ds < 3 || ds * kDsBytes > ring.size() - start) return false;
  const uint32_t first_word = load_as<Be32>(wqe + 2 * kDsBytes).get();
  const uint32_t inline_len = first_word & ~kInlineSegFlag;
  const bool is_inline = first_word & kInlineSegFlag;
  if (is_inline ? inline_len == 0 || 2 + (inline_len + 4 + kDsBytes - 1) / kDsBytes > ds : ds != 3) return false;
  const auto r = load_as<RaddrSeg>(wqe + kDsBytes);
  out.opcode = WqeOpcode::kRdmaWrite;
  out.wqe_index = ctrl.wqe_index();
  out.bbs = wqe_bbs(ds);
  out.signaled = ctrl.fm_ce_se & kCtrlCqUpdate;
  out.solicited = ctrl.fm_ce_se & kCtrlSolicited;
  out.fence = ctrl.fm_ce_se & kCtrlFence;
  out.imm = std::bit_cast<uint32_t>(ctrl.imm);
  out.remote_addr = r.raddr.get();
  out.rkey = r.rkey.get();
  out.swap_add = 0;
  out.compare = 0;
  out.xrc_srqn = 0;
  out.is_inline = is_inline;
  if (is_inline) {
    out.inline_offset = start + 2 * kDsBytes + 4;
    out.num_sge = 0;
    out.length = inline_len;
    return true;
  }
  const auto d = load_as<DataSeg>(wqe + 2 * kDsBytes);
  out.inline_offset = 0;
  out.num_sge = 1;
  out.sge[0] = Sge{d.addr.get(), first_word, d.lkey.get()};
  out.length = first_word;
  return true;
}

// Copies len bytes starting at byte `offset` of the ring (wrapping) into dst.
void copy_wrapped(std::span<const uint8_t> ring, uint32_t offset, uint8_t* dst, uint32_t len);
inline void copy_from_ring(std::span<const uint8_t> ring, uint32_t offset, uint8_t* dst, uint32_t len) {
  if (offset >= ring.size() || len > ring.size() - offset) return copy_wrapped(ring, offset, dst, len);
  move_bytes(dst, ring.data() + offset, len);
}
// copy_from_ring() as a payload's placement (place_bytes): the last byte is stored last.
inline void place_from_ring(std::span<const uint8_t> ring, uint32_t offset, uint8_t* dst, uint32_t len) {
  if (offset >= ring.size() || len > ring.size() - offset) {
    if (len == 0) return;
    copy_wrapped(ring, offset, dst, len - 1);
    const size_t last = (size_t{offset} + len - 1) % ring.size();
    std::atomic_ref<uint8_t>(dst[len - 1]).store(ring[last], std::memory_order_release);
    return;
  }
  place_bytes(dst, ring.data() + offset, len);
}

}  // namespace softhca::hca
