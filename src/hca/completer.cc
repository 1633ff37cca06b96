#include "hca/completer.h"

#include <bit>
#include <optional>

#include "hwif/uar.h"

namespace softhca::hca {

using namespace hwif;

namespace {
// Adds the CQE the enclosing function writes, if it writes one (a CQ overrun or in error takes
// none), to its QP's counters: the device's count before and after, so the lookup costs nothing.
class QpCqeCount {
 public:
  QpCqeCount(const DeviceStats& s, QpCounters& c, bool error) : s_(s), c_(c), before_(s.cqes_written), error_(error) {}
  ~QpCqeCount() {
    const uint64_t n = s_.cqes_written - before_;
    c_.cqes += n;
    if (error_) c_.error_cqes += n;
  }
  QpCqeCount(const QpCqeCount&) = delete;
  QpCqeCount& operator=(const QpCqeCount&) = delete;

 private:
  const DeviceStats& s_;
  QpCounters& c_;
  uint64_t before_;
  bool error_;
};
}  // namespace

void Completer::send_done(QueuePair& qp, const SendWqe& wqe) {
  const QpCqeCount counted(*dev_.stats_, dev_.counters(qp), false);
  Cqe64 c{};
  c.sop_drop_qpn = (static_cast<uint32_t>(wqe.opcode) << 24) | qp.qpn;
  c.wqe_counter = wqe.wqe_index;
  c.byte_cnt = static_cast<uint32_t>(wqe.is_atomic() ? 8 : wqe.length);
  c.op_own = static_cast<uint8_t>(static_cast<uint8_t>(CqeOpcode::kReq) << 4);
  write(qp, qp.send_cqn, c, false, false);
}

void Completer::send_flush(QueuePair& qp, uint16_t wqe_index, WqeOpcode opcode) {
  const QpCqeCount counted(*dev_.stats_, dev_.counters(qp), true);
  ErrCqe64 e{};
  e.syndrome = static_cast<uint8_t>(CqeSyndrome::kWrFlushErr);
  e.s_wqe_opcode_qpn = (static_cast<uint32_t>(opcode) << 24) | qp.qpn;
  e.wqe_counter = wqe_index;
  e.op_own = static_cast<uint8_t>(static_cast<uint8_t>(CqeOpcode::kReqErr) << 4);
  write(qp, qp.send_cqn, std::bit_cast<Cqe64>(e), false, true);
}

void Completer::send_error(QueuePair& qp, const SendWqe& wqe, CqeSyndrome syndrome) {
  const QpCqeCount counted(*dev_.stats_, dev_.counters(qp), true);
  ErrCqe64 e{};
  e.syndrome = static_cast<uint8_t>(syndrome);
  e.s_wqe_opcode_qpn = (static_cast<uint32_t>(wqe.opcode) << 24) | qp.qpn;
  e.wqe_counter = wqe.wqe_index;
  e.op_own = static_cast<uint8_t>(static_cast<uint8_t>(CqeOpcode::kReqErr) << 4);
  write(qp, qp.send_cqn, std::bit_cast<Cqe64>(e), false, true);
}

Completer::RecvTarget Completer::recv_target(const QueuePair& qp) const {
  if (qp.type != QpType::kXrcTgt) return RecvTarget{qp.srqn, qp.recv_cqn};
  // A TGT QP completes into the CQ of the XRC SRQ the request named (IBA 11.2.4).
  const SharedReceiveQueue* srq = dev_.srqs_.find(qp.resp.xrc_srqn);
  return srq != nullptr ? RecvTarget{qp.resp.xrc_srqn, srq->cqn} : RecvTarget{kNoSrq, 0};
}

void Completer::recv_done(QueuePair& qp, const RecvInfo& info) {
  const QpCqeCount counted(*dev_.stats_, dev_.counters(qp), false);
  Cqe64 c{};
  c.sop_drop_qpn = qp.qpn;
  c.wqe_counter = info.wqe_counter;
  c.byte_cnt = info.byte_len;
  c.imm_inval_pkey = std::bit_cast<Be32>(info.imm);  // raw bytes as they came off the wire
  c.slid = info.slid;
  c.flags_rqpn = (info.grh ? kCqeGrhBits & (1u << 28) : 0u) | (static_cast<uint32_t>(info.sl & 0xf) << 24) |
                 (info.src_qpn & 0xffffff);
  const RecvTarget to = recv_target(qp);
  if (to.srqn != kNoSrq) c.srqn_uidx = to.srqn & 0xffffff;
  c.op_own = static_cast<uint8_t>((static_cast<uint8_t>(info.opcode) << 4) | (info.solicited ? kCqeSolicitedBit : 0));
  write(qp, to.cqn, c, info.solicited, false);
}

void Completer::recv_error(QueuePair& qp, uint16_t wqe_counter, CqeSyndrome syndrome) {
  const QpCqeCount counted(*dev_.stats_, dev_.counters(qp), true);
  ErrCqe64 e{};
  e.syndrome = static_cast<uint8_t>(syndrome);
  e.s_wqe_opcode_qpn = qp.qpn;
  e.wqe_counter = wqe_counter;
  const RecvTarget to = recv_target(qp);
  if (to.srqn != kNoSrq) e.srqn = to.srqn & 0xffffff;
  e.op_own = static_cast<uint8_t>(static_cast<uint8_t>(CqeOpcode::kRespErr) << 4);
  write(qp, to.cqn, std::bit_cast<Cqe64>(e), false, true);
}

void Completer::write(const QueuePair& qp, uint32_t cqn, const Cqe64& cqe, bool solicited, bool is_error) {
  CompletionQueue* cq = dev_.cqs_.find(cqn);
  if (cq == nullptr) return;
  if (cq->in_error) {
    // A CQ in error takes no more CQEs; they are lost as in an overrun, and the QP that had one
    // to write fails with it (as mlx5: a work queue whose CQ is in error is in error too).
    ++dev_.stats_->cq_overruns;
    dev_.defer_fatal(qp);
    return;
  }
  const uint32_t nent = 1u << cq->log_nent;
  // Overrun check against the consumer index the driver publishes in the CQ doorbell record
  // (read uncounted: hardware keeps it cached, docs/model.md). Indexes only move on, so the one
  // last read answers as long as it leaves room; the record is read again when it does not (a
  // record that cannot be read is then a fault, as before).
  if (((cq->pi - cq->ci_seen) & 0xffffff) >= nent) {
    const std::optional<uint32_t> dbrec = dev_.read_dbrec_be32(cq->dbrec, false);
    if (!dbrec) return fail_cq(qp, *cq, cqn);
    cq->ci_seen = *dbrec & 0xffffff;
  }
  if (((cq->pi - cq->ci_seen) & 0xffffff) >= nent) {
    // Overrun (IBA 11.6.3.2, CQ Error): the CQ goes to error and its consumer hears of it.
    ++dev_.stats_->cq_overruns;
    return fail_cq(qp, *cq, cqn);
  }
  Cqe64 c = cqe;
  // The clock is read once per entry point (Device::now()): CQEs written by one doorbell, packet
  // or timer share their timestamp.
  if (cq->timestamps && !is_error) c.timestamp = dev_.clock_ticks();
  c.op_own = static_cast<uint8_t>((c.op_own & ~kCqeOwnerBit) | ((cq->pi >> cq->log_nent) & 1));
  const uint64_t addr = cq->ring + static_cast<uint64_t>(cq->pi & (nent - 1)) * kCqeBytes;
  if (!dev_.dma_.dma_write_publish(addr, &c, sizeof c, pcie::TlpCause::kCqeWrite)) {
    dev_.fault();
    return fail_cq(qp, *cq, cqn);
  }
  ++cq->pi;
  ++dev_.stats_->cqes_written;
  if (cq->armed && (!cq->armed_solicited_only || solicited || is_error)) on_qualifying_cqe(*cq, cqn);
}

void Completer::on_qualifying_cqe(CompletionQueue& cq, uint32_t cqn) {
  ++cq.mod_pending;
  const uint32_t count = cq.mod_count > 1 ? cq.mod_count : 1;
  if (cq.mod_pending >= count) {
    raise_event(cq, cqn);
    return;
  }
  if (cq.mod_period_us != 0 && cq.mod_deadline.count() < 0) {
    dev_.schedule_cq(cq, dev_.now() + Picoseconds(int64_t{cq.mod_period_us} * 1'000'000));
  }
}

void Completer::moderation_expired(CompletionQueue& cq, uint32_t cqn) {
  cq.mod_deadline = Picoseconds(-1);
  if (cq.armed && cq.mod_pending != 0) raise_event(cq, cqn);
}

void Completer::fail_cq(const QueuePair& qp, CompletionQueue& cq, uint32_t cqn) {
  cq.in_error = true;
  dev_.raise_cq_error(cq, cqn);
  dev_.defer_fatal(qp);
}

void Completer::arm(CompletionQueue& cq, uint32_t cqn, bool solicited_only, uint32_t ci) {
  cq.armed = true;
  cq.armed_solicited_only = solicited_only;
  // CQEs written since the last event (while the CQ was not armed) that are past the arm's consumer
  // index are completions nobody was told of: their event goes now (moderation does not hold it).
  // One that already raised the event raises no second: a consumer that takes the event, arms, and
  // then polls (perftest's latency tests, which poll once per event) stays in step. A
  // solicited-only arm waits for the next solicited (or error) CQE.
  const uint32_t unpolled = (cq.pi - ci) & kCqIndexMask;
  const uint32_t since_event = cq.pi - cq.event_pi;
  if (!solicited_only && unpolled != 0 && since_event != 0) raise_event(cq, cqn);
}

void Completer::raise_event(CompletionQueue& cq, uint32_t cqn) {
  cq.armed = false;
  cq.event_pi = cq.pi;
  cq.mod_pending = 0;
  cq.mod_deadline = Picoseconds(-1);
  EventQueue* eq = dev_.eqs_.find(cq.eqn);
  if (eq == nullptr || cq.completion_held) return;
  Eqe e{};
  e.type = kEqeTypeCompletion;
  e.element = cqn;
  if (dev_.try_write_eqe(*eq, e)) return;
  // The EQ is full: the event waits in the device (one per arm, so one per CQ at most) until the
  // consumer index frees a slot (Device::write_held_events).
  cq.completion_held = true;
  ++eq->held;
}

}  // namespace softhca::hca
