#include "cm/connection_table.h"

#include <cerrno>

namespace softhca::cm {
namespace {

using State = Connection::State;

void append(Actions& to, const Actions& from) {
  for (const MadToSend& m : from.mads) to.mads.push_back(m);
  for (const Event& e : from.events) to.events.push_back(e);
}

// The Remote Communication ID of the messages that name a connection of ours (CM byte 4 of each).
std::optional<CommId> addressed_to(const CmMessage& m) {
  return std::visit(
      [](const auto& msg) -> std::optional<CommId> {
        using M = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<M, Mra> || std::is_same_v<M, Rej> || std::is_same_v<M, Rep> ||
                      std::is_same_v<M, Rtu> || std::is_same_v<M, Dreq> || std::is_same_v<M, Drep>) {
          return msg.remote_comm_id;
        } else {
          return std::nullopt;
        }
      },
      m);
}

// A connection whose peer identity is settled and that still holds its QP (cm.c keeps the remote
// QPN of these in its table until timewait ends).
bool holds_remote_qpn(const Connection& c) {
  switch (c.state()) {
    case State::kIdle:
    case State::kReqSent:
    case State::kMraReqRcvd: return false;
    default: return true;
  }
}

// The CA GUID a REJ 4 (timeout) carries in its ARI (IBA 12.6.7.2).
std::optional<uint64_t> ari_guid(const Rej& rej) {
  if (rej.reason != RejReason::kTimeout || rej.ari_length < 8) return std::nullopt;
  uint64_t g = 0;
  for (size_t i = 0; i < 8; ++i) g = (g << 8) | rej.ari[i];
  return g;
}

}  // namespace

// A REJ 4 from a requester that gave up before it learnt our comm id: it names the passive
// connection by (its own comm id, its CA GUID in the ARI) (cm.c cm_acquire_rejected_id).
Connection* ConnectionTable::timed_out_requester(const CmMessage& m) {
  const auto* rej = std::get_if<Rej>(&m);
  if (rej == nullptr) return nullptr;
  const std::optional<uint64_t> guid = ari_guid(*rej);
  if (!guid) return nullptr;
  for (auto& [id, c] : connections_) {
    if (!c.is_active() && c.state() != State::kIdle && c.remote_id() == rej->local_comm_id &&
        c.remote_ca_guid() == *guid) {
      return &c;
    }
  }
  return nullptr;
}

Status ConnectionTable::listen(ServiceId id) {
  return listeners_.insert(id).second ? Status::ok() : Status(EADDRINUSE);
}

Status ConnectionTable::unlisten(ServiceId id) { return listeners_.erase(id) != 0 ? Status::ok() : Status(ENOENT); }

uint32_t ConnectionTable::allocate_id() {
  for (;;) {
    const uint32_t id = prefix_ | (next_id_++ & low_mask_);
    if (id != 0 && !connections_.contains(CommId(id)) && !sidr_requests_.contains(id)) return id;
  }
}

Connection& ConnectionTable::create() {
  const CommId id(allocate_id());
  return connections_.emplace(id, Connection(id, config_)).first->second;
}

SidrRequest& ConnectionTable::create_sidr() {
  const uint32_t id = allocate_id();
  return sidr_requests_.emplace(id, SidrRequest(id, config_.tid_high)).first->second;
}

Connection* ConnectionTable::find(CommId id) {
  const auto it = connections_.find(id);
  return it == connections_.end() ? nullptr : &it->second;
}

SidrRequest* ConnectionTable::find_sidr(uint32_t request_id) {
  const auto it = sidr_requests_.find(request_id);
  return it == sidr_requests_.end() ? nullptr : &it->second;
}

void ConnectionTable::erase(CommId id) { connections_.erase(id); }
void ConnectionTable::erase_sidr(uint32_t request_id) { sidr_requests_.erase(request_id); }

