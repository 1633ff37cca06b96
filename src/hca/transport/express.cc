// The express path of a looped-back RC WRITE or SEND (docs/live-mode.md, "Express WRITEs",
// "Express SENDs").
//
// A WRITE from one QP of this device to another would go out as packets into the loopback queue,
// come back out of it, and be placed packet by packet, each with its PacketFields built, sized,
// queued and dispatched. When nothing but positive ACKs waits in that queue, delivering the packets
// at once changes no outcome: the responder checks what it would check, and the bytes move by one
// copy. Every packet is still counted sent and received (device and QP counters), and every
// payload DMA as the per-packet DMA it stands for. The ACKs the packets ask for (the last one, one
// in 64) are counted likewise; when they come straight back to the requester (its peer's peer is
// itself, the usual case), the requester takes the last one once pump() has sent what it could, as
// if it had been delivered from the queue; otherwise the responder sends them as on the packet path.
//
// A SEND lands in the receive WQE its first packet would take, whose CQE is written as the last
// packet would write it.
//
// Anything the responder would refuse (wrong PSN, key, access, state, P_Key, source; no receive
// WQE, one too short), a payload not in one mapping on either side (or not in a receive WQE's first
// SGE), a WRITE with immediate, a SEND with invalidate, GRH routes and the Ethernet link take the packet path;
// so does a WRITE through a memory window (a bind or an invalidation inside one entry point would
// leave a key mapped here that no longer opens the memory).
#include <bit>
#include <cstddef>

#include "base/copy.h"
#include "hca/completer.h"
#include "hca/transport/requester.h"
#include "hca/transport/responder.h"
#include "hwif/doorbell_record.h"

