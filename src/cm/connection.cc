#include "cm/connection.h"

#include <algorithm>
#include <cerrno>

#include "cm/timers.h"

namespace softhca::cm {
namespace {

using State = Connection::State;

Event make_event(EventType type, CommId id, int status = 0) {
  Event e;
  e.type = type;
  e.comm_id = id;
  e.status = status;
  return e;
}

template <class P>
Event make_event(EventType type, CommId id, const P& payload, uint32_t attr_mod = 0) {
  Event e = make_event(type, id);
  e.payload = payload;
  e.attribute_modifier = attr_mod;
  return e;
}

bool waits_for_answer(State s) {
  return s == State::kReqSent || s == State::kMraReqRcvd || s == State::kRepSent || s == State::kMraRepRcvd ||
         s == State::kDreqSent;
}

}  // namespace

std::string_view to_string(Connection::State s) {
  switch (s) {
    case State::kIdle: return "idle";
    case State::kReqSent: return "REQ sent";
    case State::kReqRcvd: return "REQ received";
    case State::kMraReqSent: return "MRA(REQ) sent";
    case State::kMraReqRcvd: return "MRA(REQ) received";
    case State::kRepSent: return "REP sent";
    case State::kRepRcvd: return "REP received";
    case State::kMraRepSent: return "MRA(REP) sent";
    case State::kMraRepRcvd: return "MRA(REP) received";
    case State::kEstablished: return "established";
    case State::kDreqSent: return "DREQ sent";
    case State::kDreqRcvd: return "DREQ received";
    case State::kTimewait: return "timewait";
  }
  return "?";
}

// ---- helpers ------------------------------------------------------------------------------------

Actions Connection::done(Actions a, Status s) const {
  a.status = s;
  a.next_deadline = deadline_;
  return a;
}

Actions Connection::invalid() const { return done(Actions{}, Status(EINVAL)); }

void Connection::send(Actions& a, const MadBytes& mad) const {
  MadToSend m;
  m.to = Destination::kPeer;
  m.comm_id = local_id_;
  m.mad = mad;
  a.mads.push_back(m);
}

MadBytes Connection::encode_msg(uint64_t tid, CmMessage m, uint32_t attr_mod) const {
  CmMad mad;
  mad.transaction_id = tid;
  mad.attribute_modifier = attr_mod;
  mad.message = std::move(m);
  return encode(mad);
}

void Connection::start_retransmit(Picoseconds now, const MadBytes& mad) {
  retransmit_mad_ = mad;
  retries_left_ = max_cm_retries_;
  deadline_ = now + timeout_;
}

void Connection::enter_timewait(Picoseconds now) {
  state_ = State::kTimewait;
  mra_armed_ = false;
  // About the local ACK timeout (cm.c cm_enter_timewait waits ms(av.timeout), av.timeout = PLT + 1).
  deadline_ = now + kernel_time(static_cast<uint8_t>(std::min<int>(packet_life_time_ + 1, kMaxTimeExponent)));
}

void Connection::end() {
  state_ = State::kIdle;
  deadline_.reset();
  have_reply_ = false;
  mra_armed_ = false;
}

// A message from the peer names our id as its remote and, once we know it, its own id as local.
bool Connection::from_peer(CommId their_local, CommId their_remote) const {
  return their_remote == local_id_ && their_local == remote_id_;
}

MadBytes Connection::make_mra(MraedMessage which, uint8_t service_timeout) const {
  Mra m;
  m.local_comm_id = local_id_;
  m.remote_comm_id = remote_id_;
  m.message_mraed = which;
  m.service_timeout = static_cast<uint8_t>(service_timeout & kMaxTimeExponent);
  return encode_msg(req_tid_, m);
}

// ---- calls of the user --------------------------------------------------------------------------

Actions Connection::connect(Picoseconds now, const Req& req, uint8_t packet_life_time, uint32_t attribute_modifier) {
  if (state_ != State::kIdle || used_) return invalid();
  Req r = req;
  r.local_comm_id = local_id_;
  r.local_ca_guid = config_.local_ca_guid;
  used_ = true;
  active_ = true;
  local_qpn_ = Qpn(r.local_qpn.value() & kQpnMask);
  service_id_ = r.service_id;
  req_tid_ = own_tid();
  max_cm_retries_ = static_cast<uint8_t>(r.max_cm_retries & 0xf);
  packet_life_time_ = static_cast<uint8_t>(packet_life_time & kMaxTimeExponent);
  timeout_ = req_retransmit_timeout(packet_life_time_, r.remote_cm_response_timeout);
  const MadBytes mad = encode_msg(req_tid_, r, attribute_modifier);
  state_ = State::kReqSent;
  start_retransmit(now, mad);
  Actions a;
  send(a, mad);
  return done(a);
}

Actions Connection::establish(Picoseconds /*now*/, std::span<const uint8_t> private_data) {
  if (state_ != State::kRepRcvd && state_ != State::kMraRepSent) return invalid();
  Rtu m;
  m.local_comm_id = local_id_;
  m.remote_comm_id = remote_id_;
  m.private_data.assign(private_data);
  reply_mad_ = encode_msg(req_tid_, m);
  have_reply_ = true;
  mra_armed_ = false;
  state_ = State::kEstablished;
  Actions a;
  send(a, reply_mad_);
  a.events.push_back(make_event(EventType::kEstablished, local_id_));
  return done(a);
}

Actions Connection::accept(Picoseconds now, const Rep& rep, uint32_t attribute_modifier) {
  if (state_ != State::kReqRcvd && state_ != State::kMraReqSent) return invalid();
  Rep r = rep;
  r.local_comm_id = local_id_;
  r.remote_comm_id = remote_id_;
  r.local_ca_guid = config_.local_ca_guid;
  local_qpn_ = Qpn(r.local_qpn.value() & kQpnMask);
  const MadBytes mad = encode_msg(req_tid_, r, attribute_modifier);
  state_ = State::kRepSent;
  have_reply_ = false;
  mra_armed_ = false;
  start_retransmit(now, mad);
  Actions a;
  send(a, mad);
  return done(a);
}

Actions Connection::notify_established(Picoseconds /*now*/) {
  if (state_ != State::kRepSent && state_ != State::kMraRepRcvd) return invalid();
  state_ = State::kEstablished;
  deadline_.reset();
  Actions a;
  a.events.push_back(make_event(EventType::kEstablished, local_id_));
  return done(a);
}

Actions Connection::send_mra(Picoseconds /*now*/, uint8_t service_timeout, MraMode mode) {
  MraedMessage which;
  State next;
  if (state_ == State::kReqRcvd) {  // an armed MRA may be re-armed or sent now
    which = MraedMessage::kReq;
    next = State::kMraReqSent;
  } else if (state_ == State::kRepRcvd) {
    which = MraedMessage::kRep;
    next = State::kMraRepSent;
  } else {
    return invalid();
  }
  reply_mad_ = make_mra(which, service_timeout);
  have_reply_ = true;
  Actions a;
  if (mode == MraMode::kOnDuplicate) {
    mra_armed_ = true;  // stays in REQ/REP received until the peer repeats itself
  } else {
    mra_armed_ = false;
    state_ = next;
    send(a, reply_mad_);
  }
  return done(a);
}

Actions Connection::reject(Picoseconds /*now*/, RejReason reason, std::span<const uint8_t> private_data,
                           std::span<const uint8_t> ari) {
  Rej m;
  switch (state_) {
    case State::kReqRcvd:  // before the REQ got an answer its sender knows no id of ours (cm.c)
      m.local_comm_id = CommId(0);
      m.message_rejected = RejectedMessage::kReq;
      break;
    case State::kMraReqSent:
      m.local_comm_id = local_id_;
      m.message_rejected = RejectedMessage::kReq;
      break;
    case State::kRepRcvd:
    case State::kMraRepSent:
      m.local_comm_id = local_id_;
      m.message_rejected = RejectedMessage::kRep;
      break;
    default: return invalid();
  }
  m.remote_comm_id = remote_id_;
  m.reason = reason;
  const size_t ari_n = std::min(ari.size(), kRejAriBytes);
  std::copy_n(ari.begin(), ari_n, m.ari.begin());
  m.ari_length = static_cast<uint8_t>(ari_n);
  m.private_data.assign(private_data);
  Actions a;
  send(a, encode_msg(req_tid_, m));
  end();
  return done(a);
}

Actions Connection::disconnect(Picoseconds now, std::span<const uint8_t> private_data) {
  Actions a;
  if (state_ == State::kEstablished) {
    Dreq m;
    m.local_comm_id = local_id_;
    m.remote_comm_id = remote_id_;
    m.remote_qpn = remote_qpn_;
    m.private_data.assign(private_data);
    const MadBytes mad = encode_msg(own_tid(), m);
    state_ = State::kDreqSent;
    start_retransmit(now, mad);
    send(a, mad);
    return done(a);
  }
  if (state_ == State::kDreqRcvd) {
    Drep m;
    m.local_comm_id = local_id_;
    m.remote_comm_id = remote_id_;
    m.private_data.assign(private_data);
    reply_mad_ = encode_msg(dreq_tid_, m);
    have_reply_ = true;
    send(a, reply_mad_);
    enter_timewait(now);
    return done(a);
  }
  return invalid();
}

Actions Connection::close(Picoseconds now) {
  Actions a;
  Rej rej;
  rej.local_comm_id = local_id_;
  rej.remote_comm_id = remote_id_;
  rej.message_rejected = RejectedMessage::kOther;
  rej.reason = RejReason::kConsumerDefined;
  switch (state_) {
    case State::kIdle:
      used_ = true;  // ended: the table may forget it
      end();
      break;
    case State::kReqSent:
    case State::kMraReqRcvd: {
      rej.remote_comm_id = CommId(0);
      rej.reason = RejReason::kTimeout;
      rej.ari_length = 8;
      for (size_t i = 0; i < 8; ++i) rej.ari[i] = static_cast<uint8_t>(config_.local_ca_guid >> (56 - 8 * i));
      send(a, encode_msg(req_tid_, rej));
      end();
      break;
    }
    case State::kReqRcvd:
    case State::kMraReqSent:
    case State::kRepRcvd:
    case State::kMraRepSent: return reject(now, RejReason::kConsumerDefined);
    case State::kRepSent:
    case State::kMraRepRcvd:
      send(a, encode_msg(req_tid_, rej));
      have_reply_ = false;
      enter_timewait(now);
      break;
    case State::kEstablished: {
      const Actions d = disconnect(now);
      for (const MadToSend& m : d.mads) a.mads.push_back(m);
      have_reply_ = false;
      enter_timewait(now);
      break;
    }
    case State::kDreqSent:
      have_reply_ = false;
      enter_timewait(now);
      break;
    case State::kDreqRcvd: return disconnect(now);
    case State::kTimewait: break;
  }
  return done(a);
}

// ---- MADs from the peer -------------------------------------------------------------------------

Actions Connection::receive(Picoseconds now, const CmMad& mad) {
  return std::visit(
      [&](const auto& m) -> Actions {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, Req>) return on_req(now, mad, m);
        if constexpr (std::is_same_v<M, Mra>) return on_mra(now, m);
        if constexpr (std::is_same_v<M, Rej>) return on_rej(now, mad, m);
        if constexpr (std::is_same_v<M, Rep>) return on_rep(now, mad, m);
        if constexpr (std::is_same_v<M, Rtu>) return on_rtu(m);
        if constexpr (std::is_same_v<M, Dreq>) return on_dreq(now, mad, m);
        if constexpr (std::is_same_v<M, Drep>) return on_drep(now, m);
        return done(Actions{});  // SIDR: not a connection's business
      },
      mad.message);
}

