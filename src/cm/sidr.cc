#include "cm/sidr.h"

#include <cerrno>

namespace softhca::cm {

Actions SidrRequest::done(Actions a) const {
  a.next_deadline = deadline_;
  return a;
}

Actions SidrRequest::start(Picoseconds now, const SidrReq& req, Picoseconds timeout, uint8_t max_retries,
                           uint32_t attribute_modifier) {
  Actions a;
  if (state_ != State::kIdle) {
    a.status = Status(EINVAL);
    return done(a);
  }
  SidrReq r = req;
  r.request_id = request_id_;
  CmMad mad;
  mad.transaction_id = (static_cast<uint64_t>(tid_high_) << 32) | request_id_;
  mad.attribute_modifier = attribute_modifier;
  mad.message = r;
  mad_ = encode(mad);
  timeout_ = timeout;
  retries_left_ = max_retries;
  deadline_ = now + timeout_;
  state_ = State::kReqSent;
  MadToSend out;
  out.to = Destination::kPeer;
  out.comm_id = CommId(request_id_);
  out.mad = mad_;
  a.mads.push_back(out);
  return done(a);
}

Actions SidrRequest::receive(Picoseconds /*now*/, const CmMad& mad) {
  Actions a;
  const auto* rep = std::get_if<SidrRep>(&mad.message);
  if (state_ != State::kReqSent || rep == nullptr || rep->request_id != request_id_) return done(a);
  state_ = State::kDone;
  deadline_.reset();
  Event e;
  e.type = EventType::kSidrRepReceived;
  e.comm_id = CommId(request_id_);
  e.attribute_modifier = mad.attribute_modifier;
  e.payload = *rep;
  a.events.push_back(e);
  return done(a);
}

Actions SidrRequest::on_timer(Picoseconds now) {
  Actions a;
  if (state_ != State::kReqSent || !deadline_ || now < *deadline_) return done(a);
  if (retries_left_ > 0) {
    --retries_left_;
    deadline_ = now + timeout_;
    MadToSend out;
    out.to = Destination::kPeer;
    out.comm_id = CommId(request_id_);
    out.mad = mad_;
    a.mads.push_back(out);
    return done(a);
  }
  state_ = State::kDone;
  deadline_.reset();
  Event e;
  e.type = EventType::kUnreachable;
  e.comm_id = CommId(request_id_);
  e.status = ETIMEDOUT;
  a.events.push_back(e);
  return done(a);
}

SidrRep make_sidr_rep(const SidrReq& req, SidrStatus status, Qpn qpn, uint32_t qkey) {
  SidrRep rep;
  rep.request_id = req.request_id;
  rep.status = status;
  rep.service_id = req.service_id;
  rep.qpn = qpn;
  rep.qkey = qkey;
  return rep;
}

MadBytes encode_sidr_rep(uint64_t tid, const SidrRep& rep, uint32_t attribute_modifier) {
  CmMad mad;
  mad.transaction_id = tid;
  mad.attribute_modifier = attribute_modifier;
  mad.message = rep;
  return encode(mad);
}

}  // namespace softhca::cm