namespace softhca::hca {

using namespace hwif;

bool Responder::takes_express(BthOpcode first, uint16_t pkey) const {
  return !dev_.refuses(qp_, first, pkey);
}

std::optional<Responder::ExpressTarget> Responder::express_target_new_key(uint64_t va, uint32_t rkey, uint64_t len,
                                                                          MappedKey& key) const {
  Translation t;
  if (check_write_target(va, rkey, len, t) != Placed::kOk) return std::nullopt;
  if (len == 0) return ExpressTarget{};
  if (t.key->is_window()) return std::nullopt;
  key = MappedKey{*t.key, dev_.dma_.map_prefix(t.key->host_addr, t.key->length)};
  uint8_t* memory = key.at(rkey, va, len);
  if (memory == nullptr) return std::nullopt;
  return ExpressTarget{t.host_addr, memory};
}

bool Requester::try_open_link() {
  link_.status = ExpressLink::Status::kClosed;
  const AddressVector& av = qp_.attr.av;
  // A WRITE that loops back: our own LID, no GRH, on InfiniBand.
  if (!dev_.internal_loopback_ || dev_.ethernet() || av.is_global || av.dlid != dev_.lid() || dev_.port_down())
    return false;
  // The target takes our WRITEs (its state, transport and P_Key) and they come from where it is
  // connected (Device::from_peer(): our LID, checked once here for the link's life; no GRH).
  QueuePair* target = dev_.qps_.find(qp_.attr.dest_qpn);
  const BthOpcode first = request_opcode(qp_.type, WqeOpcode::kRdmaWrite, PacketPosition::kFirst);
  if (target == nullptr || target->type != qp_.type ||
      !Responder(dev_, *target).takes_express(first, dev_.config_.port.pkeys[qp_.attr.pkey_index]) ||
      target->attr.av.dlid != dev_.lid())
    return false;
  // A target in RTR that has not yet raised COMM_EST takes the first packet the slow way
  // (Device::accept() raises it).
  if (target->state() == QpState::kRtr && !target->comm_est_raised) return false;
  link_.status = ExpressLink::Status::kOpen;
  link_.target = target;
  link_.target_state = target->state();
  link_.ack_here = qp_.type == QpType::kRc && acks_come_back_from(*target);  // UC: no ACKs
  return true;
}

std::span<const uint8_t> Requester::express_source_new_key(const SendWqe& w) {
  const Sge& s = w.sge[0];
  const Mkey* key = dev_.mkeys_.find(s.lkey);
  if (key == nullptr) return {};
  link_.source = MappedKey{*key, dev_.dma_.map_prefix(key->host_addr, key->length)};
  const uint8_t* memory = link_.source.at(s.lkey, s.addr, w.length);
  return memory != nullptr ? std::span<const uint8_t>(memory, w.length) : std::span<const uint8_t>{};
}

bool Requester::express_source_of(const SendRecord& rec, std::span<const uint8_t>& source) {
  if (rec.wqe.is_inline || rec.wqe.length == 0) return true;
  source = express_source(rec);
  return !source.empty();
}

void Requester::place_express(const SendWqe& w, std::span<const uint8_t> source, uint8_t* memory) {
  const auto len = static_cast<uint32_t>(w.length);
  if (len == 0) return;
  if (w.is_inline) return place_from_ring(dev_.sq_shadow(qp_), w.inline_offset, memory, len);
  place_bytes(memory, source.data(), len);  // the source may be the target's own buffer
}

bool Requester::express_write(const SendRecord& rec) {
  const SendWqe& w = rec.wqe;
  // Into a loopback queue holding only ACKs, to a target whose state is the one checked.
  if (w.opcode != WqeOpcode::kRdmaWrite || !express_open_now()) return false;
  QueuePair& target = *link_.target;
  std::span<const uint8_t> source;
  if (!express_source_of(rec, source)) return false;
  Responder responder(dev_, target);
  const std::optional<Responder::ExpressTarget> dest =
      responder.express_target(rec.first_psn, w.remote_addr, w.rkey, w.length, link_.dest);
  if (!dest) return false;

  // Committed: nothing below can fail. The bytes move first (a peer spinning on the last byte
  // may go on at once), then each packet is counted as the wire would have seen it.
  place_express(w, source, dest->memory);
  ++dev_.stats_->express_writes;
  count_express_packets(rec, responder, dest->host_addr);
  return true;
}

bool Requester::express_send(const SendRecord& rec) {
  const SendWqe& w = rec.wqe;
  // SEND with invalidate changes a key of the target: the packet path.
  if ((w.opcode != WqeOpcode::kSend && w.opcode != WqeOpcode::kSendImm) || !express_open_now()) return false;
  QueuePair& target = *link_.target;
  std::span<const uint8_t> source;
  if (!express_source_of(rec, source)) return false;
  Responder responder(dev_, target);
  const std::optional<Responder::ExpressTarget> dest = responder.express_recv_target(rec.first_psn, w.length, link_.recv);
  if (!dest) return false;

  // Committed, as express_write(): the bytes, the receive CQE (written when the last packet is
  // placed, before its ACK goes back), then the packets counted.
  place_express(w, source, dest->memory);
  ++dev_.stats_->express_sends;
  {
    const Device::QpScope scope(dev_, target);  // the CQE is the target's
    responder.express_received(w, dev_.lid(), qp_.attr.av.sl);
  }
  count_express_packets(rec, responder, dest->host_addr);
  return true;
}

void Requester::count_express_packets(const SendRecord& rec, Responder& responder, uint64_t dest_addr) {
  const SendWqe& w = rec.wqe;
  QueuePair& target = *link_.target;
  QueuePair* sender = dev_.tx_qp_;
  const Device::QpScope scope(dev_, target);  // the ACKs are the target's
  // ACKs that come straight back are counted here and taken by pump() (one: they are cumulative);
  // others go out through the responder as from the packet path.
  const bool ack_here = link_.ack_here;
  const bool rc = qp_.type == QpType::kRc;
  const auto len = static_cast<uint32_t>(w.length);
  const uint32_t m = mtu();
  const uint64_t source_addr = rec.sge0_host_addr;
  for (uint32_t i = 0; i < rec.npkts; ++i) {
    const uint64_t off = uint64_t{i} * m;
    const auto chunk = static_cast<uint32_t>(std::min<uint64_t>(m, len - off));
    const BthOpcode op = request_opcode(qp_.type, w.opcode, position_of(i, rec.npkts));
    const size_t wire_bytes = fabric::local_wire_bytes(op, chunk);
    dev_.count_sent(sender, wire_bytes);
    dev_.count_taken(target, 1, wire_bytes);
    if (chunk > 0) {
      if (!w.is_inline) dev_.dma_.count_read(source_addr + off, chunk, pcie::TlpCause::kPayloadRead);
      dev_.dma_.count_write(dest_addr + off, chunk, pcie::TlpCause::kPayloadWrite);
    }
    const bool last = i + 1 == rec.npkts;
    const bool ack_req = rc && rc_asks_ack(i, rec.npkts);
    responder.express_placed(psn_add(rec.first_psn, i), last, ack_req && !ack_here);
    if (ack_req && ack_here) {
      ++dev_.stats_->acks_sent;
      dev_.count_sent(&target, fabric::local_wire_bytes(BthOpcode::kRcAcknowledge, 0));  // received when taken
      ++express_ack_packets_;
    }
  }
  if (ack_here && rec.npkts > 0) express_acked_ = psn_add(rec.first_psn, rec.npkts - 1);
}

// ---- the responder's side of an express SEND ---------------------------------------------------

bool Responder::express_recv_posted() {
  uint64_t dbrec = 0;
  uint16_t* cached = nullptr;
  uint16_t taken = 0;
  if (qp_.srqn == kNoSrq) {
    dbrec = qp_.dbrec + offsetof(QpDbRec, rq_counter);
    cached = &qp_.rq_posted_cached;
    taken = qp_.rq_ci;
  } else {
    SharedReceiveQueue* srq = dev_.srqs_.find(qp_.srqn);
    if (srq == nullptr) return false;
    dbrec = srq->dbrec + offsetof(SrqDbRec, counter);
    cached = &srq->posted_cached;
    taken = srq->consumed;
  }
  if (*cached != taken) return true;
  // Uncounted and without a fault recorded: the packet path reads it again, counted, when this
  // finds nothing (its RNR NAK) or cannot read it (its error).
  const std::optional<uint32_t> raw = dev_.dma_.read_dbrec(dbrec, pcie::TlpCause::kDbRecRead, false);
  if (!raw) return false;
  const auto posted = static_cast<uint16_t>(std::endian::native == std::endian::little ? __builtin_bswap32(*raw) : *raw);
  if (posted == taken) return false;
  *cached = posted;
  dev_.dma_.count_read(dbrec, sizeof(uint32_t), pcie::TlpCause::kDbRecRead);  // the read take_recv_wqe() would make
  return true;
}

std::optional<Responder::ExpressTarget> Responder::express_recv_target(uint32_t psn, uint64_t len, MappedKey& key) {
  if (psn != qp_.resp.epsn || (qp_.type != QpType::kRc && qp_.type != QpType::kUc) || !whole_message_next())
    return std::nullopt;
  RecvBuffer& rb = qp_.resp.recv;
  // place_send(): a WQE held with bytes placed is a broken message's (kInvalid there).
  if (rb.valid && rb.offset != 0) return std::nullopt;
  // Taken as the first packet would take it; a fault reading it is left to the packet path.
  if (!rb.valid && (!express_recv_posted() || !take_recv_wqe(rb))) return std::nullopt;
  if (len > rb.capacity) return std::nullopt;  // the packet path's length error
  if (len == 0) return ExpressTarget{};
  // One SGE that holds it all, through a key that opens it for local writes in one mapping.
  const Sge& s = rb.sge[0];
  if (s.length < len) return std::nullopt;
  if (uint8_t* memory = key.at(s.lkey, s.addr, len)) return ExpressTarget{key.key().host_at(s.addr), memory};
  const Translation t = dev_.mkeys_.translate(s.lkey, pdn_for_recv(), s.addr, len, kAccessLocalWrite);
  if (t.result != KeyCheck::kOk || t.key->is_window()) return std::nullopt;
  key = MappedKey{*t.key, dev_.dma_.map_prefix(t.key->host_addr, t.key->length)};
  uint8_t* memory = key.at(s.lkey, s.addr, len);
  if (memory == nullptr) return std::nullopt;
  return ExpressTarget{t.host_addr, memory};
}

void Responder::express_received(const SendWqe& w, uint32_t slid, uint8_t sl) {
  // complete_recv() with the fields the last packet would carry (no GRH, no DETH on RC).
  Completer::RecvInfo info;
  info.opcode = w.has_imm() ? CqeOpcode::kRespSendImm : CqeOpcode::kRespSend;
  info.wqe_counter = qp_.resp.recv.wqe_counter;
  info.byte_len = static_cast<uint32_t>(w.length);
  info.imm = w.has_imm() ? w.imm : 0;
  info.solicited = w.solicited;
  info.slid = slid;
  info.sl = sl;
  Completer(dev_).recv_done(qp_, info);
  qp_.resp.recv.valid = false;
}

uint32_t Requester::write_run_room() {
  const RequesterState& rq = qp_.req;
  // execute()'s way to send_express(): a new message at tx_psn (not a resend), no RNR wait.
  if (qp_.type != QpType::kRc || !defer_express_acks_ || rq.rnr_wait || rq.tx_psn != rq.next_psn ||
      rq.tx_psn != rq.max_sent_psn)
    return 0;
  // express_write()'s checks that hold for the whole run: its ACKs come straight back (so nothing
  // is queued meanwhile), the target's state is the one checked, and it expects our next PSN.
  // Its TLP counts are added up per run: no sink looks at single TLPs.
  if (!dev_.dma_.batches_counts() || !open_link() || !link_.ack_here || !dev_.loop_holds_only_acks() ||
      link_.target->state() != link_.target_state || link_.target->resp.epsn != rq.next_psn)
    return 0;
  // fits_window(): message i of the run has PSN next_psn + i.
  const int32_t in_flight = psn_cmp(rq.next_psn, rq.una_psn);
  return in_flight < static_cast<int32_t>(kMaxUnackedPsns) ? kMaxUnackedPsns - in_flight : 0;
}

uint32_t Requester::execute_write_run(uint32_t n) {
  RequesterState& rq = qp_.req;
  QueuePair& target = *link_.target;
  Responder responder(dev_, target);
  const std::span<const uint8_t> ring(dev_.sq_shadow(qp_));
  uint64_t wire_bytes = 0;
  pcie::DevicePort::DmaBatch dma = dev_.dma_.batch();
  uint32_t done = 0;
  for (; done < n; ++done) {
    SendRecord& rec = dev_.record(qp_, rq.exec);
    const SendWqe& w = rec.wqe;
    // write_run_room() checked that the target expects the first one's PSN; each has the next.
    const std::optional<Responder::ExpressTarget> dest = responder.write_target(w.remote_addr, w.rkey, w.length, link_.dest);
    if (!dest) break;
    const auto len = static_cast<uint32_t>(w.length);
    if (w.is_inline) {
      place_from_ring(ring, w.inline_offset, dest->memory, len);
    } else {
      const std::span<const uint8_t> source = express_source(rec);
      if (source.empty()) break;
      place_bytes(dest->memory, source.data(), len);  // the source may be the target's own buffer
      dma.add_read(rec.sge0_host_addr, len);
    }
    dma.add_write(dest->host_addr, len);
    wire_bytes += fabric::local_wire_bytes(BthOpcode::kRcRdmaWriteOnly, len);
    rec.executed = true;
    rec.first_psn = rq.next_psn;
    rec.npkts = 1;
    rq.next_psn = psn_add(rq.next_psn, 1);
    rq.exec = static_cast<uint16_t>(rq.exec + w.bbs);
  }
  if (done == 0) return 0;
  responder.express_run_placed(done);
  dev_.dma_.hold_batch(dma, pcie::TlpCause::kPayloadRead, pcie::TlpCause::kPayloadWrite);
  // Each WRITE: one packet sent and taken, and the ACK it asks for sent (received when taken).
  const uint64_t ack_bytes = fabric::local_wire_bytes(BthOpcode::kRcAcknowledge, 0);
  dev_.stats_->express_writes += done;
  dev_.count_sent(dev_.tx_qp_, done, wire_bytes);
  dev_.count_taken(target, done, wire_bytes);
  dev_.stats_->acks_sent += done;
  dev_.count_sent(&target, done, done * ack_bytes);
  express_ack_packets_ += done;
  express_acked_ = psn_add(rq.next_psn, Psn::kMask);  // the last one's PSN
  rq.tx_psn = rq.max_sent_psn = rq.next_psn;
  return done;
}

bool Requester::acks_come_back_from(const QueuePair& target) const {
  const AddressVector& back = target.attr.av;
  // To our LID and QPN, with a P_Key we take (whether our state takes it is asked when it is
  // taken: take_express_ack()).
  return target.attr.dest_qpn == qp_.qpn && !back.is_global && back.dlid == dev_.lid() &&
         dev_.refuses(qp_, BthOpcode::kRcAcknowledge, dev_.config_.port.pkeys[target.attr.pkey_index]) !=
             DropReason::kBadPkey;
}

}  // namespace softhca::hca