Actions Connection::on_req(Picoseconds /*now*/, const CmMad& mad, const Req& m) {
  Actions a;
  if (state_ == State::kIdle && !used_) {
    used_ = true;
    active_ = false;
    remote_id_ = m.local_comm_id;
    remote_ca_guid_ = m.local_ca_guid;
    remote_qpn_ = m.local_qpn;
    service_id_ = m.service_id;
    req_tid_ = mad.transaction_id;
    max_cm_retries_ = m.max_cm_retries;
    // The passive side's REP wait (cm.c cm_req_handler) and its packet life time (one less than the
    // REQ's local ACK timeout, cm_format_paths_from_req).
    timeout_ = kernel_time(m.local_cm_response_timeout);
    packet_life_time_ = static_cast<uint8_t>(m.primary.local_ack_timeout > 0 ? m.primary.local_ack_timeout - 1 : 0);
    state_ = State::kReqRcvd;
    a.events.push_back(make_event(EventType::kReqReceived, local_id_, m, mad.attribute_modifier));
    return done(a);
  }
  if (active_ || m.local_comm_id != remote_id_ || m.local_ca_guid != remote_ca_guid_) return done(a);
  // A repeated REQ (rdmacm.md 4.8).
  switch (state_) {
    case State::kReqRcvd:
      if (mra_armed_) {
        mra_armed_ = false;
        state_ = State::kMraReqSent;
        send(a, reply_mad_);
      }
      break;
    case State::kMraReqSent: send(a, reply_mad_); break;
    case State::kTimewait: {
      Rej rej;
      rej.local_comm_id = local_id_;
      rej.remote_comm_id = m.local_comm_id;
      rej.message_rejected = RejectedMessage::kReq;
      rej.reason = RejReason::kStaleConnection;
      send(a, encode_msg(mad.transaction_id, rej));
      break;
    }
    default: break;  // REP sent, established, ...: the REP's own retransmission answers
  }
  return done(a);
}

