// Multicast on ids (rdmacm.md §3.17): rdma_join_multicast(_ex) and rdma_leave_multicast over the
// device's multicast groups (ibv_attach_mcast, hca/multicast.cc). There is no subnet
// administrator to join through: a group's MGID and MLID follow from its IPv4 address, the same on
// every host of the fabric, so a sender and its receivers agree with no exchange. On RoCE the MGID
// is ::ffff:G, as the kernel's rdma_cm gives it, and the MLID 0; on InfiniBand the MGID is the
// IPoIB mapping of G (ff12:401b:ffff::G) and the MLID one of 0xC000..0xFFFE drawn from G.
#include <arpa/inet.h>

#include <cerrno>
#include <cstring>

#include "hca/mcast_groups.h"
#include "rdmacm/library.h"

namespace softhca::rdmacm {

namespace {

bool group_ipv4(const sockaddr* sa, uint32_t* ip) {
  if (sa == nullptr || sa->sa_family != AF_INET) return false;
  *ip = ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr);
  return (*ip >> 28) == 0xe;  // 224.0.0.0/4
}

socklen_t length_of(const sockaddr* sa) {
  return sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

IdPriv::Join* find_join(IdPriv& id, const sockaddr* addr) {
  for (IdPriv::Join& j : id.joins) {
    if (j.addr.ss_family == addr->sa_family && std::memcmp(&j.addr, addr, length_of(addr)) == 0) return &j;
  }
  return nullptr;
}

int join(Library& lib, IdPriv& id, const sockaddr* addr, bool send_only, void* context) {
  uint32_t ip = 0;
  if (id.dev == nullptr || (id.state != IdState::kAddrBound && id.state != IdState::kAddrResolved)) return EINVAL;
  if (!group_ipv4(addr, &ip)) return EINVAL;  // IPv4 groups only (docs/rdma-cm.md)
  if (find_join(id, addr) != nullptr) return EADDRINUSE;
  IdPriv::Join j;
  std::memcpy(&j.addr, addr, length_of(addr));
  group_of(*id.dev, ip, &j.mgid, &j.mlid);
  j.send_only = send_only;
  rdma_ud_param u{};
  u.private_data = context;
  u.ah_attr.dlid = j.mlid;
  u.ah_attr.is_global = 1;
  u.ah_attr.grh.dgid = j.mgid;
  u.ah_attr.grh.hop_limit = id.dev->ethernet ? 64 : 1;
  u.ah_attr.grh.traffic_class = id.tos.value_or(0);
  u.ah_attr.port_num = 1;
  u.qp_num = hca::kMcastQpn;
  u.qkey = id.qkey;
  int err = 0;
  if (!send_only && id.id.qp != nullptr) {
    err = ibv_attach_mcast(id.id.qp, &j.mgid, j.mlid);
    j.attached = err == 0;
  }
  id.joins.push_back(j);
  // The kernel completes a RoCE join at once (work-queued); without an SA softhca's does too.
  lib.report(&id, err == 0 ? RDMA_CM_EVENT_MULTICAST_JOIN : RDMA_CM_EVENT_MULTICAST_ERROR, err == 0 ? 0 : -err,
             nullptr, &u);
  return 0;
}

}  // namespace

void group_of(const Device& dev, uint32_t group_ip, ibv_gid* mgid, uint16_t* mlid) {
  *mgid = ibv_gid{};
  const uint32_t be = htonl(group_ip);
  if (dev.ethernet) {
    mgid->raw[10] = mgid->raw[11] = 0xff;
    std::memcpy(&mgid->raw[12], &be, 4);
    *mlid = 0;
    return;
  }
  const uint8_t prefix[6] = {0xff, 0x12, 0x40, 0x1b, 0xff, 0xff};
  std::memcpy(mgid->raw, prefix, sizeof prefix);
  std::memcpy(&mgid->raw[12], &be, 4);
  *mlid = static_cast<uint16_t>(0xc000 + (group_ip ^ (group_ip >> 14)) % 0x3fff);
}

void leave_all(IdPriv& id) {
  for (IdPriv::Join& j : id.joins) {
    if (j.attached && id.id.qp != nullptr) (void)ibv_detach_mcast(id.id.qp, &j.mgid, j.mlid);
  }
  id.joins.clear();
}

}  // namespace softhca::rdmacm

using namespace softhca::rdmacm;

extern "C" {

int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* attr, void* context) {
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  if (id == nullptr || attr == nullptr) return fail(EINVAL);
  if (attr->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED) return fail(ENOTSUP);
  if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
      attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED || attr->addr == nullptr)
    return fail(EINVAL);
  std::lock_guard<std::mutex> g(lib->mutex);
  const bool send_only = attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
  const int err = join(*lib, *priv(id), attr->addr, send_only, context);
  return err != 0 ? fail(err) : 0;
}

int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) {
  rdma_cm_join_mc_attr_ex attr{};
  attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  attr.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
  attr.addr = addr;
  return rdma_join_multicast_ex(id, &attr, context);
}

int rdma_leave_multicast(rdma_cm_id* id, sockaddr* addr) {
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  if (id == nullptr || addr == nullptr) return fail(EINVAL);
  IdPriv* p = priv(id);
  std::unique_lock<std::mutex> g(lib->mutex);
  IdPriv::Join* j = find_join(*p, addr);
  if (j == nullptr) return fail(EADDRNOTAVAIL);
  if (j->attached && p->id.qp != nullptr) (void)ibv_detach_mcast(p->id.qp, &j->mgid, j->mlid);
  p->joins.erase(p->joins.begin() + (j - p->joins.data()));
  // As rdma_destroy_id, the group's events must have been acknowledged (rdmacm.md §3.3).
  lib->acked.wait(g, [&] { return p->events_acked >= p->events_reported; });
  return 0;
}

}  // extern "C"
