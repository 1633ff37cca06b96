// libFuzzer target: bytes as send WQEs in the hwif format (src/hwif/wqe.h), two ways.
//  1. parse_send_wqe() alone, on a ring of 1..16 basic blocks, from any basic block: it must read
//     only the ring, and decode a WQE that wraps the ring's end exactly as the same WQE laid out
//     flat from the ring's start (the reference).
//  2. The same bytes as the send ring of a QP of a fresh Device that loops its packets back to
//     itself, rung by a doorbell or written by BlueFlame: the engine fetches, prepares, executes
//     (requester, responder, completer) and runs its timers for a bounded number of steps. It must
//     never touch memory outside what its memory keys allow: the data buffer sits at a fixed
//     address between inaccessible guard pages (so seeds can hold valid addresses), and the half
//     of it registered under another PD must stay as it was.
//
// Input: byte 0 flags (bit 0: parse as UD; bits 1-2: QP type RC/UC/UD of the device run; bit 3:
// BlueFlame instead of a doorbell), byte 1 log2 of the parse ring in basic blocks (mod 5),
// u16 first basic block, u16 doorbell producer index, then up to 1 KiB of ring bytes.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "fuzz_check.h"
#include "hca/send_wqe.h"
#include "wqe_bench.h"

namespace softhca::fuzz {
namespace {

// ---- 1: the parser against a flat layout of the same WQE ----------------------------------------

bool same_decode(const hca::SendWqe& a, const hca::SendWqe& b) {
  if (a.opcode != b.opcode || a.wqe_index != b.wqe_index || a.bbs != b.bbs || a.signaled != b.signaled ||
      a.solicited != b.solicited || a.fence != b.fence || a.imm != b.imm || a.remote_addr != b.remote_addr ||
      a.rkey != b.rkey || a.swap_add != b.swap_add || a.compare != b.compare || a.is_inline != b.is_inline ||
      a.num_sge != b.num_sge || a.length != b.length)
    return false;
  const hca::UdAddress &x = a.ud, &y = b.ud;
  if (x.dest_qpn != y.dest_qpn || x.qkey != y.qkey || x.dlid != y.dlid || x.sl != y.sl || x.has_grh != y.has_grh ||
      x.sgid_index != y.sgid_index || x.traffic_class != y.traffic_class || x.hop_limit != y.hop_limit ||
      x.flow_label != y.flow_label || !(x.dgid == y.dgid))
    return false;
  for (uint32_t i = 0; i < a.num_sge; ++i) {
    if (a.sge[i].addr != b.sge[i].addr || a.sge[i].length != b.sge[i].length || a.sge[i].lkey != b.sge[i].lkey)
      return false;
  }
  return true;
}

void fuzz_parser(std::span<const uint8_t> bytes, uint32_t log_bbs, uint32_t bb, bool is_ud) {
  std::vector<uint8_t> ring((1u << log_bbs) * kSendWqeBbBytes, 0);
  std::copy_n(bytes.begin(), std::min(bytes.size(), ring.size()), ring.begin());
  hca::SendWqe wrapped;
  const hca::WqeParse r = hca::parse_send_wqe(ring, bb, is_ud, wrapped);
  if (r == hca::WqeParse::kBadSize) return;
  check(wrapped.bbs >= 1 && wrapped.bbs <= kMaxWqeBbs, "a WQE of 1..16 basic blocks");
  // The reference: the largest WQE's bytes copied out of the ring from bb on, flat at block 0.
  std::vector<uint8_t> flat(kMaxWqeBbs * kSendWqeBbBytes);
  const uint32_t start = (bb % (1u << log_bbs)) * kSendWqeBbBytes;
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = ring[(start + i) % ring.size()];
  hca::SendWqe straight;
  check(hca::parse_send_wqe(flat, 0, is_ud, straight) == r, "wrapped and flat WQEs parse alike");
  if (r != hca::WqeParse::kOk) return;
  check(wrapped.num_sge <= hca::kMaxSendSges, "at most kMaxSendSges SGEs");
  check(same_decode(wrapped, straight), "wrapped and flat WQEs decode to the same fields");
  if (!wrapped.is_inline || wrapped.length == 0) return;  // (no bytes: an empty vector's data() is null)
  check(wrapped.inline_offset < ring.size(), "inline data starts inside the ring");
  // The device reads inline data only from WQEs that fit the ring (SendPipeline::run).
  if (wrapped.bbs > (1u << log_bbs)) return;
  std::vector<uint8_t> a(wrapped.length), b(wrapped.length);
  hca::copy_from_ring(ring, wrapped.inline_offset, a.data(), static_cast<uint32_t>(a.size()));
  hca::copy_from_ring(flat, straight.inline_offset, b.data(), static_cast<uint32_t>(b.size()));
  check(a == b, "wrapped and flat inline data are the same bytes");
}

QpType qp_type_of(uint8_t flags) {
  switch ((flags >> 1) & 3) {
    case 1: return QpType::kUc;
    case 2: return QpType::kUd;
    default: return QpType::kRc;
  }
}

}  // namespace
}  // namespace softhca::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace softhca::fuzz;
  ByteReader in(std::span<const uint8_t>(data, size));
  const uint8_t flags = in.u8();
  const uint32_t log_bbs = in.u8() % 5;
  const uint16_t bb = in.u16();
  const uint16_t producer = in.u16();
  // A copy exactly as long as the bytes, so ASan sees a read past their end.
  const std::span<const uint8_t> rest = in.bytes(kRingBytes);
  const std::vector<uint8_t> bytes(rest.begin(), rest.end());
  fuzz_parser(bytes, log_bbs, bb, (flags & 1) != 0);
  LoopbackBench bench(qp_type_of(flags));
  bench.ring(bytes, producer, (flags & 8) != 0);
  bench.run_timers();
  bench.check_cqes();
  return 0;
}
