// QP1's MAD agents as the driver reaches them (hwif/cmd.h, docs/cm.md "QP1 on a shared device"):
// thin command wrappers on a UD QP of this context, for softhca's connection manager; and the
// multicast attach and detach of a UD QP (ibv_attach_mcast).
#include <cerrno>
#include <cstring>

#include "driver/objects.h"
#include "driver/provider.h"

namespace softhca::driver {

int set_mad_agent(ibv_qp* qp, uint32_t* agent) {
  if (qp == nullptr || agent == nullptr) return EINVAL;
  Qp* q = to_qp(qp);
  hwif::SetMadAgentOut out;
  if (const int err = hwif::exec_cmd(*q->ctx->link.cmd, hwif::SetMadAgentIn{q->qpn}, out)) return err;
  *agent = out.agent;
  return 0;
}

int bind_service(ibv_qp* qp, uint64_t* service_id, bool pick_port) {
  if (qp == nullptr || service_id == nullptr) return EINVAL;
  Qp* q = to_qp(qp);
  hwif::BindServiceIn in;
  in.qpn = q->qpn;
  in.pick_port = pick_port;
  in.service_id = *service_id;
  hwif::BindServiceOut out;
  if (const int err = hwif::exec_cmd(*q->ctx->link.cmd, in, out)) return err;
  *service_id = out.service_id;
  return 0;
}

int unbind_service(ibv_qp* qp, uint64_t service_id) {
  if (qp == nullptr) return EINVAL;
  Qp* q = to_qp(qp);
  return hwif::exec_cmd(*q->ctx->link.cmd, hwif::UnbindServiceIn{q->qpn, service_id});
}

int attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid, bool attach) {
  if (qp == nullptr || gid == nullptr) return EINVAL;
  Qp* q = to_qp(qp);
  if (attach) {
    hwif::AttachMcastIn in;
    in.qpn = q->qpn;
    std::memcpy(in.gid.raw.data(), gid->raw, 16);
    in.lid = lid;
    return hwif::exec_cmd(*q->ctx->link.cmd, in);
  }
  hwif::DetachMcastIn in;
  in.qpn = q->qpn;
  std::memcpy(in.gid.raw.data(), gid->raw, 16);
  in.lid = lid;
  return hwif::exec_cmd(*q->ctx->link.cmd, in);
}

int track_connection(ibv_qp* agent, const hwif::TrackConnectionIn& c) {
  if (agent == nullptr) return EINVAL;
  Qp* q = to_qp(agent);
  hwif::TrackConnectionIn in = c;
  in.qpn = q->qpn;
  return hwif::exec_cmd(*q->ctx->link.cmd, in);
}

int untrack_connection(ibv_qp* agent, uint32_t local_comm_id) {
  if (agent == nullptr) return EINVAL;
  Qp* q = to_qp(agent);
  return hwif::exec_cmd(*q->ctx->link.cmd, hwif::UntrackConnectionIn{q->qpn, local_comm_id});
}

}  // namespace softhca::driver
