#include "hca/send_wqe.h"

#include <array>
#include <bit>
#include <cstring>

#include "base/endian.h"
#include "base/units.h"
#include "hwif/wqe.h"

namespace softhca::hca {

using namespace hwif;

void copy_wrapped(std::span<const uint8_t> ring, uint32_t offset, uint8_t* dst, uint32_t len) {
  const auto size = static_cast<uint32_t>(ring.size());
  if (offset >= size) offset %= size;  // a division only when it is needed: this is per segment
  if (len <= size - offset) {
    std::memcpy(dst, ring.data() + offset, len);
    return;
  }
  const uint32_t first = size - offset;
  std::memcpy(dst, ring.data() + offset, first);
  std::memcpy(dst + first, ring.data(), len - first);
}

namespace {

// x mod n, per WQE: a mask for the power-of-two rings a QP has, a division only for other sizes.
uint32_t wrap(uint32_t x, uint32_t n) { return is_power_of_two(n) ? x & (n - 1) : x % n; }

bool known_opcode(WqeOpcode op) {
  switch (op) {
    case WqeOpcode::kNop:
    case WqeOpcode::kRdmaWrite:
    case WqeOpcode::kRdmaWriteImm:
    case WqeOpcode::kSend:
    case WqeOpcode::kSendImm:
    case WqeOpcode::kRdmaRead:
    case WqeOpcode::kAtomicCs:
    case WqeOpcode::kAtomicFa:
    case WqeOpcode::kSendInv:
    case WqeOpcode::kBindMw:
    case WqeOpcode::kLocalInv:
      return true;
    default:
      return false;
  }
}

void decode_datagram(const DatagramSeg& d, UdAddress& ud) {
  ud.qkey = d.qkey.get();
  ud.dest_qpn = d.dqp_dct.get() & 0xffffff;
  ud.sl = d.stat_rate_sl & 0x0f;
  ud.dlid = d.rlid.get();
  const uint32_t g = d.grh_gid_fl.get();
  ud.has_grh = (g >> 30) & 1;
  ud.sgid_index = static_cast<uint8_t>((g >> 20) & 0xff);
  ud.flow_label = g & 0xfffff;
  ud.traffic_class = d.tclass;
  ud.hop_limit = d.hop_limit;
  std::memcpy(ud.dgid.raw.data(), d.rgid, 16);
}

}  // namespace

WqeParse parse_send_wqe(std::span<const uint8_t> ring, uint32_t bb, WqeShape shape, SendWqe& out) {
  const bool is_ud = shape == WqeShape::kDatagram;
  const auto ring_bytes = static_cast<uint32_t>(ring.size());
  const uint32_t start = wrap(bb, ring_bytes / kSendWqeBbBytes) * kSendWqeBbBytes;
  // The control segment never wraps: it opens a basic block.
  const auto ctrl = load_as<CtrlSeg>(ring.data() + start);
  // Every field but the SGE slots starts afresh (num_sge says which slots are live): a record is
  // reused per WQE and clearing all 60 slots each time is most of the cost of a small WQE.
  out.remote_addr = 0;
  out.rkey = 0;
  out.swap_add = 0;
  out.compare = 0;
  if (is_ud) out.ud = UdAddress{};
  out.inline_offset = 0;
  out.num_sge = 0;
  out.xrc_srqn = 0;
  out.length = 0;
  out.is_inline = false;
  out.bbs = 1;
  out.opcode = ctrl.opcode();
  out.wqe_index = ctrl.wqe_index();
  out.signaled = ctrl.fm_ce_se & kCtrlCqUpdate;
  out.solicited = ctrl.fm_ce_se & kCtrlSolicited;
  out.fence = ctrl.fm_ce_se & kCtrlFence;
  out.imm = std::bit_cast<uint32_t>(ctrl.imm);  // raw wire bytes, as verbs carry imm_data
  const uint32_t ds = ctrl.ds();
  if (ds == 0 || ds * kDsBytes > kMaxWqeBbs * kSendWqeBbBytes) return WqeParse::kBadSize;
  out.bbs = wqe_bbs(ds);
  if (!known_opcode(out.opcode)) return WqeParse::kBadOpcode;

  // The segments, read from one contiguous piece: the ring itself, or, for the one WQE in a lap
  // that wraps at the ring's end, a copy of it.
  const uint32_t bytes = ds * kDsBytes;
  if (bytes > ring_bytes) return WqeParse::kBadSize;  // a WQE larger than the whole ring (a hostile ds)
  std::array<uint8_t, kMaxWqeBbs * kSendWqeBbBytes> unwrapped;
  const uint8_t* wqe = ring.data() + start;
  if (bytes > ring_bytes - start) {
    copy_wrapped(ring, start, unwrapped.data(), bytes);
    wqe = unwrapped.data();
  }
  uint32_t used = 1;  // 16-byte units consumed so far
  if (is_ud) {
    if (used + 3 > ds) return WqeParse::kBadSegment;
    decode_datagram(load_as<DatagramSeg>(wqe + used * kDsBytes), out.ud);
    used += 3;
  }
  if (shape == WqeShape::kXrc) {
    if (used + 1 > ds) return WqeParse::kBadSegment;
    out.xrc_srqn = load_as<XrcSeg>(wqe + used * kDsBytes).xrc_srqn.get() & 0xffffff;
    ++used;
  }
  if ((out.is_write() || out.is_read() || out.is_atomic()) && !is_ud) {
    if (used + 1 > ds) return WqeParse::kBadSegment;
    const auto r = load_as<RaddrSeg>(wqe + used * kDsBytes);
    out.remote_addr = r.raddr.get();
    out.rkey = r.rkey.get();
    ++used;
  }
  if (out.opcode == WqeOpcode::kBindMw) {
    if (used + 2 > ds) return WqeParse::kBadSegment;
    const auto b = load_as<BindSeg>(wqe + used * kDsBytes);
    out.bind = BindInfo{b.mw_key.get(), b.new_key.get(), b.mr_lkey.get(), b.access.get(), b.addr.get(), b.length.get()};
    used += 2;
  }
  if (out.is_memory_op()) return used == ds ? WqeParse::kOk : WqeParse::kBadSegment;  // no data
  if (out.is_atomic()) {
    if (used + 1 > ds) return WqeParse::kBadSegment;
    const auto a = load_as<AtomicSeg>(wqe + used * kDsBytes);
    out.swap_add = a.swap_add.get();
    out.compare = a.compare.get();
    ++used;
  }
  // The rest: one inline segment, or data segments.
  while (used < ds) {
    const uint32_t first_word = load_as<Be32>(wqe + used * kDsBytes).get();
    if (first_word & kInlineSegFlag) {
      const uint32_t len = first_word & ~kInlineSegFlag;
      const uint32_t units = (len + 4 + kDsBytes - 1) / kDsBytes;
      if (used + units > ds || out.num_sge != 0) return WqeParse::kBadSegment;
      out.is_inline = true;
      out.inline_offset = wrap(start + used * kDsBytes + 4, ring_bytes);
      out.length = len;
      break;
    }
    const auto d = load_as<DataSeg>(wqe + used * kDsBytes);
    if (out.num_sge == kMaxSendSges) return WqeParse::kBadSegment;
    Sge& s = out.sge[out.num_sge++];
    s.length = d.byte_count.get();
    s.lkey = d.lkey.get();
    s.addr = d.addr.get();
    out.length += s.length;
    ++used;
  }
  if (out.is_atomic()) out.length = 8;
  return WqeParse::kOk;
}

}  // namespace softhca::hca