Actions Connection::on_mra(Picoseconds now, const Mra& m) {
  Actions a;
  if (m.remote_comm_id != local_id_) return done(a);
  const bool for_req = (state_ == State::kReqSent || state_ == State::kMraReqRcvd) &&
                       m.message_mraed == MraedMessage::kReq;
  const bool for_rep = (state_ == State::kRepSent || state_ == State::kMraRepRcvd) &&
                       m.message_mraed == MraedMessage::kRep && m.local_comm_id == remote_id_;
  if (!for_req && !for_rep) return done(a);
  // The peer asks for service timeout + packet life time; later resends wait as long (the MAD layer
  // keeps the modified timeout, ib_modify_mad).
  timeout_ = mra_wait(m.service_timeout, packet_life_time_);
  deadline_ = now + timeout_;
  const State next = for_req ? State::kMraReqRcvd : State::kMraRepRcvd;
  if (state_ != next) {
    state_ = next;
    a.events.push_back(make_event(EventType::kMraReceived, local_id_, m));
  }
  return done(a);
}

Actions Connection::on_rej(Picoseconds now, const CmMad& /*mad*/, const Rej& m) {
  Actions a;
  // A REJ 4 from a requester that gave up names us by its own id and CA GUID (ARI) only (cm.c
  // cm_acquire_rejected_id); ConnectionTable finds us that way.
  const bool timeout_from_requester = m.reason == RejReason::kTimeout && !active_ && remote_id_ != CommId(0) &&
                                      m.local_comm_id == remote_id_;
  if (m.remote_comm_id != local_id_ && !timeout_from_requester) return done(a);
  // Before the peer's id is known (REQ sent) a REJ may carry local comm id 0 or the peer's new id.
  const bool id_known = !(state_ == State::kReqSent || state_ == State::kMraReqRcvd);
  if (id_known && m.local_comm_id != remote_id_ && m.local_comm_id != CommId(0)) return done(a);
  const bool stale_or_timeout = m.reason == RejReason::kStaleConnection || m.reason == RejReason::kTimeout;
  switch (state_) {
    case State::kReqSent:
    case State::kMraReqRcvd:
    case State::kRepSent:
    case State::kMraRepRcvd:
    case State::kReqRcvd:
    case State::kMraReqSent:
      // cm.c cm_rej_handler: a stale or timed-out attempt keeps its ids in timewait.
      if (stale_or_timeout) {
        enter_timewait(now);
      } else {
        end();
      }
      break;
    case State::kRepRcvd:
    case State::kMraRepSent:
    case State::kEstablished:
    case State::kDreqSent: enter_timewait(now); break;
    default: return done(a);
  }
  a.events.push_back(make_event(EventType::kRejected, local_id_, m));
  return done(a);
}

