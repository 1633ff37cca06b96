// Multicast on the device (IBA 10.5; ibv_attach_mcast(3)): the attach and detach commands, and the
// delivery of a UD datagram to a multicast address to every QP of this host attached to its group.
// Sending needs nothing here: a datagram to a multicast LID or GID leaves the port once, and the
// carrier gives every host of the fabric a copy (runtime/shared_runtime.cc route(), and
// fabric/inproc_carrier.cc).
#include <cerrno>

#include "hca/device.h"
#include "hca/transport/responder.h"

namespace softhca::hca {

using namespace hwif;

namespace {
bool valid_group(const Gid& gid, uint16_t lid, bool ethernet) {
  if (!is_multicast_gid(gid.raw)) return false;
  // InfiniBand routes a group by its LID; Ethernet has none (0), as rdma_cm's RoCE joins give.
  return ethernet ? true : is_multicast_lid(lid);
}
}  // namespace

int Device::cmd_attach_mcast(const AttachMcastIn& in, NoOut&) {
  QueuePair* qp = qps_.find(in.qpn);
  if (qp == nullptr || qp->owner != owner_ || qp->type != QpType::kUd) return EINVAL;
  if (!valid_group(in.gid, in.lid, ethernet())) return EINVAL;
  return McastGroups(state_.mcast).attach(in.gid.raw, ethernet() ? 0 : in.lid, in.qpn);
}

int Device::cmd_detach_mcast(const DetachMcastIn& in, NoOut&) {
  QueuePair* qp = qps_.find(in.qpn);
  if (qp == nullptr || qp->owner != owner_) return EINVAL;
  return McastGroups(state_.mcast).detach(in.gid.raw, ethernet() ? 0 : in.lid, in.qpn);
}

bool Device::is_multicast(const fabric::PacketFields& f) const {
  if (ethernet()) return f.grh && is_multicast_gid(f.grh->dgid);
  return is_multicast_lid(f.dlid.value());
}

// Each attached QP takes its copy as a UD receive (its Q_Key checked, counted as any receive).
// A copy for a QP in the wrong state or of another P_Key is dropped for that QP alone.
void Device::accept_multicast(const fabric::PacketFields& f, std::span<const uint8_t> payload, size_t wire_bytes) {
  if (!matches_transport(f.opcode, QpType::kUd) || !f.deth || f.dest_qp.value() != kMcastQpn) {
    return stats_->drop(DropReason::kWrongTransport);
  }
  const McastGroup* g = McastGroups(state_.mcast).find(f.grh ? &f.grh->dgid : nullptr, f.dlid.value());
  if (g == nullptr) return stats_->drop(DropReason::kNoMcastGroup);
  const McastGroup group = *g;  // a delivery may change the table (nothing does today; stay safe)
  for (uint16_t i = 0; i < group.attached; ++i) {
    QueuePair* qp = qps_.find(group.qpns[i]);
    if (qp == nullptr) continue;
    QpCounters& c = counters(*qp);
    if (const std::optional<DropReason> why = refuses(*qp, f.opcode, f.pkey)) {
      ++c.packets_dropped;
      stats_->drop(*why);
      continue;
    }
    ++c.packets_received;
    c.bytes_received += wire_bytes;
    const QpScope scope(*this, *qp);
    Responder(*this, *qp).on_request(f, payload);
  }
}

}  // namespace softhca::hca