void ConnectionTable::forget_ended() {
  std::erase_if(connections_, [](const auto& kv) { return kv.second.ended(); });
}

Actions ConnectionTable::close(Picoseconds now, CommId id) {
  Connection* c = find(id);
  if (c == nullptr) {
    Actions a;
    a.status = Status(ENOENT);
    return a;
  }
  Actions a = c->close(now);
  forget_ended();
  a.next_deadline = next_deadline();
  return a;
}

Actions ConnectionTable::reply_to_sender(const CmMad& answer) {
  Actions a;
  MadToSend m;
  m.to = Destination::kSender;
  m.mad = encode(answer);
  a.mads.push_back(m);
  return a;
}

Actions ConnectionTable::receive(Picoseconds now, std::span<const uint8_t> bytes, uint64_t sender_key) {
  CmMad mad;
  if (decode(bytes, mad) != DecodeStatus::kOk) {
    Actions a;
    a.status = Status(EBADMSG);
    return a;
  }
  return receive(now, mad, sender_key);
}

Actions ConnectionTable::receive(Picoseconds now, const CmMad& mad, uint64_t sender_key) {
  Actions a;
  if (const auto* req = std::get_if<Req>(&mad.message)) {
    a = on_req(now, mad, *req);
  } else if (const auto* sreq = std::get_if<SidrReq>(&mad.message)) {
    a = on_sidr_req(mad, *sreq, sender_key);
  } else if (const auto* srep = std::get_if<SidrRep>(&mad.message)) {
    if (SidrRequest* s = find_sidr(srep->request_id)) a = s->receive(now, mad);
  } else if (const std::optional<CommId> to = addressed_to(mad.message)) {
    if (Connection* c = find(*to)) {
      // One connection touched: its deadline is the answer's, and only it may have ended (no scan
      // of every connection per MAD: thousands sit in timewait under a connection storm).
      a = c->receive(now, mad);
      a.next_deadline = c->deadline();
      if (c->ended()) connections_.erase(*to);
      return a;
    } else if (Connection* r = timed_out_requester(mad.message)) {
      a = r->receive(now, mad);
    } else if (const auto* dreq = std::get_if<Dreq>(&mad.message)) {
      // cm.c cm_dreq_handler: a DREQ for a connection long gone still gets its DREP.
      Drep drep;
      drep.local_comm_id = dreq->remote_comm_id;
      drep.remote_comm_id = dreq->local_comm_id;
      a = reply_to_sender(CmMad{mad.transaction_id, 0, 0, 0, drep});
    } else if (const auto* rep = std::get_if<Rep>(&mad.message)) {
      // cm.c cm_rep_handler: a REP naming no REQ of ours.
      Rej rej;
      rej.local_comm_id = rep->remote_comm_id;
      rej.remote_comm_id = rep->local_comm_id;
      rej.message_rejected = RejectedMessage::kRep;
      rej.reason = RejReason::kInvalidCommId;
      a = reply_to_sender(CmMad{mad.transaction_id, 0, 0, 0, rej});
    }
  }
  // No scan of every connection per MAD: what ended here is erased by the next on_timer(), and
  // the deadline is the touched connection's (or none), as Actions::next_deadline says.
  return a;
}