Actions Connection::on_rep(Picoseconds /*now*/, const CmMad& mad, const Rep& m) {
  Actions a;
  if (!active_ || m.remote_comm_id != local_id_) return done(a);
  if (state_ == State::kReqSent || state_ == State::kMraReqRcvd) {
    remote_id_ = m.local_comm_id;
    remote_ca_guid_ = m.local_ca_guid;
    remote_qpn_ = m.local_qpn;
    deadline_.reset();
    state_ = State::kRepRcvd;
    a.events.push_back(make_event(EventType::kRepReceived, local_id_, m, mad.attribute_modifier));
    return done(a);
  }
  if (m.local_comm_id != remote_id_) return done(a);
  // A repeated REP: our RTU or MRA got lost (rdmacm.md 4.8).
  switch (state_) {
    case State::kRepRcvd:
      if (mra_armed_) {
        mra_armed_ = false;
        state_ = State::kMraRepSent;
        send(a, reply_mad_);
      }
      break;
    case State::kMraRepSent:
    case State::kEstablished: send(a, reply_mad_); break;
    default: break;
  }
  return done(a);
}

Actions Connection::on_rtu(const Rtu& m) {
  Actions a;
  if (active_ || !from_peer(m.local_comm_id, m.remote_comm_id)) return done(a);
  if (state_ != State::kRepSent && state_ != State::kMraRepRcvd) return done(a);
  state_ = State::kEstablished;
  deadline_.reset();
  a.events.push_back(make_event(EventType::kEstablished, local_id_));
  return done(a);
}

