// QP1 on a device the host's processes share (docs/cm.md, "QP1 on a shared device"): the MAD
// agent commands and the routing of CM MADs that reach QP1 to the agent they belong to.
// A MAD agent is an ordinary UD QP of a process (its connection manager's); what it receives from
// QP1 is a UD receive on it, counted as any other (a CQE, the GRH in the receive buffer), and what
// it sends leaves with DETH SrcQP 1 (requester.cc), as a kernel's CM sends from QP1.
#include <algorithm>
#include <cerrno>

#include "base/endian.h"
#include "cm/mad_codec.h"
#include "cm/sidr.h"
#include "hca/device.h"
#include "hca/transport/responder.h"

namespace softhca::hca {

using namespace hwif;

namespace {
// CM attribute IDs (IBA 12.6.1 / table 104) whose MADs the routing looks into.
constexpr uint16_t kAttrReq = 0x0010;
constexpr uint16_t kAttrSidrReq = 0x0017;
constexpr uint16_t kAttrSidrRep = 0x0018;
constexpr uint16_t kAttrMra = 0x0011;
constexpr uint16_t kAttrApr = 0x001a;
constexpr size_t kMadBytes = 256;
// Offsets in the MAD (IBA 13.4.3 common header, then the CM message at byte 24).
constexpr size_t kOffClass = 1;
constexpr size_t kOffAttrId = 16;
constexpr size_t kOffRequestId = 24;      // SIDR_REP: the requester's id
constexpr size_t kOffRemoteCommId = 28;   // MRA..APR: the id of the side the message goes to
constexpr size_t kOffServiceId = 32;      // REQ and SIDR_REQ

uint32_t be32_at(std::span<const uint8_t> p, size_t off) { return load_as<Be32>(p.data() + off).get(); }
uint64_t be64_at(std::span<const uint8_t> p, size_t off) { return load_as<Be64>(p.data() + off).get(); }
}  // namespace

int Device::cmd_set_mad_agent(const SetMadAgentIn& in, SetMadAgentOut& out) {
  QueuePair* qp = qps_.find(in.qpn);
  if (qp == nullptr || qp->owner != owner_ || qp->type != QpType::kUd) return EINVAL;
  out.agent = MadAgents(state_.mad).attach(in.qpn);
  if (out.agent == 0) return ENOSPC;
  qp->mad_agent = true;
  return 0;
}

int Device::cmd_bind_service(const BindServiceIn& in, BindServiceOut& out) {
  const QueuePair* qp = qps_.find(in.qpn);
  if (qp == nullptr || qp->owner != owner_ || !qp->mad_agent) return EINVAL;
  uint64_t sid = in.service_id;
  if (const int err = MadAgents(state_.mad).bind(in.qpn, &sid, in.pick_port)) return err;
  out.service_id = sid;
  return 0;
}

int Device::cmd_unbind_service(const UnbindServiceIn& in, NoOut&) {
  const QueuePair* qp = qps_.find(in.qpn);
  if (qp == nullptr || qp->owner != owner_ || !qp->mad_agent) return EINVAL;
  return MadAgents(state_.mad).unbind(in.qpn, in.service_id);
}

int Device::cmd_track_connection(const TrackConnectionIn& in, NoOut&) {
  const QueuePair* qp = qps_.find(in.qpn);
  if (qp == nullptr || qp->owner != owner_ || !qp->mad_agent || in.local_comm_id == 0) return EINVAL;
  TrackedConnection c;
  c.agent_qpn = in.qpn;
  c.local_comm_id = in.local_comm_id;
  c.remote_comm_id = in.remote_comm_id;
  c.remote_qpn = in.remote_qpn & kQpnMask;
  c.dlid = in.dlid;
  c.global = in.global;
  c.dgid = in.dgid.raw;
  return MadAgents(state_.mad).track(c);
}

int Device::cmd_untrack_connection(const UntrackConnectionIn& in, NoOut&) {
  const QueuePair* qp = qps_.find(in.qpn);
  if (qp == nullptr || qp->owner != owner_ || !qp->mad_agent) return EINVAL;
  MadAgents(state_.mad).untrack(in.qpn, in.local_comm_id);
  return 0;
}

// The agent `qpn` is going (its QP destroyed, or its process dead and reclaimed): each connection
// it still had gets a DREQ from QP1, as a kernel's CM sends when a process's ids are destroyed at
// its exit, so the peer sees DISCONNECTED. Sent once: nobody is left to retransmit it.
void Device::end_connections_of(uint32_t qpn) {
  for (const TrackedConnection& c : MadAgents(state_.mad).take_connections(qpn)) {
    cm::Dreq d;
    d.local_comm_id = cm::CommId(c.local_comm_id);
    d.remote_comm_id = cm::CommId(c.remote_comm_id);
    d.remote_qpn = Qpn(c.remote_qpn);
    cm::CmMad m;
    m.transaction_id = uint64_t{c.local_comm_id >> kMadAgentIdShift} << 32 | c.local_comm_id;
    m.message = d;
    fabric::PacketFields r;
    r.has_lrh = !ethernet();
    r.dlid = Lid(c.dlid);
    r.slid = Lid(lid());
    if (c.global || ethernet()) r.grh = fabric::GrhFields{0, 0, 64, config_.port.gids[0].raw, c.dgid};
    r.opcode = fabric::BthOpcode::kUdSendOnly;
    r.pkey = 0xffff;
    r.dest_qp = Qpn(kGsiQpn);
    r.deth = fabric::DethFields{kGsiQkey, Qpn(kGsiQpn)};
    transmit(r, cm::encode(m));
  }
}

uint32_t Device::mad_agent_for(std::span<const uint8_t> mad) const {
  const MadAgents agents(state_.mad);
  const uint16_t attr = load_as<Be16>(mad.data() + kOffAttrId).get();
  if (attr == kAttrReq || attr == kAttrSidrReq) return agents.qpn_of_service(be64_at(mad, kOffServiceId));
  if (attr == kAttrSidrRep) return agents.qpn_of_id(be32_at(mad, kOffRequestId));
  if (attr >= kAttrMra && attr <= kAttrApr) return agents.qpn_of_id(be32_at(mad, kOffRemoteCommId));
  return 0;  // ClassPortInfo and others: no agent of ours answers them
}

void Device::accept_gsi(const fabric::PacketFields& f, std::span<const uint8_t> payload, size_t wire_bytes,
                        uint32_t packets) {
  const auto drop = [&](DropReason why) {
    for (uint32_t i = 0; i < packets; ++i) stats_->drop(why);
  };
  if (!matches_transport(f.opcode, QpType::kUd) || !f.deth) return drop(DropReason::kWrongTransport);
  // QP1 takes any P_Key of the port's table (IBA 13.5.3.2), and only the GSI's Q_Key.
  const auto& table = config_.port.pkeys;
  if (std::none_of(table.begin(), table.end(), [&](uint16_t k) { return pkeys_match(f.pkey, k); }))
    return drop(DropReason::kBadPkey);
  if (f.deth->qkey != kGsiQkey) return drop(DropReason::kBadQkey);
  if (payload.size() < kMadBytes || payload[kOffClass] != kMgmtClassCm) return drop(DropReason::kNoMadAgent);
  QueuePair* qp = qps_.find(mad_agent_for(payload));
  if (qp == nullptr || !qp->mad_agent) {
    drop(DropReason::kNoMadAgent);
    return answer_unbound(f, payload);
  }
  QpCounters& c = counters(*qp);
  if (const std::optional<DropReason> why = refuses(*qp, f.opcode, f.pkey)) {
    c.packets_dropped += packets;
    return drop(*why);
  }
  c.packets_received += packets;
  c.bytes_received += wire_bytes * packets;
  const QpScope scope(*this, *qp);
  Responder(*this, *qp).on_request(f, payload);
}

// A REQ or SIDR_REQ for a service ID no process of the host bound is answered as a kernel's CM
// answers one it has no listener for (rdmacm.md §4.11): REJ reason 8 "invalid service ID" with
// local comm id 0, or SIDR_REP status 1 — from QP1 back to the sender, no PCIe work. Anything else
// stays dropped.
void Device::answer_unbound(const fabric::PacketFields& f, std::span<const uint8_t> payload) {
  cm::CmMad in;
  if (cm::decode(payload, in) != cm::DecodeStatus::kOk) return;
  cm::CmMad out;
  out.transaction_id = in.transaction_id;
  if (const auto* req = std::get_if<cm::Req>(&in.message)) {
    cm::Rej rej;
    rej.local_comm_id = cm::CommId(0);
    rej.remote_comm_id = req->local_comm_id;
    rej.message_rejected = cm::RejectedMessage::kReq;
    rej.reason = cm::RejReason::kInvalidServiceId;
    out.message = rej;
  } else if (const auto* sreq = std::get_if<cm::SidrReq>(&in.message)) {
    out.message = cm::make_sidr_rep(*sreq, cm::SidrStatus::kServiceIdNotSupported);
  } else {
    return;
  }
  const cm::MadBytes mad = cm::encode(out);
  fabric::PacketFields r;
  r.has_lrh = f.has_lrh;
  r.sl = f.sl;
  r.dlid = f.slid;
  r.slid = Lid(lid());
  if (f.grh) r.grh = fabric::GrhFields{f.grh->traffic_class, f.grh->flow_label, 64, f.grh->dgid, f.grh->sgid};
  r.opcode = fabric::BthOpcode::kUdSendOnly;
  r.pkey = f.pkey;
  r.dest_qp = Qpn(kGsiQpn);
  r.deth = fabric::DethFields{kGsiQkey, Qpn(kGsiQpn)};
  transmit(r, mad);
}

}  // namespace softhca::hca
