#include "hca/send_pipeline.h"

#include <algorithm>
#include <cstring>

#include "hca/completer.h"
#include "hca/transport/requester.h"

namespace softhca::hca {

using namespace hwif;

void SendPipeline::on_doorbell(uint16_t producer) {
  qp_.req.producer = producer;
  if (!fetch()) return dev_.fatal_error(qp_);  // its send queue cannot be read
  run();
}

void SendPipeline::on_blueflame(std::span<const uint8_t> wqe) {
  const auto ctrl = load_as<CtrlSeg>(wqe.data());
  const uint16_t index = ctrl.wqe_index();
  const uint32_t bbs = wqe_bbs(ctrl.ds());
  if (bbs * kSendWqeBbBytes > wqe.size()) return;  // a torn BlueFlame write: ignore it
  // WQEs rung before this one but not yet fetched are read from the ring first.
  qp_.req.producer = index;
  if (!fetch()) return dev_.fatal_error(qp_);
  if (qp_.req.fetch != index) return;  // a BlueFlame WQE that is not the next one: ignore it
  // Into the shadow ring at its slot, wrapping at the ring's end (a power of two of blocks).
  const std::span<uint8_t> shadow = dev_.sq_shadow(qp_);
  const uint32_t off = (index & (qp_.sq_bbs() - 1)) * kSendWqeBbBytes;
  const uint32_t len = bbs * kSendWqeBbBytes;
  if (len > shadow.size()) return;  // a WQE larger than the whole ring: nothing sensible to run
  const uint32_t first = std::min<uint32_t>(len, static_cast<uint32_t>(shadow.size()) - off);
  std::memcpy(shadow.data() + off, wqe.data(), first);
  std::memcpy(shadow.data(), wqe.data() + first, len - first);
  qp_.req.producer = qp_.req.fetch = static_cast<uint16_t>(index + bbs);
  run();
}

bool SendPipeline::fetch() {
  const uint32_t ring_bbs = qp_.sq_bbs();
  uint8_t* shadow = dev_.sq_shadow(qp_).data();
  while (qp_.req.fetch != qp_.req.producer) {
    const uint32_t pending = static_cast<uint16_t>(qp_.req.producer - qp_.req.fetch);
    if (pending > ring_bbs) return true;  // a doorbell claiming more than the ring holds: ignore it
    const uint32_t slot = qp_.req.fetch & (ring_bbs - 1);
    const uint32_t n = pending < ring_bbs - slot ? pending : ring_bbs - slot;
    const uint64_t off = static_cast<uint64_t>(slot) * kSendWqeBbBytes;
    if (!dev_.dma_.dma_read(qp_.sq_addr + off, shadow + off, n * kSendWqeBbBytes, pcie::TlpCause::kWqeRead)) {
      qp_.req.producer = qp_.req.fetch;  // what could not be read is never executed
      return dev_.fault();
    }
    qp_.req.fetch = static_cast<uint16_t>(qp_.req.fetch + n);
  }
  return true;
}

bool SendPipeline::local_keys_ok(SendRecord& rec) {
  const SendWqe& wqe = rec.wqe;
  if (wqe.is_inline) return true;
  // Gathers need local read (always granted); READ and atomic results are written locally.
  const uint32_t need = (wqe.is_read() || wqe.is_atomic()) ? uint32_t{kAccessLocalWrite} : 0u;
  for (uint32_t i = 0; i < wqe.num_sge; ++i) {
    const Sge& s = wqe.sge[i];
    if (s.length == 0) continue;
    const Translation t = local_keys_.translate(dev_.mkeys_, s.lkey, qp_.pdn, s.addr, s.length, need);
    if (t.result != KeyCheck::kOk) return false;
    if (i == 0) rec.sge0_host_addr = t.host_addr;
  }
  return true;
}

SendPipeline::Prepared SendPipeline::prepare(SendRecord& rec) {
  const std::span<const uint8_t> ring(dev_.sq_shadow(qp_));
  const WqeParse parsed = parse_send_wqe(ring, qp_.req.exec, wqe_shape(qp_.type), rec.wqe);
  start_record(rec, qp_.req.exec);
  SendWqe& w = rec.wqe;
  if (parsed != WqeParse::kOk) {
    syndrome_ = CqeSyndrome::kLocQpOpErr;
    return Prepared::kFailed;
  }
  // SEND with invalidate is RC's and XRC's (IBA 9.2); windows are bound on connected QPs.
  const bool plain = w.opcode != WqeOpcode::kSendInv;
  const bool type_ok =
      is_reliable(qp_.type) ||
      (qp_.type == QpType::kUc && plain && (w.is_send() || w.is_write() || w.is_memory_op() || w.opcode == WqeOpcode::kNop)) ||
      (qp_.type == QpType::kUd && plain && (w.is_send() || w.opcode == WqeOpcode::kNop));
  if (!type_ok) {
    syndrome_ = CqeSyndrome::kLocQpOpErr;
    return Prepared::kFailed;
  }
  // UD messages are limited by the port MTU (UD QPs have no path MTU, IBA 10.2.4.3).
  const uint32_t mtu = mtu_bytes(qp_.type == QpType::kUd ? dev_.config_.port.active_mtu : qp_.attr.path_mtu);
  if (w.length > dev_.config_.caps.max_msg_sz || (qp_.type == QpType::kUd && w.length > mtu) ||
      (w.is_atomic() && (w.num_sge != 1 || w.sge[0].length < 8))) {
    syndrome_ = CqeSyndrome::kLocLenErr;
    return Prepared::kFailed;
  }
  if (!local_keys_ok(rec)) {
    syndrome_ = CqeSyndrome::kLocProtErr;
    return Prepared::kFailed;
  }
  // RDMA READ and atomics are limited by max_rd_atomic; a fenced WQE waits for all of them.
  const bool rd = w.is_read() || w.is_atomic();
  if ((rd && qp_.req.outstanding_rd >= qp_.attr.max_rd_atomic) || (w.fence && qp_.req.outstanding_rd > 0))
    return Prepared::kStall;
  return Prepared::kReady;
}

void SendPipeline::run() {
  const QpState s = qp_.state();
  if (s == QpState::kErr || s == QpState::kSqe) return flush();
  if (s != QpState::kRts) return;  // WQEs wait in the ring until the QP can send
  Requester requester(dev_, qp_);
  requester.defer_express_acks();  // one acknowledgement for the WQEs of this doorbell
  run_loop(requester);
  requester.take_express_ack();
}

void SendPipeline::run_loop(Requester& requester) {
  while (qp_.req.exec != qp_.req.fetch && qp_.state() == QpState::kRts && !qp_.req.rnr_wait) {
    if (run_writes(requester)) continue;
    SendRecord& rec = dev_.record(qp_, qp_.req.exec);
    const Prepared p = prepare(rec);
    if (p == Prepared::kStall) return;
    // A WQE claiming more basic blocks than were posted is not executed (a hostile ds).
    if (static_cast<uint16_t>(qp_.req.fetch - qp_.req.exec) < rec.wqe.bbs) {
      syndrome_ = CqeSyndrome::kLocQpOpErr;
      return fail(rec);
    }
    if (p == Prepared::kFailed) return fail(rec);
    if (rec.wqe.is_memory_op()) {
      if (const std::optional<CqeSyndrome> why = dev_.run_memory_op(qp_, rec.wqe)) {
        syndrome_ = *why;
        return fail(rec);
      }
    }
    qp_.req.exec = static_cast<uint16_t>(qp_.req.exec + rec.wqe.bbs);
    requester.execute(rec);
  }
}

bool SendPipeline::run_writes(Requester& requester) {
  const uint32_t room = requester.write_run_room();
  if (room == 0) return false;
  const uint32_t ready = prepare_plain_writes(room);
  return ready > 0 && requester.execute_write_run(ready) > 0;
}

// Records are written ahead of exec, up to the run's room (at most the 128-PSN window). A
// legitimate driver never posts past the WQEs not yet completed, so no record of one in flight is
// overwritten; a doorbell that claims more can only hurt its own QP, as on the per-WQE path.
uint32_t SendPipeline::prepare_plain_writes(uint32_t max) {
  const std::span<const uint8_t> ring(dev_.sq_shadow(qp_));
  const uint32_t ring_mask = qp_.sq_bbs() - 1;
  // prepare()'s limits for a WRITE on RC: one packet (the run's shape), within the largest message.
  const uint64_t longest = std::min<uint64_t>(mtu_bytes(qp_.attr.path_mtu), dev_.config_.caps.max_msg_sz);
  const bool fence_stalls = qp_.req.outstanding_rd > 0;
  uint16_t bb = qp_.req.exec;
  uint32_t n = 0;
  for (; n < max && bb != qp_.req.fetch; ++n) {
    SendRecord& rec = dev_.record(qp_, bb);
    SendWqe& w = rec.wqe;
    if (!decode_plain_write(ring, (bb & ring_mask) * kSendWqeBbBytes, w)) break;
    if (w.length == 0 || w.length > longest || (w.fence && fence_stalls) || static_cast<uint16_t>(qp_.req.fetch - bb) < w.bbs) break;
    start_record(rec, bb);
    if (!w.is_inline && !local_keys_ok(rec)) break;
    bb = static_cast<uint16_t>(bb + w.bbs);
  }
  return n;
}

void SendPipeline::fail(const SendRecord& rec) {
  // Completions stay in WQE order: WQEs still in flight before this one are flushed first.
  Completer done(dev_);
  while (qp_.req.complete != qp_.req.exec) {
    const SendRecord& earlier = dev_.record(qp_, qp_.req.complete);
    done.send_flush(qp_, qp_.req.complete, earlier.wqe.opcode);
    qp_.req.complete = static_cast<uint16_t>(qp_.req.complete + earlier.wqe.bbs);
  }
  done.send_error(qp_, rec.wqe, syndrome_);
  // A WQE claiming more basic blocks than were posted (a hostile ds) ends where the posted ones
  // end: stepping past the producer would send flush() around the whole 16-bit index space.
  const auto posted = static_cast<uint16_t>(qp_.req.fetch - qp_.req.exec);
  qp_.req.exec = qp_.req.complete = static_cast<uint16_t>(qp_.req.exec + std::min<uint32_t>(rec.wqe.bbs, posted));
  dev_.send_queue_error(qp_);
}

void SendPipeline::flush() {
  // A fault here leaves the unreadable WQEs unfetched: they are not flushed (nothing to say about them).
  fetch();
  Completer done(dev_);
  const std::span<const uint8_t> ring(dev_.sq_shadow(qp_));
  while (qp_.req.complete != qp_.req.fetch) {
    SendWqe w;
    const uint16_t index = qp_.req.complete;
    const WqeParse parsed = parse_send_wqe(ring, index, wqe_shape(qp_.type), w);
    // Never past the producer, whatever ds a WQE claims (see fail()).
    const auto posted = static_cast<uint16_t>(qp_.req.fetch - index);
    const uint32_t bbs = std::min<uint32_t>(parsed == WqeParse::kBadSize ? 1 : w.bbs, posted);
    done.send_flush(qp_, index, w.opcode);
    qp_.req.complete = static_cast<uint16_t>(index + bbs);
  }
  qp_.req.exec = qp_.req.complete;
  qp_.req.outstanding_rd = 0;
}

}  // namespace softhca::hca