Actions Connection::on_dreq(Picoseconds now, const CmMad& mad, const Dreq& m) {
  Actions a;
  if (!from_peer(m.local_comm_id, m.remote_comm_id)) return done(a);
  if (m.remote_qpn != local_qpn_) return done(a);  // cm.c cm_dreq_handler: not our QP
  switch (state_) {
    case State::kEstablished:
    case State::kDreqSent:    // both ends disconnect at once
    case State::kRepSent:     // the RTU was lost
    case State::kMraRepRcvd:
      break;
    case State::kTimewait:
      if (have_reply_) send(a, reply_mad_);  // our DREP was lost
      return done(a);
    default: return done(a);
  }
  dreq_tid_ = mad.transaction_id;
  deadline_.reset();
  a.events.push_back(make_event(EventType::kDisconnectRequested, local_id_, m));
  if (config_.defer_drep) {
    state_ = State::kDreqRcvd;
    have_reply_ = false;
    return done(a);
  }
  Drep drep;
  drep.local_comm_id = local_id_;
  drep.remote_comm_id = remote_id_;
  reply_mad_ = encode_msg(dreq_tid_, drep);
  have_reply_ = true;
  send(a, reply_mad_);
  enter_timewait(now);
  return done(a);
}

Actions Connection::on_drep(Picoseconds now, const Drep& m) {
  Actions a;
  if (state_ != State::kDreqSent || !from_peer(m.local_comm_id, m.remote_comm_id)) return done(a);
  have_reply_ = false;
  enter_timewait(now);
  a.events.push_back(make_event(EventType::kDisconnected, local_id_));
  return done(a);
}

// ---- time ---------------------------------------------------------------------------------------

Actions Connection::on_timer(Picoseconds now) {
  Actions a;
  if (!deadline_ || now < *deadline_) return done(a);
  if (state_ == State::kTimewait) {
    end();
    a.events.push_back(make_event(EventType::kTimewaitExit, local_id_));
    return done(a);
  }
  if (!waits_for_answer(state_)) {
    deadline_.reset();
    return done(a);
  }
  if (retries_left_ > 0) {
    --retries_left_;
    deadline_ = now + timeout_;
    send(a, retransmit_mad_);
    return done(a);
  }
  // Retries exhausted (cm.c cm_process_send_error).
  if (state_ == State::kDreqSent) {
    have_reply_ = false;
    enter_timewait(now);
    a.events.push_back(make_event(EventType::kDisconnected, local_id_, ETIMEDOUT));
  } else {
    end();
    a.events.push_back(make_event(EventType::kUnreachable, local_id_, ETIMEDOUT));
  }
  return done(a);
}

}  // namespace softhca::cm
