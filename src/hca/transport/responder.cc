#include "hca/transport/responder.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>

#include "hca/completer.h"
#include "hwif/doorbell_record.h"

namespace softhca::hca {

using namespace hwif;
using fabric::OpKind;

namespace {
constexpr uint32_t kGrhSlotBytes = 40;  // UD receive buffers start with room for a GRH
}  // namespace

uint32_t Responder::mtu() const { return mtu_bytes(qp_.attr.path_mtu); }

uint32_t Responder::replay_slots() const {
  return std::clamp<uint32_t>(qp_.attr.max_dest_rd_atomic, 1, ResponderState::kAtomicReplaySlots);
}

uint32_t Responder::pdn_for_recv() const {
  if (qp_.type == QpType::kXrcTgt) return protection_pdn();
  if (qp_.srqn == kNoSrq) return qp_.pdn;
  const SharedReceiveQueue* srq = dev_.srqs_.find(qp_.srqn);
  return srq ? srq->pdn : qp_.pdn;
}

// A TGT QP has no PD: the XRC SRQ its request names protects the memory the request reaches
// (IBA 9.8.x). on_xrc() checked that SRQ, so it is there whenever this is asked.
uint32_t Responder::protection_pdn() const {
  if (qp_.type != QpType::kXrcTgt) return qp_.pdn;
  const SharedReceiveQueue* srq = dev_.srqs_.find(qp_.resp.xrc_srqn);
  return srq ? srq->pdn : 0;
}

void Responder::on_request(const fabric::PacketFields& f, std::span<const uint8_t> payload) {
  switch (qp_.type) {
    case QpType::kRc: return on_rc(f, payload);
    case QpType::kUc: return on_uc(f, payload);
    case QpType::kUd: return on_ud(f, payload);
    case QpType::kXrcTgt: return on_xrc(f, payload);
    case QpType::kXrcIni: return;  // accept() gives it responses only
  }
}

// XRC TGT: RC's rules, through the SRQ the request's XRCETH names. That SRQ must be an XRC SRQ
// of the QP's domain; a request naming another is refused as an invalid request (NAK, the QP to
// error) once its PSN is the expected one (on_rc()).
void Responder::on_xrc(const fabric::PacketFields& f, std::span<const uint8_t> payload) {
  if (!f.xrceth) return dev_.stats_->drop(DropReason::kMalformed);
  // Kept after the request: a receive WQE held by a message in progress belongs to it (flush()).
  qp_.resp.xrc_srqn = f.xrceth->srqn;
  on_rc(f, payload);
}

// ---- receive WQEs -----------------------------------------------------------------------------

bool Responder::take_rq_wqe(RecvBuffer& rb) {
  if (qp_.rq_ci == qp_.rq_posted_cached) {
    const auto posted = dev_.read_dbrec_be32(qp_.dbrec + offsetof(QpDbRec, rq_counter), true);
    if (!posted) return ring_fault();
    qp_.rq_posted_cached = static_cast<uint16_t>(*posted);
    if (qp_.rq_ci == qp_.rq_posted_cached) return false;
  }
  const uint32_t stride = 1u << qp_.log_rq_stride;
  const uint64_t addr = qp_.rq_addr + static_cast<uint64_t>(qp_.rq_ci & ((1u << qp_.log_rq_cnt) - 1)) * stride;
  std::array<DataSeg, kMaxSendSges> segs;
  const uint32_t nsegs = std::min<uint32_t>(stride / sizeof(DataSeg), kMaxSendSges);
  if (!dev_.dma_.dma_read(addr, segs.data(), nsegs * sizeof(DataSeg), pcie::TlpCause::kRecvWqeRead)) {
    dev_.fault();
    return ring_fault();
  }
  rb = RecvBuffer{};
  for (uint32_t i = 0; i < nsegs && segs[i].lkey.get() != kInvalidLkey; ++i) {
    rb.sge[rb.num_sge++] = Sge{segs[i].addr.get(), segs[i].byte_count.get(), segs[i].lkey.get()};
    rb.capacity += segs[i].byte_count.get();
  }
  rb.wqe_counter = qp_.rq_ci++;
  rb.valid = true;
  return true;
}

bool Responder::take_srq_wqe(RecvBuffer& rb, uint32_t srqn) {
  SharedReceiveQueue* srq = dev_.srqs_.find(srqn);
  if (srq == nullptr) return false;
  if (srq->consumed == srq->posted_cached) {
    const auto posted = dev_.read_dbrec_be32(srq->dbrec + offsetof(SrqDbRec, counter), true);
    if (!posted) return ring_fault();
    srq->posted_cached = static_cast<uint16_t>(*posted);
    if (srq->consumed == srq->posted_cached) return false;
  }
  const uint32_t stride = 1u << srq->log_stride;
  const uint64_t addr = srq->ring + static_cast<uint64_t>(srq->head & ((1u << srq->log_wqe_cnt) - 1)) * stride;
  struct {
    SrqNextSeg next;
    std::array<DataSeg, kMaxSendSges> segs;
  } wqe;
  const uint32_t bytes = std::min<uint32_t>(stride, sizeof wqe);
  if (!dev_.dma_.dma_read(addr, &wqe, bytes, pcie::TlpCause::kRecvWqeRead)) {
    dev_.fault();
    return ring_fault();
  }
  const uint32_t nsegs = (bytes - sizeof(SrqNextSeg)) / sizeof(DataSeg);
  rb = RecvBuffer{};
  for (uint32_t i = 0; i < nsegs && wqe.segs[i].lkey.get() != kInvalidLkey; ++i) {
    rb.sge[rb.num_sge++] = Sge{wqe.segs[i].addr.get(), wqe.segs[i].byte_count.get(), wqe.segs[i].lkey.get()};
    rb.capacity += wqe.segs[i].byte_count.get();
  }
  rb.wqe_counter = srq->head;
  rb.valid = true;
  srq->head = wqe.next.next_wqe_index.get();
  ++srq->consumed;
  if (srq->limit != 0) check_srq_limit(*srq, srqn);
  return true;
}

// IBA 10.2.9.3 / 11.6.3.1 (SRQ Limit Reached): once the WQEs the SRQ holds drop below its armed
// limit, one event and the limit is disarmed. The count the cache gives may be stale (WQEs posted
// since): the doorbell record is read again, uncounted as for the CQ's (docs/model.md), before
// the event is raised.
void Responder::check_srq_limit(SharedReceiveQueue& srq, uint32_t srqn) {
  if (static_cast<uint16_t>(srq.posted_cached - srq.consumed) >= srq.limit) return;
  const auto posted = dev_.read_dbrec_be32(srq.dbrec + offsetof(SrqDbRec, counter), false);
  if (!posted) return;
  srq.posted_cached = static_cast<uint16_t>(*posted);
  if (static_cast<uint16_t>(srq.posted_cached - srq.consumed) >= srq.limit) return;
  srq.limit = 0;
  dev_.raise_srq_limit(srq, srqn);
}

bool Responder::take_recv_wqe(RecvBuffer& rb) {
  if (qp_.type == QpType::kXrcTgt) return take_srq_wqe(rb, qp_.resp.xrc_srqn);
  return qp_.srqn == kNoSrq ? take_rq_wqe(rb) : take_srq_wqe(rb, qp_.srqn);
}

bool Responder::scatter_recv(RecvBuffer& rb, std::span<const uint8_t> data) {
  uint64_t offset = rb.offset;
  for (uint32_t i = 0; i < rb.num_sge && !data.empty(); ++i) {
    const Sge& s = rb.sge[i];
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    const auto n = static_cast<uint32_t>(std::min<uint64_t>(s.length - offset, data.size()));
    const Translation t = dev_.mkeys_.translate(s.lkey, pdn_for_recv(), s.addr + offset, n, kAccessLocalWrite);
    if (t.result != KeyCheck::kOk) return false;
    if (!dev_.dma_.dma_write(t.host_addr, data.data(), n, pcie::TlpCause::kPayloadWrite)) return dev_.fault();
    data = data.subspan(n);
    rb.offset += n;
    offset = 0;
  }
  return true;
}

void Responder::complete_recv(const fabric::PacketFields& f, CqeOpcode op, uint32_t byte_len,
                              std::optional<uint32_t> imm) {
  Completer::RecvInfo info;
  info.opcode = op;
  info.wqe_counter = qp_.resp.recv.wqe_counter;
  info.byte_len = byte_len;
  info.imm = imm.value_or(f.imm.value_or(0));
  info.solicited = f.solicited;
  info.slid = f.slid.value();
  info.sl = f.sl;
  info.grh = f.grh.has_value();
  info.src_qpn = f.deth ? f.deth->src_qp.value() : 0;
  Completer(dev_).recv_done(qp_, info);
  qp_.resp.recv.valid = false;
}

// ---- placing requests -------------------------------------------------------------------------

Responder::Placed Responder::place_send(const fabric::PacketFields& f, std::span<const uint8_t> payload) {
  const fabric::OpcodeInfo info = fabric::opcode_info(f.opcode);
  RecvBuffer& rb = qp_.resp.recv;
  if (info.starts_message()) {
    // A receive WQE still held with nothing placed (UC after a lost message) is used again.
    if (rb.valid && rb.offset != 0) return Placed::kInvalid;
    if (!rb.valid && !take_recv_wqe(rb)) return ring_fault_ ? Placed::kLocalProt : Placed::kNoRecv;
  } else if (!rb.valid) {
    return Placed::kInvalid;
  }
  // Every packet but the last of a message carries exactly one MTU (IBA 9.7.3.1.1 / C9-85).
  if (!info.ends_message() && payload.size() != mtu()) return Placed::kInvalid;
  if (rb.offset + payload.size() > rb.capacity) return Placed::kLength;
  if (!scatter_recv(rb, payload)) return Placed::kLocalProt;
  if (info.ends_message()) {
    if (f.ieth) {
      // After every other check (IBA o9-5.2.1): a key that is not a type 2 window of this QP
      // bound to it is an invalid request, NAKed; the receive WQE is flushed with the QP.
      const uint32_t key = f.ieth->rkey.value();
      if (!dev_.invalidate_window(key, protection_pdn(), qp_.qpn)) return Placed::kInvalid;
      complete_recv(f, CqeOpcode::kRespSendInv, static_cast<uint32_t>(rb.offset), std::bit_cast<uint32_t>(Be32(key)));
      return Placed::kOk;
    }
    const bool imm = f.imm.has_value();
    complete_recv(f, imm ? CqeOpcode::kRespSendImm : CqeOpcode::kRespSend, static_cast<uint32_t>(rb.offset));
  }
  return Placed::kOk;
}

Responder::Placed Responder::place_write(const fabric::PacketFields& f, std::span<const uint8_t> payload) {
  const fabric::OpcodeInfo info = fabric::opcode_info(f.opcode);
  ResponderState& st = qp_.resp;
  if (info.starts_message()) {
    if (!f.reth) return Placed::kInvalid;
    const uint64_t len = f.reth->dma_len;
    Translation t;
    if (const Placed p = check_write_target(f.reth->va, f.reth->rkey.value(), len, t); p != Placed::kOk) return p;
    st.write_active = true;
    st.write_host_addr = t.host_addr;
    st.write_remaining = len;
    st.write_length = len;
  } else if (!st.write_active) {
    return Placed::kInvalid;
  }
  if (!info.ends_message() && payload.size() != mtu()) return Placed::kInvalid;
  if (payload.size() > st.write_remaining) return Placed::kLength;
  if (info.ends_message() && payload.size() != st.write_remaining) return Placed::kLength;
  // WRITE with immediate consumes a receive WQE; without one the packet is refused (RNR) before
  // any byte is written.
  if (info.ends_message() && f.imm && !qp_.resp.recv.valid && !take_recv_wqe(qp_.resp.recv))
    return ring_fault_ ? Placed::kLocalProt : Placed::kNoRecv;
  // A fault on the target memory is the remote access error a requester is told about.
  if (!dev_.dma_.dma_write(st.write_host_addr, payload.data(), payload.size(), pcie::TlpCause::kPayloadWrite)) {
    dev_.fault();
    st.write_active = false;
    return Placed::kAccess;
  }
  st.write_host_addr += payload.size();
  st.write_remaining -= payload.size();
  if (info.ends_message()) {
    st.write_active = false;
    if (f.imm) complete_recv(f, CqeOpcode::kRespWrImm, static_cast<uint32_t>(st.write_length));
  }
  return Placed::kOk;
}

Responder::Placed Responder::check_write_target(uint64_t va, uint32_t rkey, uint64_t len, Translation& t) const {
  if (!takes_write_of(len)) return (qp_.attr.access_flags & kAccessRemoteWrite) ? Placed::kInvalid : Placed::kAccess;
  t = Translation{KeyCheck::kOk, 0};
  if (len > 0) t = dev_.mkeys_.translate_remote(rkey, protection_pdn(), qp_.qpn, va, len, kAccessRemoteWrite);
  return t.result == KeyCheck::kOk ? Placed::kOk : Placed::kAccess;
}

void Responder::fill_reply_route(fabric::PacketFields& reply, const fabric::PacketFields& req) const {
  reply.sl = req.sl;
  reply.slid = Lid(dev_.lid());
  reply.dlid = req.slid;
  reply.pkey = req.pkey;
  reply.dest_qp = Qpn(qp_.attr.dest_qpn);
  if (req.grh) {
    const uint8_t hops = qp_.attr.av.hop_limit ? qp_.attr.av.hop_limit : 0xff;
    reply.grh = fabric::GrhFields{req.grh->traffic_class, req.grh->flow_label, hops, req.grh->dgid, req.grh->sgid};
  }
}

Responder::Placed Responder::execute_read(const fabric::PacketFields& f) {
  if (!f.reth) return Placed::kInvalid;
  if (!(qp_.attr.access_flags & kAccessRemoteRead)) return Placed::kAccess;
  const uint64_t len = f.reth->dma_len;
  if (len > dev_.config_.caps.max_msg_sz) return Placed::kInvalid;
  Translation t{KeyCheck::kOk, 0};
  if (len > 0) t = dev_.mkeys_.translate_remote(f.reth->rkey.value(), protection_pdn(), qp_.qpn, f.reth->va, len, kAccessRemoteRead);
  if (t.result != KeyCheck::kOk) return Placed::kAccess;
  const uint32_t m = mtu();
  const uint32_t n = len == 0 ? 1 : static_cast<uint32_t>(ceil_div(len, m));
  for (uint32_t i = 0; i < n; ++i) {
    fabric::PacketFields r;
    fill_reply_route(r, f);
    const PacketPosition pos = position_of(i, n);
    r.opcode = reliable_opcode(qp_.type, pos == PacketPosition::kOnly    ? BthOpcode::kRcRdmaReadResponseOnly
                                         : pos == PacketPosition::kFirst ? BthOpcode::kRcRdmaReadResponseFirst
                                         : pos == PacketPosition::kLast  ? BthOpcode::kRcRdmaReadResponseLast
                                                                         : BthOpcode::kRcRdmaReadResponseMiddle);
    r.psn = Psn(psn_add(f.psn.value(), i));
    if (pos != PacketPosition::kMiddle) r.aeth = fabric::AethFields{ack_syndrome(), qp_.resp.msn};
    const uint64_t off = static_cast<uint64_t>(i) * m;
    const auto chunk = static_cast<uint32_t>(std::min<uint64_t>(m, len - off));
    // A fault ends the response; the NAK that follows fails the READ at the requester.
    // Copied now, never read in place: a WRITE queued behind this READ on the same QP must not
    // change the data the READ returns (the responder executes requests in order).
    uint8_t* buf = dev_.payload_buffer_for(r);
    if (!dev_.dma_.dma_read(t.host_addr + off, buf, chunk, pcie::TlpCause::kPayloadRead)) {
      dev_.fault();
      return Placed::kAccess;
    }
    dev_.transmit(r, std::span<const uint8_t>(buf, chunk));
  }
  return Placed::kOk;
}

Responder::Placed Responder::execute_atomic(const fabric::PacketFields& f) {
  if (!f.atomic_eth) return Placed::kInvalid;
  if (!(qp_.attr.access_flags & kAccessRemoteAtomic)) return Placed::kAccess;
  const fabric::AtomicEthFields& a = *f.atomic_eth;
  if (a.va % 8 != 0) return Placed::kInvalid;  // atomics need natural alignment (IBA 9.4.5)
  const Translation t = dev_.mkeys_.translate_remote(a.rkey.value(), protection_pdn(), qp_.qpn, a.va, 8, kAccessRemoteAtomic);
  if (t.result != KeyCheck::kOk) return Placed::kAccess;
  if (t.host_addr % 8 != 0) return Placed::kInvalid;  // an MR whose iova and address differ mod 8
  const std::optional<uint64_t> result = fabric::opcode_info(f.opcode).kind == OpKind::kCompareSwap
                                             ? dev_.dma_.atomic_compare_swap(t.host_addr, a.compare, a.swap_add)
                                             : dev_.dma_.atomic_fetch_add(t.host_addr, a.swap_add);
  if (!result) {
    dev_.fault();
    return Placed::kAccess;
  }
  const uint64_t orig = *result;
  ResponderState& st = qp_.resp;
  st.atomic_replay[st.atomic_replay_next % replay_slots()] = ResponderState::AtomicReplay{f.psn.value(), orig};
  st.atomic_replay_next = (st.atomic_replay_next + 1) % replay_slots();
  fabric::PacketFields r;
  fill_reply_route(r, f);
  r.opcode = reliable_opcode(qp_.type, BthOpcode::kRcAtomicAcknowledge);
  r.psn = f.psn;
  r.aeth = fabric::AethFields{ack_syndrome(), psn_add(qp_.resp.msn, 1)};
  r.atomic_ack = fabric::AtomicAckFields{orig};
  dev_.transmit(r, {});
  return Placed::kOk;
}

void Responder::send_ack(uint32_t psn, uint8_t syndrome) {
  const fabric::AethFields aeth{syndrome, qp_.resp.msn};
  if (fabric::is_ack(syndrome)) {
    ++dev_.stats_->acks_sent;
    // A burst's ACKs, looped back (RC ACKs only merge with each other).
    if (qp_.type == QpType::kRc && dev_.merge_ack_to_peer(qp_, Psn(psn), aeth)) return;
  } else if (fabric::is_rnr_nak(syndrome)) {
    ++dev_.stats_->rnr_naks_sent;
  } else {
    ++dev_.stats_->naks_sent;
  }
  fabric::PacketFields r;
  dev_.route_to_peer(qp_, r);
  r.opcode = reliable_opcode(qp_.type, BthOpcode::kRcAcknowledge);
  r.psn = Psn(psn);
  r.aeth = aeth;
  dev_.transmit(r, {});
}

// ---- RC -----------------------------------------------------------------------------------------

void Responder::rc_duplicate(const fabric::PacketFields& f) {
  ++dev_.stats_->duplicates;
  const fabric::OpcodeInfo info = fabric::opcode_info(f.opcode);
  if (info.kind == OpKind::kRdmaReadRequest) {
    execute_read(f);  // READs are idempotent: answer again
    return;
  }
  if (info.kind == OpKind::kCompareSwap || info.kind == OpKind::kFetchAdd) {
    // Never execute an atomic twice: the saved result answers it (IBA 9.7). One that is
    // no longer saved is too old to be awaited (the requester's window has moved past it).
    for (uint32_t i = 0; i < replay_slots(); ++i) {
      const ResponderState::AtomicReplay& saved = qp_.resp.atomic_replay[i];
      if (saved.psn != f.psn.value()) continue;
      fabric::PacketFields r;
      fill_reply_route(r, f);
      r.opcode = reliable_opcode(qp_.type, BthOpcode::kRcAtomicAcknowledge);
      r.psn = f.psn;
      r.aeth = fabric::AethFields{ack_syndrome(), qp_.resp.msn};
      r.atomic_ack = fabric::AtomicAckFields{saved.orig};
      dev_.transmit(r, {});
      return;
    }
  }
  // Anything else: acknowledge what has arrived so far (IBA 9.7.5.1.1).
  send_ack(psn_add(qp_.resp.epsn, Psn::kMask), ack_syndrome());
}

void Responder::report_rc_error(const fabric::PacketFields& f, Placed p) {
  // An error with a receive WQE to complete is reported in its CQE; one without (an RDMA or
  // atomic request) as the affiliated asynchronous error of IBA 11.6.3.1 that it is.
  uint8_t event = 0;
  switch (p) {
    case Placed::kOk: return;
    case Placed::kNoRecv:
      // The packets behind this one are dropped silently until the requester comes back to it.
      qp_.resp.nak_sent = true;
      return send_ack(f.psn.value(), fabric::rnr_nak_syndrome(qp_.attr.min_rnr_timer));
    case Placed::kAccess:
      send_ack(f.psn.value(), fabric::nak_syndrome(NakCode::kRemoteAccessError));
      event = kEqeTypeWqAccessError;  // Local Access Violation Work Queue Error
      break;
    case Placed::kInvalid:
      send_ack(f.psn.value(), fabric::nak_syndrome(NakCode::kInvalidRequest));
      event = kEqeTypeWqInvalidRequest;  // Invalid Request Local Work Queue Error
      break;
    case Placed::kLength:
      if (qp_.resp.recv.valid)
        Completer(dev_).recv_error(qp_, qp_.resp.recv.wqe_counter, CqeSyndrome::kLocLenErr);
      else
        event = kEqeTypeWqInvalidRequest;
      qp_.resp.recv.valid = false;
      send_ack(f.psn.value(), fabric::nak_syndrome(NakCode::kInvalidRequest));
      break;
    case Placed::kLocalProt:
      if (qp_.resp.recv.valid)
        Completer(dev_).recv_error(qp_, qp_.resp.recv.wqe_counter, CqeSyndrome::kLocProtErr);
      else
        event = kEqeTypeWqCatastrophic;  // its receive queue could not be read
      qp_.resp.recv.valid = false;
      send_ack(f.psn.value(), fabric::nak_syndrome(NakCode::kRemoteOperationalError));
      break;
  }
  if (event != 0) dev_.raise_qp_event(qp_, event);
  // NAKs other than RNR put the responder QP in the error state too (IBA 9.9.3.1, class J).
  dev_.enter_error(qp_);
}

void Responder::on_rc(const fabric::PacketFields& f, std::span<const uint8_t> payload) {
  ResponderState& st = qp_.resp;
  const int32_t d = psn_cmp(f.psn.value(), st.epsn);
  if (d < 0) return rc_duplicate(f);
  if (d > 0) {
    // A gap: NAK once with the PSN we expect, then drop until it arrives.
    if (!st.nak_sent) {
      st.nak_sent = true;
      send_ack(st.epsn, fabric::nak_syndrome(NakCode::kPsnSequenceError));
    }
    return dev_.stats_->drop(DropReason::kPsnOutOfWindow);
  }
  const fabric::OpcodeInfo info = fabric::opcode_info(f.opcode);
  Placed p = Placed::kInvalid;
  // XRC: a request into an SRQ of another domain (or none) executes nothing.
  if (qp_.type == QpType::kXrcTgt && dev_.xrc_srq_of(qp_) == nullptr) return report_rc_error(f, p);
  switch (info.kind) {
    case OpKind::kSend: p = place_send(f, payload); break;
    case OpKind::kRdmaWrite: p = place_write(f, payload); break;
    case OpKind::kRdmaReadRequest: p = execute_read(f); break;
    case OpKind::kCompareSwap:
    case OpKind::kFetchAdd: p = execute_atomic(f); break;
    default: break;
  }
  if (p != Placed::kOk) return report_rc_error(f, p);
  st.nak_sent = false;  // the expected PSN arrived: a later gap may be NAKed again
  if (info.kind == OpKind::kRdmaReadRequest) {
    const uint64_t len = f.reth->dma_len;
    st.epsn = psn_add(st.epsn, len == 0 ? 1 : static_cast<uint32_t>(ceil_div(len, mtu())));
    st.msn = psn_add(st.msn, 1);
    return;
  }
  st.epsn = psn_add(st.epsn, 1);
  if (info.ends_message()) st.msn = psn_add(st.msn, 1);
  const bool atomic = info.kind == OpKind::kCompareSwap || info.kind == OpKind::kFetchAdd;
  if (f.ack_req && !atomic) send_ack(f.psn.value(), ack_syndrome());
}

// ---- UC and UD ----------------------------------------------------------------------------------

void Responder::on_uc(const fabric::PacketFields& f, std::span<const uint8_t> payload) {
  ResponderState& st = qp_.resp;
  const fabric::OpcodeInfo info = fabric::opcode_info(f.opcode);
  if (f.psn.value() != st.epsn) {
    // Lost packets: the message in progress is dropped (its receive WQE is used again by the next
    // message); a new message may start right here.
    st.uc_drop_message = !info.starts_message();
    st.write_active = false;
    if (st.recv.valid) st.recv.offset = 0;
    dev_.stats_->drop(DropReason::kPsnOutOfWindow);
  }
  st.epsn = psn_add(f.psn.value(), 1);
  if (st.uc_drop_message) {
    if (!info.starts_message()) return;
    st.uc_drop_message = false;
  }
  Placed p = info.kind == OpKind::kSend ? place_send(f, payload) : place_write(f, payload);
  if (p == Placed::kOk) return;
  dev_.stats_->drop(p == Placed::kNoRecv ? DropReason::kNoReceiveWqe : DropReason::kMalformed);
  if (p == Placed::kLength && st.recv.valid) {
    Completer(dev_).recv_error(qp_, st.recv.wqe_counter, CqeSyndrome::kLocLenErr);
    st.recv.valid = false;
  }
  st.write_active = false;
  st.uc_drop_message = !info.ends_message();
}

void Responder::on_ud(const fabric::PacketFields& f, std::span<const uint8_t> payload) {
  if (!f.deth) return dev_.stats_->drop(DropReason::kMalformed);
  if (f.deth->qkey != qp_.attr.qkey) return dev_.stats_->drop(DropReason::kBadQkey);
  RecvBuffer& rb = qp_.resp.recv;
  if (!take_recv_wqe(rb)) {
    if (ring_fault_) return dev_.fatal_error(qp_);  // its receive queue cannot be read
    return dev_.stats_->drop(DropReason::kNoReceiveWqe);
  }
  if (payload.size() + kGrhSlotBytes > rb.capacity) {
    Completer(dev_).recv_error(qp_, rb.wqe_counter, CqeSyndrome::kLocLenErr);
    rb.valid = false;
    return;
  }
  if (f.grh) {
    fabric::Grh g{};
    g.set_word0(fabric::kGrhIpVersion, f.grh->traffic_class, f.grh->flow_label);
    g.pay_len = static_cast<uint16_t>(payload.size());
    g.next_header = fabric::kGrhNextHeaderIba;
    g.hop_limit = f.grh->hop_limit;
    std::memcpy(g.sgid, f.grh->sgid.data(), 16);
    std::memcpy(g.dgid, f.grh->dgid.data(), 16);
    if (!scatter_recv(rb, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&g), sizeof g))) {
      Completer(dev_).recv_error(qp_, rb.wqe_counter, CqeSyndrome::kLocProtErr);
      rb.valid = false;
      return;
    }
  } else {
    rb.offset = kGrhSlotBytes;  // the first 40 bytes stay untouched
  }
  if (!scatter_recv(rb, payload)) {
    Completer(dev_).recv_error(qp_, rb.wqe_counter, CqeSyndrome::kLocProtErr);
    rb.valid = false;
    return;
  }
  complete_recv(f, f.imm ? CqeOpcode::kRespSendImm : CqeOpcode::kRespSend,
                static_cast<uint32_t>(payload.size() + kGrhSlotBytes));
}

// ---- flush --------------------------------------------------------------------------------------

void Responder::flush() {
  Completer done(dev_);
  if (qp_.resp.recv.valid) {
    done.recv_error(qp_, qp_.resp.recv.wqe_counter, CqeSyndrome::kWrFlushErr);
  }
  qp_.resp.recv.valid = false;
  if (qp_.srqn != kNoSrq || is_xrc(qp_.type)) return;  // no receive queue of its own
  const auto posted = dev_.read_dbrec_be32(qp_.dbrec + offsetof(QpDbRec, rq_counter), true);
  if (!posted) return;  // a receive queue that cannot be read has nothing to flush
  qp_.rq_posted_cached = static_cast<uint16_t>(*posted);
  while (qp_.rq_ci != qp_.rq_posted_cached) done.recv_error(qp_, qp_.rq_ci++, CqeSyndrome::kWrFlushErr);
}

}  // namespace softhca::hca
