#include "hca/send_wqe.h"

#include <bit>
#include <cstring>

#include "base/endian.h"
#include "base/units.h"

namespace softhca::hca {

using namespace hwif;

void copy_from_ring(std::span<const uint8_t> ring, uint32_t offset, uint8_t* dst, uint32_t len) {
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

// Reads 16-byte segments one after another, wrapping at the end of the ring.
class SegmentCursor {
 public:
  SegmentCursor(std::span<const uint8_t> ring, uint32_t byte_offset) : ring_(ring), off_(byte_offset) {}
  template <class T>
  T take() {
    T t;
    // Segments wrap only at the ring's end: the usual case is one fixed-size copy, inlined.
    if (off_ + sizeof(T) <= ring_.size()) {
      std::memcpy(&t, ring_.data() + off_, sizeof(T));
    } else {
      copy_from_ring(ring_, off_, reinterpret_cast<uint8_t*>(&t), sizeof(T));
    }
    off_ += static_cast<uint32_t>(sizeof(T));
    if (off_ >= ring_.size()) off_ -= static_cast<uint32_t>(ring_.size());
    return t;
  }
  [[nodiscard]] uint32_t offset() const { return off_; }

 private:
  std::span<const uint8_t> ring_;
  uint32_t off_;
};

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

WqeParse parse_send_wqe(std::span<const uint8_t> ring, uint32_t bb, bool is_ud, SendWqe& out) {
  const auto ring_bbs = static_cast<uint32_t>(ring.size() / kSendWqeBbBytes);
  SegmentCursor cur(ring, wrap(bb, ring_bbs) * kSendWqeBbBytes);
  const auto ctrl = cur.take<CtrlSeg>();
  // Every field but the SGE slots starts afresh (num_sge says which slots are live): a record is
  // reused per WQE and clearing all 60 slots each time is most of the cost of a small WQE.
  out.remote_addr = 0;
  out.rkey = 0;
  out.swap_add = 0;
  out.compare = 0;
  out.ud = UdAddress{};
  out.inline_offset = 0;
  out.num_sge = 0;
  out.length = 0;
  out.is_inline = false;
  out.bbs = 1;
  out.signaled = out.solicited = out.fence = false;
  out.imm = 0;
  out.opcode = ctrl.opcode();
  out.wqe_index = ctrl.wqe_index();
  const uint32_t ds = ctrl.ds();
  if (ds == 0 || ds * kDsBytes > kMaxWqeBbs * kSendWqeBbBytes) return WqeParse::kBadSize;
  out.bbs = wqe_bbs(ds);
  if (!known_opcode(out.opcode)) return WqeParse::kBadOpcode;
  out.signaled = ctrl.fm_ce_se & kCtrlCqUpdate;
  out.solicited = ctrl.fm_ce_se & kCtrlSolicited;
  out.fence = ctrl.fm_ce_se & kCtrlFence;
  out.imm = std::bit_cast<uint32_t>(ctrl.imm);  // raw wire bytes, as verbs carry imm_data
  out.num_sge = 0;
  out.length = 0;
  out.is_inline = false;
  uint32_t used = 1;  // 16-byte units consumed so far

  if (is_ud) {
    if (used + 3 > ds) return WqeParse::kBadSegment;
    decode_datagram(cur.take<DatagramSeg>(), out.ud);
    used += 3;
  }
  const bool rdma = out.is_write() || out.is_read() || out.is_atomic();
  if (rdma && !is_ud) {
    if (used + 1 > ds) return WqeParse::kBadSegment;
    const auto r = cur.take<RaddrSeg>();
    out.remote_addr = r.raddr.get();
    out.rkey = r.rkey.get();
    ++used;
  }
  if (out.is_atomic()) {
    if (used + 1 > ds) return WqeParse::kBadSegment;
    const auto a = cur.take<AtomicSeg>();
    out.swap_add = a.swap_add.get();
    out.compare = a.compare.get();
    ++used;
  }
  // The rest: one inline segment, or data segments.
  while (used < ds) {
    const uint32_t seg_off = cur.offset();
    const auto first_word = cur.take<Be32>().get();
    if (first_word & kInlineSegFlag) {
      const uint32_t len = first_word & ~kInlineSegFlag;
      const uint32_t units = (len + 4 + kDsBytes - 1) / kDsBytes;
      if (used + units > ds || out.num_sge != 0) return WqeParse::kBadSegment;
      out.is_inline = true;
      out.inline_offset = wrap(seg_off + 4, static_cast<uint32_t>(ring.size()));
      out.length = len;
      used += units;
      break;
    }
    SegmentCursor data(ring, seg_off);
    const auto d = data.take<DataSeg>();
    if (out.num_sge == kMaxSendSges) return WqeParse::kBadSegment;
    Sge& s = out.sge[out.num_sge++];
    s.length = d.byte_count.get();
    s.lkey = d.lkey.get();
    s.addr = d.addr.get();
    out.length += s.length;
    cur = data;
    ++used;
  }
  if (out.is_atomic()) out.length = 8;
  return WqeParse::kOk;
}

}  // namespace softhca::hca
