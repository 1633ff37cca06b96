#include "hca/transport/requester.h"

#include <algorithm>
#include <cstring>

#include "hca/completer.h"
#include "hca/send_pipeline.h"
#include "hca/transport/wire.h"

namespace softhca::hca {

using namespace hwif;
using fabric::OpKind;

namespace {
uint32_t packets_of(const SendWqe& w, uint32_t mtu) {
  if (w.is_atomic()) return 1;
  return w.length <= mtu ? 1 : static_cast<uint32_t>(ceil_div(w.length, mtu));
}
}  // namespace

void Requester::execute(SendRecord& rec) {
  const SendWqe& w = rec.wqe;
  rec.executed = true;
  rec.first_psn = qp_.req.next_psn;
  if (w.opcode == WqeOpcode::kNop || w.is_memory_op()) {  // done already (SendPipeline::run_loop)
    rec.npkts = 0;
    rec.response_done = true;
    complete_acked();
    return;
  }
  rec.npkts = packets_of(w, mtu());
  qp_.req.next_psn = psn_add(qp_.req.next_psn, rec.npkts);
  if (w.is_read() || w.is_atomic()) ++qp_.req.outstanding_rd;
  // Nothing older waiting to go out: a WRITE or SEND may go at once, whole, as pump() would send it.
  if (qp_.req.tx_psn == rec.first_psn && !qp_.req.rnr_wait && send_express(rec)) {
    after_sending();
  } else {
    pump(&rec);
  }
  if (is_reliable(qp_.type) || qp_.state() == QpState::kErr || qp_.state() == QpState::kSqe) return;
  // UC and UD complete as soon as the message is on the wire.
  rec.response_done = true;
  qp_.req.una_psn = qp_.req.next_psn;
  complete_acked();
}

void Requester::pump(const SendRecord* hint) {
  RequesterState& rq = qp_.req;
  const bool rc = is_reliable(qp_.type);
  const SendRecord* r = hint;
  while (rq.tx_psn != rq.next_psn && qp_.state() != QpState::kErr && qp_.state() != QpState::kSqe) {
    // RC keeps at most kMaxUnackedPsns in flight, and sends nothing while waiting out an RNR NAK.
    if (rc && (rq.rnr_wait || psn_cmp(rq.tx_psn, rq.una_psn) >= static_cast<int32_t>(kMaxUnackedPsns))) break;
    r = record_near(r, rq.tx_psn);
    if (r == nullptr) break;
    const auto index = static_cast<uint32_t>(psn_cmp(rq.tx_psn, r->first_psn));
    const bool resend = psn_cmp(rq.tx_psn, rq.max_sent_psn) < 0;
    if (r->wqe.is_read() || r->wqe.is_atomic()) {
      // One request covers the whole response; a READ resumes after what already arrived.
      if (!r->response_done) send_request_packet(*r, std::max(index, r->resp_received));
      rq.tx_psn = psn_add(r->first_psn, r->npkts);
    } else if (index != 0 || !send_express(*r)) {
      send_request_packet(*r, index);
      rq.tx_psn = psn_add(rq.tx_psn, 1);
    }
    if (resend) {
      ++dev_.stats_->retransmitted_packets;
      ++dev_.counters(qp_).retransmitted;
    }
    if (psn_cmp(rq.tx_psn, rq.max_sent_psn) > 0) rq.max_sent_psn = rq.tx_psn;
  }
  after_sending();
}

bool Requester::send_express(const SendRecord& r) {
  RequesterState& rq = qp_.req;
  const bool resend = psn_cmp(rq.tx_psn, rq.max_sent_psn) < 0;
  if ((qp_.type != QpType::kRc && qp_.type != QpType::kUc) || resend || !fits_window(r) ||
      !(express_write(r) || express_send(r)))
    return false;
  rq.tx_psn = rq.max_sent_psn = psn_add(r.first_psn, r.npkts);
  return true;
}

void Requester::after_sending() {
  if (!defer_express_acks_) take_express_ack();
  // An express ACK about to be taken needs no timer (complete_acked() arms one for what is left):
  // no clock reading per message.
  const bool ack_pending = express_acked_ != kNoAck;
  if (is_reliable(qp_.type) && qp_.req.una_psn != qp_.req.tx_psn && !ack_pending) arm_ack_timer();
}

void Requester::take_express_ack() {
  // As if delivered from the loopback queue right now (accept(): counted received, or dropped
  // when the QP stopped taking packets meanwhile, e.g. a later WQE of the doorbell failed);
  // acknowledging may let more out (the window), whose ACK is taken in turn.
  while (express_acked_ != kNoAck) {
    const uint32_t psn = express_acked_;
    const uint32_t packets = express_ack_packets_;
    express_acked_ = kNoAck;
    express_ack_packets_ = 0;
    const size_t ack_bytes = fabric::local_wire_bytes(BthOpcode::kRcAcknowledge, 0);
    const uint16_t pkey = dev_.config_.port.pkeys[qp_.attr.pkey_index];  // acks_come_back_from() checked it
    if (const std::optional<DropReason> why = dev_.refuses(qp_, BthOpcode::kRcAcknowledge, pkey)) {
      dev_.stats_->packets_received += packets;
      dev_.stats_->bytes_received += uint64_t{packets} * ack_bytes;
      dev_.counters(qp_).packets_dropped += packets;
      for (uint32_t i = 0; i < packets; ++i) dev_.stats_->drop(*why);
      return;
    }
    dev_.count_taken(qp_, packets, packets * ack_bytes);
    const Device::QpScope scope(dev_, qp_);
    acknowledge(psn);
  }
}

bool Requester::gather(const SendWqe& w, uint64_t offset, uint32_t len, uint8_t* dst) {
  if (w.is_inline) {
    copy_from_ring(dev_.sq_shadow(qp_), static_cast<uint32_t>(w.inline_offset + offset), dst, len);
    return true;
  }
  for (uint32_t i = 0; i < w.num_sge && len > 0; ++i) {
    const Sge& s = w.sge[i];
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    const auto n = static_cast<uint32_t>(std::min<uint64_t>(s.length - offset, len));
    const Translation t = dev_.mkeys_.translate(s.lkey, qp_.pdn, s.addr + offset, n, 0);
    if (t.result != KeyCheck::kOk) return false;
    if (!dev_.dma_.dma_read(t.host_addr, dst, n, pcie::TlpCause::kPayloadRead)) return dev_.fault();
    dst += n;
    len -= n;
    offset = 0;
  }
  return true;
}

std::span<const uint8_t> Requester::gather_in_place(const SendWqe& w, uint64_t offset, uint32_t len,
                                                    const fabric::PacketFields& f) {
  if (w.is_inline || len == 0 || !dev_.loops_back(f)) return {};
  for (uint32_t i = 0; i < w.num_sge; ++i) {
    const Sge& s = w.sge[i];
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    if (s.length - offset < len) return {};  // spans SGEs: gathered the ordinary way
    const Translation t = dev_.mkeys_.translate(s.lkey, qp_.pdn, s.addr + offset, len, 0);
    if (t.result != KeyCheck::kOk) return {};  // gather() meets the same error and reports it
    return dev_.dma_.dma_read_in_place(t.host_addr, len, pcie::TlpCause::kPayloadRead);
  }
  return {};
}

bool Requester::scatter(const SendWqe& w, uint64_t offset, std::span<const uint8_t> data) {
  for (uint32_t i = 0; i < w.num_sge && !data.empty(); ++i) {
    const Sge& s = w.sge[i];
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    const auto n = static_cast<uint32_t>(std::min<uint64_t>(s.length - offset, data.size()));
    const Translation t = dev_.mkeys_.translate(s.lkey, qp_.pdn, s.addr + offset, n, kAccessLocalWrite);
    if (t.result != KeyCheck::kOk) return false;
    if (!dev_.dma_.dma_write(t.host_addr, data.data(), n, pcie::TlpCause::kPayloadWrite)) return dev_.fault();
    data = data.subspan(n);
    offset = 0;
  }
  return data.empty();
}

void Requester::send_request_packet(const SendRecord& rec, uint32_t index) {
  const SendWqe& w = rec.wqe;
  const uint32_t m = mtu();
  fabric::PacketFields f;
  dev_.route_to_peer(qp_, f);
  f.psn = Psn(psn_add(rec.first_psn, index));
  if (qp_.type == QpType::kXrcIni) f.xrceth = fabric::XrcethFields{w.xrc_srqn};
  uint32_t payload_len = 0;
  uint8_t* payload = nullptr;  // gathered where transmit() wants it (a loopback slot: no copy)
  if (w.is_read()) {
    const uint64_t off = static_cast<uint64_t>(index) * m;
    f.opcode = request_opcode(qp_.type, WqeOpcode::kRdmaRead, PacketPosition::kOnly);
    f.reth = fabric::RethFields{w.remote_addr + off, RKey(w.rkey), static_cast<uint32_t>(w.length - off)};
    f.ack_req = true;
  } else if (w.is_atomic()) {
    f.opcode = request_opcode(qp_.type, w.opcode, PacketPosition::kOnly);
    f.atomic_eth = fabric::AtomicEthFields{w.remote_addr, RKey(w.rkey), w.swap_add, w.compare};
    f.ack_req = true;
  } else {
    const PacketPosition pos = position_of(index, rec.npkts);
    const uint64_t off = static_cast<uint64_t>(index) * m;
    payload_len = static_cast<uint32_t>(std::min<uint64_t>(m, w.length - std::min<uint64_t>(w.length, off)));
    f.opcode = request_opcode(qp_.type, w.opcode, pos);
    const bool first = pos == PacketPosition::kFirst || pos == PacketPosition::kOnly;
    const bool last = pos == PacketPosition::kLast || pos == PacketPosition::kOnly;
    if (w.is_write() && first) f.reth = fabric::RethFields{w.remote_addr, RKey(w.rkey), static_cast<uint32_t>(w.length)};
    if (w.has_imm() && last) f.imm = w.imm;
    if (w.opcode == WqeOpcode::kSendInv && last) f.ieth = fabric::IethFields{RKey(w.invalidate_key())};
    if (qp_.type == QpType::kUd) {
      f.dlid = Lid(w.ud.dlid);
      f.sl = w.ud.sl;
      f.dest_qp = Qpn(w.ud.dest_qpn);
      // A Q_Key with its high bit set means "use the QP's own Q_Key" (IBA 10.2.5).
      const uint32_t qkey = (w.ud.qkey & 0x80000000u) ? qp_.attr.qkey : w.ud.qkey;
      f.deth = fabric::DethFields{qkey, Qpn(qp_.mad_agent ? kGsiQpn : qp_.qpn)};
      f.grh.reset();
      if (w.ud.has_grh) {
        f.grh = fabric::GrhFields{w.ud.traffic_class, w.ud.flow_label, w.ud.hop_limit,
                                  dev_.config_.port.gids[w.ud.sgid_index % kGidTableLen].raw, w.ud.dgid.raw};
      }
    }
    f.solicited = w.solicited && last;
    f.ack_req = is_reliable(qp_.type) && rc_asks_ack(index, rec.npkts);
    // Looped back from one mapped piece of host memory: read where it lies, copied once, by the
    // responder, straight into the target buffer.
    if (const std::span<const uint8_t> view = gather_in_place(w, off, payload_len, f); !view.empty()) {
      return dev_.transmit(f, view, true);
    }
    payload = dev_.payload_buffer_for(f);
    if (!gather(w, off, payload_len, payload)) {
      return fail_at(f.psn.value(), CqeSyndrome::kLocProtErr);
    }
  }
  dev_.transmit(f, std::span<const uint8_t>(payload, payload_len));
}

void Requester::arm_ack_timer() {
  if (qp_.req.deadline.count() >= 0) return;
  const Picoseconds t = ack_timeout(qp_.attr.timeout);
  if (t.count() < 0) return;
  dev_.schedule(qp_, dev_.now() + t, false);
}

namespace {
bool holds(const SendRecord& r, uint32_t psn) {
  return r.npkts > 0 && psn_cmp(psn, r.first_psn) >= 0 && psn_cmp(psn, psn_add(r.first_psn, r.npkts)) < 0;
}
}  // namespace

const SendRecord* Requester::record_near(const SendRecord* hint, uint32_t psn) {
  if (hint != nullptr) {
    if (holds(*hint, psn)) return hint;
    // wqe_index is the record's first basic block (prepare() sets it), so the next WQE is bbs on.
    const auto next = static_cast<uint16_t>(hint->wqe.wqe_index + hint->wqe.bbs);
    if (next != qp_.req.exec && holds(dev_.record(qp_, next), psn)) return &dev_.record(qp_, next);
  }
  return record_for_psn(psn);
}

SendRecord* Requester::record_for_psn(uint32_t psn) {
  for (uint16_t bb = qp_.req.complete; bb != qp_.req.exec;) {
    SendRecord& r = dev_.record(qp_, bb);
    if (holds(r, psn)) return &r;
    bb = static_cast<uint16_t>(bb + r.wqe.bbs);
  }
  return nullptr;
}

const SendRecord* Requester::unanswered_before(uint32_t psn) {
  if (qp_.req.outstanding_rd == 0) return nullptr;
  for (uint16_t bb = qp_.req.complete; bb != qp_.req.exec;) {
    const SendRecord& r = dev_.record(qp_, bb);
    if (r.npkts > 0 && psn_cmp(r.first_psn, psn) >= 0) return nullptr;
    if ((r.wqe.is_read() || r.wqe.is_atomic()) && !r.response_done) return &r;
    bb = static_cast<uint16_t>(bb + r.wqe.bbs);
  }
  return nullptr;
}

void Requester::acknowledge(uint32_t psn, bool settle) {
  uint32_t next = psn_add(psn, 1);
  // Only ACKs inside the window [una, next_psn] move things on; others are stale or bogus.
  if (psn_cmp(next, qp_.req.una_psn) <= 0 || psn_cmp(next, qp_.req.next_psn) > 0) return;
  // An ACK past a READ or atomic whose response has not (all) arrived says the response was lost
  // (IBA 9.7, an implied NAK; the responder executed the request, then later ones): the window
  // stops at the first missing response, and from there everything is sent again. The READ
  // resumes after what arrived; a repeated atomic is answered from the responder's replay cache.
  if (const SendRecord* r = unanswered_before(next)) {
    const uint32_t missing = psn_add(r->first_psn, r->resp_received);
    if (psn_cmp(missing, next) < 0) {
      next = psn_cmp(missing, qp_.req.una_psn) < 0 ? qp_.req.una_psn : missing;
      if (qp_.req.implied_nak_psn != missing) {
        qp_.req.implied_nak_psn = missing;
        qp_.req.tx_psn = next;
      }
    }
  }
  if (next == qp_.req.una_psn) {
    if (settle) pump();  // the implied NAK's go-back-N
    return;
  }
  qp_.req.una_psn = next;
  if (psn_cmp(qp_.req.tx_psn, next) < 0) qp_.req.tx_psn = next;
  qp_.req.retries_left = qp_.attr.retry_cnt;
  qp_.req.rnr_retries_left = qp_.attr.rnr_retry;
  if (!settle) return;
  complete_acked();
  pump();
}

void Requester::complete_acked() {
  Completer done(dev_);
  while (qp_.req.complete != qp_.req.exec) {
    SendRecord& r = dev_.record(qp_, qp_.req.complete);
    if (!is_done(r)) {
      const bool acked = psn_cmp(psn_add(r.first_psn, r.npkts), qp_.req.una_psn) <= 0;
      // Later PSNs were ACKed but this READ's data never came: ask for it again.
      if (acked) retransmit_from(psn_add(r.first_psn, r.resp_received));
      break;
    }
    if (r.wqe.signaled) done.send_done(qp_, r.wqe);
    qp_.req.complete = static_cast<uint16_t>(qp_.req.complete + r.wqe.bbs);
  }
  if (is_reliable(qp_.type) && !qp_.req.rnr_wait) {
    dev_.cancel_timer(qp_);
    if (qp_.req.complete != qp_.req.exec) arm_ack_timer();
  }
  if (qp_.state() == QpState::kSqd) dev_.check_sq_drained(qp_);
}

void Requester::retransmit_from(uint32_t psn) {
  if (psn_cmp(psn, qp_.req.una_psn) < 0) psn = qp_.req.una_psn;
  if (psn_cmp(psn, qp_.req.next_psn) > 0) return;
  qp_.req.tx_psn = psn;
  pump();
}

void Requester::fail_at(uint32_t psn, CqeSyndrome syndrome) {
  Completer done(dev_);
  SendRecord* failing = record_for_psn(psn);
  // WQEs before the failing one that are fully done complete normally; the rest are flushed.
  while (qp_.req.complete != qp_.req.exec) {
    SendRecord& r = dev_.record(qp_, qp_.req.complete);
    if (&r == failing || !is_done(r)) break;
    if (r.wqe.signaled) done.send_done(qp_, r.wqe);
    qp_.req.complete = static_cast<uint16_t>(qp_.req.complete + r.wqe.bbs);
  }
  // The error is reported on the oldest WQE not done (the one that failed, or an earlier one whose
  // response never came): completions stay in order and the first one that is not a success says
  // why the QP failed, never a flush.
  if (qp_.req.complete != qp_.req.exec) {
    SendRecord& head = dev_.record(qp_, qp_.req.complete);
    done.send_error(qp_, head.wqe, syndrome);
    qp_.req.complete = static_cast<uint16_t>(qp_.req.complete + head.wqe.bbs);
  }
  dev_.send_queue_error(qp_);
}

void Requester::on_timer(bool rnr_wait) {
  // SQD still finishes what it started, retransmissions included.
  const bool sending = qp_.state() == QpState::kRts || qp_.state() == QpState::kSqd;
  if (!sending || qp_.req.complete == qp_.req.exec) return;
  if (!rnr_wait) {
    ++dev_.stats_->timeouts;
    if (qp_.req.retries_left == 0) return fail_at(qp_.req.una_psn, CqeSyndrome::kRetryExcErr);
    --qp_.req.retries_left;
    qp_.req.implied_nak_psn = ResponderState::kNoPsn;  // what was sent again may be lost again
    qp_.req.nak_psn = ResponderState::kNoPsn;
  }
  retransmit_from(qp_.req.una_psn);
  SendPipeline(dev_, qp_).run();  // WQEs that waited out the RNR timer
}

void Requester::on_response(const fabric::PacketFields& f, std::span<const uint8_t> payload) {
  if (!is_reliable(qp_.type) || qp_.state() == QpState::kErr) return;
  const fabric::OpcodeInfo info = fabric::opcode_info(f.opcode);
  const uint32_t psn = f.psn.value();

  if (info.kind == OpKind::kAcknowledge) {
    const uint8_t syn = f.aeth ? f.aeth->syndrome : 0;
    if (fabric::is_ack(syn)) {
      // ACKs are cumulative: when a later ACK of this QP is queued right behind this one (a
      // looped-back burst), completing and sending more is left to it; the state is the same.
      const std::optional<uint32_t> later = dev_.next_looped_ack(f);
      const bool settle = !later || psn_cmp(*later, psn) <= 0 || psn_cmp(psn_add(*later, 1), qp_.req.next_psn) > 0;
      return acknowledge(psn, settle);
    }
    // A NAK names a PSN in flight; anything else is stale or bogus.
    if (psn_cmp(psn, qp_.req.una_psn) < 0 || psn_cmp(psn, qp_.req.next_psn) >= 0)
      return dev_.stats_->drop(DropReason::kPsnOutOfWindow);
    // NAKs and RNR NAKs acknowledge everything before their PSN.
    acknowledge(psn_add(psn, Psn::kMask));
    if (fabric::is_rnr_nak(syn)) {
      if (qp_.req.rnr_retries_left == 0) return fail_at(psn, CqeSyndrome::kRnrRetryExcErr);
      if (qp_.attr.rnr_retry != 7) --qp_.req.rnr_retries_left;  // 7 means retry forever
      dev_.cancel_timer(qp_);
      qp_.req.tx_psn = psn;  // sent again, from here, when the RNR timer expires
      return dev_.schedule(qp_, dev_.now() + rnr_delay(fabric::syndrome_value(syn)), true);
    }
    switch (static_cast<NakCode>(fabric::syndrome_value(syn))) {
      case NakCode::kPsnSequenceError:
        if (qp_.req.rnr_wait) return;  // the packets after an RNR NAKed one: sent again later
        // The responder NAKs a gap once (responder.cc): the same PSN again, with no progress between,
        // is a copy of that NAK; going back again would only cost a retry.
        if (qp_.req.nak_psn == psn) return;
        qp_.req.nak_psn = psn;
        // Each go-back-N costs a retry (IBA 9.7.5.2.1), so a storm of NAKs ends.
        if (qp_.req.retries_left == 0) return fail_at(psn, CqeSyndrome::kRetryExcErr);
        --qp_.req.retries_left;
        return retransmit_from(psn);
      case NakCode::kInvalidRequest: return fail_at(psn, CqeSyndrome::kRemInvReqErr);
      case NakCode::kRemoteAccessError: return fail_at(psn, CqeSyndrome::kRemAccessErr);
      case NakCode::kRemoteOperationalError: return fail_at(psn, CqeSyndrome::kRemOpErr);
      case NakCode::kInvalidRdRequest: break;
    }
    return fail_at(psn, CqeSyndrome::kRemInvReqErr);
  }

  SendRecord* r = record_for_psn(psn);
  if (r == nullptr || r->response_done) return dev_.stats_->drop(DropReason::kPsnOutOfWindow);
  // Responses come in PSN order (IBA 9.7): one for a later READ or atomic while an earlier one
  // still waits for its own says that one's response was lost (implied NAK). Taking it anyway would
  // let more atomics in flight than the responder's replay ring remembers.
  if (unanswered_before(r->first_psn) != nullptr) {
    acknowledge(psn);
    return dev_.stats_->drop(DropReason::kPsnOutOfWindow);
  }
  if (info.kind == OpKind::kAtomicAcknowledge && r->wqe.is_atomic() && f.atomic_ack) {
    const uint64_t value = f.atomic_ack->orig;  // the target's original value, in host order
    if (!scatter(r->wqe, 0, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&value), 8)))
      return fail_at(psn, CqeSyndrome::kLocProtErr);
  } else if (info.kind == OpKind::kRdmaReadResponse && r->wqe.is_read()) {
    // Responses must arrive in order: exactly the next PSN of this READ.
    const auto index = static_cast<uint32_t>(psn_cmp(psn, r->first_psn));
    if (psn != psn_add(r->first_psn, r->resp_received)) return dev_.stats_->drop(DropReason::kPsnOutOfWindow);
    if (!scatter(r->wqe, static_cast<uint64_t>(index) * mtu(), payload))
      return fail_at(psn, CqeSyndrome::kLocProtErr);
    ++r->resp_received;
    if (!info.ends_message()) return;
  } else {
    return dev_.stats_->drop(DropReason::kPsnOutOfWindow);
  }
  r->response_done = true;
  --qp_.req.outstanding_rd;
  acknowledge(psn_add(r->first_psn, r->npkts - 1));
  complete_acked();  // also when the ACK window had already moved past this READ
  SendPipeline(dev_, qp_).run();  // WQEs may have waited for max_rd_atomic
}

}  // namespace softhca::hca