Actions ConnectionTable::on_req(Picoseconds now, const CmMad& mad, const Req& req) {
  // One pass over the connections (a REQ storm meets thousands in timewait): a repeated REQ goes
  // to the connection it made (cm.c cm_match_req); a new REQ from a QP still connected to us, or
  // in timewait, is stale (rdmacm.md 4.8) — unless a later connection turns out to be its own.
  Connection* stale = nullptr;
  for (auto& [id, c] : connections_) {
    if (c.remote_ca_guid() != req.local_ca_guid) continue;
    if (!c.is_active() && c.state() != State::kIdle && c.remote_id() == req.local_comm_id) {
      return c.receive(now, mad);
    }
    if (stale == nullptr && holds_remote_qpn(c) && c.remote_qpn() == req.local_qpn) stale = &c;
  }
  if (stale != nullptr) {
    Rej rej;
    rej.local_comm_id = CommId(0);
    rej.remote_comm_id = req.local_comm_id;
    rej.message_rejected = RejectedMessage::kReq;
    rej.reason = RejReason::kStaleConnection;
    Actions a = reply_to_sender(CmMad{mad.transaction_id, 0, 0, 0, rej});
    if (stale->state() == State::kEstablished) append(a, stale->disconnect(now));
    return a;
  }
  if (!listeners_.contains(req.service_id)) {
    Rej rej;
    rej.local_comm_id = CommId(0);
    rej.remote_comm_id = req.local_comm_id;
    rej.message_rejected = RejectedMessage::kReq;
    rej.reason = RejReason::kInvalidServiceId;
    return reply_to_sender(CmMad{mad.transaction_id, 0, 0, 0, rej});
  }
  return create().receive(now, mad);
}

Actions ConnectionTable::on_sidr_req(const CmMad& mad, const SidrReq& req, uint64_t sender_key) {
  if (!listeners_.contains(req.service_id)) {
    return reply_to_sender(CmMad{mad.transaction_id, 0, 0, 0, make_sidr_rep(req, SidrStatus::kServiceIdNotSupported)});
  }
  Actions a;
  const auto key = std::make_pair(req.request_id, sender_key);
  if (pending_sidr_.contains(key)) return a;  // a repeat while the user decides: dropped
  pending_sidr_.emplace(key, PendingSidr{mad.transaction_id, req});
  Event e;
  e.type = EventType::kSidrReqReceived;
  e.comm_id = CommId(req.request_id);
  e.attribute_modifier = mad.attribute_modifier;
  e.payload = req;
  a.events.push_back(e);
  return a;
}

Actions ConnectionTable::sidr_reply(Picoseconds /*now*/, uint32_t request_id, uint64_t sender_key,
                                    const SidrRep& rep, uint32_t attribute_modifier) {
  Actions a;
  const auto it = pending_sidr_.find(std::make_pair(request_id, sender_key));
  if (it == pending_sidr_.end()) {
    a.status = Status(EINVAL);
    return a;
  }
  SidrRep r = rep;
  r.request_id = request_id;
  r.service_id = it->second.req.service_id;
  MadToSend m;
  m.to = Destination::kSender;
  m.comm_id = CommId(request_id);
  m.mad = encode_sidr_rep(it->second.tid, r, attribute_modifier);
  a.mads.push_back(m);
  pending_sidr_.erase(it);
  a.next_deadline = next_deadline();
  return a;
}

std::vector<Actions> ConnectionTable::on_timer(Picoseconds now) {
  std::vector<Actions> out;
  for (auto& [id, c] : connections_) {
    if (c.deadline() && *c.deadline() <= now) {
      Actions a = c.on_timer(now);
      if (!a.mads.empty() || !a.events.empty()) out.push_back(a);
    }
  }
  for (auto& [id, s] : sidr_requests_) {
    if (s.deadline() && *s.deadline() <= now) {
      Actions a = s.on_timer(now);
      if (!a.mads.empty() || !a.events.empty()) out.push_back(a);
    }
  }
  forget_ended();
  const std::optional<Picoseconds> next = next_deadline();
  for (Actions& a : out) a.next_deadline = next;
  return out;
}

std::optional<Picoseconds> ConnectionTable::next_deadline() const {
  std::optional<Picoseconds> best;
  auto consider = [&best](const std::optional<Picoseconds>& d) {
    if (d && (!best || *d < *best)) best = d;
  };
  for (const auto& [id, c] : connections_) consider(c.deadline());
  for (const auto& [id, s] : sidr_requests_) consider(s.deadline());
  return best;
}

}  // namespace softhca::cm
