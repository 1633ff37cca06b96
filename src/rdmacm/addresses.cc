// Addresses (docs/addresses.md, rdmacm.md §3.6, §3.7): rdma_bind_addr,
// rdma_resolve_addr, rdma_resolve_route, the ports of an id, and the route (path record) toward a
// peer. IPv4 throughout; AF_INET6 is taken for its wildcard, ::1 and IPv4-mapped addresses; AF_IB
// (a GID and a service ID, ib_address.cc) as the kernel takes it on InfiniBand.
#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/ib.h>
#include <netdb.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "rdmacm/library.h"
#include "verbs/softhca_ext.h"

namespace softhca::rdmacm {

namespace {

constexpr uint32_t kLoopback = 0x7f000001;  // 127.0.0.1, host order
constexpr uint8_t kPacketLifeTime = 16;    // as newer kernels give RoCE paths (rdmacm.md §3.7)

// The IPv4 address (host order) of an AF_INET or IPv4-expressible AF_INET6 sockaddr; false otherwise.
bool ipv4_of(const sockaddr* sa, uint32_t* ip, uint16_t* port) {
  if (sa == nullptr) return false;
  if (sa->sa_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(sa);
    *ip = ntohl(s->sin_addr.s_addr);
    *port = ntohs(s->sin_port);
    return true;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(sa);
    *port = ntohs(s->sin6_port);
    if (IN6_IS_ADDR_UNSPECIFIED(&s->sin6_addr)) {
      *ip = 0;
      return true;
    }
    if (IN6_IS_ADDR_LOOPBACK(&s->sin6_addr)) {
      *ip = kLoopback;
      return true;
    }
    if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr)) {
      uint32_t be;
      std::memcpy(&be, &s->sin6_addr.s6_addr[12], 4);
      *ip = ntohl(be);
      return true;
    }
  }
  return false;
}

socklen_t sockaddr_len(const sockaddr* sa) {
  if (sa->sa_family == AF_IB) return sizeof(sockaddr_ib);
  return sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

bool is_any(uint32_t ip) { return ip == 0 || (ip >> 24) == 127; }  // the kernel's cma_any_addr

// The bound port into the source address; an AF_IB address takes the whole service ID.
void set_port(sockaddr_storage& ss, uint64_t sid) {
  const auto port_host = static_cast<uint16_t>(sid & 0xffff);
  if (ss.ss_family == AF_IB) {
    auto& s = reinterpret_cast<sockaddr_ib&>(ss);
    s.sib_sid = htobe64(sid);
    s.sib_sid_mask = htobe64(~uint64_t{0});
  } else if (ss.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port_host);
  } else {
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port_host);
  }
}

uint16_t port_space_of(const IdPriv& id) { return static_cast<uint16_t>(id.id.ps); }

void bind_to_device(IdPriv& id, Device& d) {
  id.dev = &d;
  id.id.verbs = d.ctx;
  id.id.pd = d.pd;
  id.id.port_num = 1;
  std::memcpy(&id.id.route.addr.addr.ibaddr.sgid, &d.gid, 16);
  id.id.route.addr.addr.ibaddr.pkey = htons(0xffff);
}

// The host `ip` (host order) names, as `from` reaches it (docs/addresses.md, "Resolving an
// address"): its LID and GID; the local device when it is one of ours. 0 or an errno.
int find_peer(Library& lib, Device& from, uint32_t ip, Device** local, uint16_t* lid, ibv_gid* gid) {
  *local = nullptr;
  if ((ip >> 28) == 0xe) {  // an IPv4 multicast group: reached from `from` (multicast.cc)
    group_of(from, ip, gid, lid);
    return 0;
  }
  if (ip == kLoopback || ip == 0) {
    *local = &from;
  } else if (Device* d = lib.device_with_ipv4(htonl(ip))) {
    *local = d;
  }
  if (*local != nullptr) {
    *lid = (*local)->ethernet ? 0 : (*local)->port.lid;
    *gid = (*local)->gid;
    return 0;
  }
  std::memset(gid, 0, sizeof *gid);
  if (from.ethernet) {
    // RoCEv2: any other address is a peer reached by IP routing; its GID is ::ffff:a.b.c.d.
    gid->raw[10] = gid->raw[11] = 0xff;
    const uint32_t be = htonl(ip);
    std::memcpy(&gid->raw[12], &be, 4);
    *lid = 0;
    return 0;
  }
  // InfiniBand: an address a host of the fabric recorded (its claimed default or its --ip), else
  // 127.F.(lid >> 8).(lid & 0xff) with our F names the host of that LID on the fabric.
  const softhca_ext_ops* ext = softhca_ext_of(from.ctx);
  if (ext != nullptr && ext->lid_of_ipv4(from.ctx, htonl(ip), lid) == 0) {
    if (Device* d = lib.device_with_lid(*lid)) {
      *local = d;
      *gid = d->gid;
      return 0;
    }
    return 0;  // a host of another process: reached by LID, as the 127.F form below
  }
  const uint32_t own = ntohl(from.ipv4_be);
  if ((ip >> 16) != (own >> 16)) return EHOSTUNREACH;
  *lid = static_cast<uint16_t>(ip & 0xffff);
  if (Device* d = lib.device_with_lid(*lid)) {
    *local = d;
    *gid = d->gid;
    return 0;
  }
  return ext != nullptr && ext->fabric_has_lid(from.ctx, *lid) == 0 ? 0 : EHOSTUNREACH;
}

}  // namespace

int port_conflict(const Library& lib, const IdPriv& id, uint64_t sid, bool reuse) {
  for (const IdPriv* other : lib.ids) {
    if (other == &id || other->bound_on.empty() || other->service_id != sid) continue;
    if (reuse && id.reuse_addr && other->reuse_addr) continue;
    if (other->dev == nullptr || id.dev == nullptr) return EADDRNOTAVAIL;
    if (is_af_ib(id.id.route.addr.src_storage) || is_af_ib(other->id.route.addr.src_storage)) {
      if (other->dev == id.dev) return EADDRINUSE;
      continue;
    }
    const auto& a = reinterpret_cast<const sockaddr_in&>(id.id.route.addr.src_storage);
    const auto& b = reinterpret_cast<const sockaddr_in&>(other->id.route.addr.src_storage);
    if (a.sin_addr.s_addr == b.sin_addr.s_addr) return EADDRINUSE;
  }
  return 0;
}

// Binds the id's service ID (port space << 16 | port; 0 picks one) on the agents of `on`.
int bind_service(Library& lib, IdPriv& id, const std::vector<Device*>& on, uint16_t port, uint16_t ps) {
  uint64_t sid = uint64_t{ps != 0 ? ps : port_space_of(id)} << 16 | port;
  if (port != 0) {
    if (const int err = port_conflict(lib, id, sid, true)) return err;
  }
  std::vector<Device*> done;
  for (Device* d : on) {
    const softhca_ext_ops* ext = softhca_ext_of(d->ctx);
    const bool pick = (sid & 0xffff) == 0;
    const int err = ext != nullptr ? ext->bind_service(d->qp, &sid, pick) : ENODEV;
    if (err != 0) {
      for (Device* u : done) {
        if (const softhca_ext_ops* e = softhca_ext_of(u->ctx)) e->unbind_service(u->qp, sid);
      }
      return err;
    }
    done.push_back(d);
  }
  id.service_id = sid;
  id.bound_on = std::move(done);
  set_port(id.id.route.addr.src_storage, sid);
  return 0;
}

void unbind_service(IdPriv& id) {
  for (Device* d : id.bound_on) {
    if (const softhca_ext_ops* ext = softhca_ext_of(d->ctx)) ext->unbind_service(d->qp, id.service_id);
  }
  id.bound_on.clear();
}

// An AF_IB bind: the port space and port from the service ID, the device from the GID (zero: any
// InfiniBand device), as the kernel's cma_bind_addr and cma_select_ib_ps.
int bind_ib(Library& lib, IdPriv& id, const sockaddr* addr) {
  const auto* sib = reinterpret_cast<const sockaddr_ib*>(addr);
  const uint64_t sid = be64toh(sib->sib_sid);
  const uint64_t mask = be64toh(sib->sib_sid_mask);
  const uint16_t ps = ib_port_space(port_space_of(id), sid, mask);
  if (ps == 0) return EPROTONOSUPPORT;
  const auto port = static_cast<uint16_t>((mask & RDMA_IB_IP_PORT_MASK) == RDMA_IB_IP_PORT_MASK ? sid & 0xffff : 0);
  ibv_gid gid{};
  std::memcpy(gid.raw, &sib->sib_addr, 16);
  const ibv_gid zero{};
  std::vector<Device*> on;
  if (std::memcmp(gid.raw, zero.raw, 16) == 0) {
    for (auto& d : lib.devices) {
      if (!d->ethernet) on.push_back(d.get());
    }
    if (on.empty()) return EADDRNOTAVAIL;
  } else {
    Device* local = nullptr;
    for (auto& d : lib.devices) {
      if (!d->ethernet && std::memcmp(d->gid.raw, gid.raw, 16) == 0) local = d.get();
    }
    if (local == nullptr) return EADDRNOTAVAIL;
    bind_to_device(id, *local);
    on.push_back(local);
  }
  std::memset(&id.id.route.addr.src_storage, 0, sizeof id.id.route.addr.src_storage);
  std::memcpy(&id.id.route.addr.src_storage, addr, sizeof(sockaddr_ib));
  id.id.route.addr.dst_addr.sa_family = AF_IB;
  if (const int err = bind_service(lib, id, on, port, ps)) {
    id.dev = nullptr;
    id.id.verbs = nullptr;
    id.id.pd = nullptr;
    id.id.port_num = 0;
    return err;
  }
  id.state = IdState::kAddrBound;
  return 0;
}

int bind_addr(Library& lib, IdPriv& id, const sockaddr* addr) {
  uint32_t ip = 0;
  uint16_t port = 0;
  if (id.state != IdState::kIdle) return EINVAL;
  // librdmacm refuses a family it has no length for itself (ucma_addrlen).
  if (addr == nullptr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6 && addr->sa_family != AF_IB))
    return EINVAL;
  if (addr->sa_family == AF_IB) return bind_ib(lib, id, addr);
  if (!ipv4_of(addr, &ip, &port)) return EADDRNOTAVAIL;
  std::vector<Device*> on;
  if (is_any(ip)) {
    for (auto& d : lib.devices) on.push_back(d.get());
  } else {
    Device* d = lib.device_with_ipv4(htonl(ip));
    if (d == nullptr) return EADDRNOTAVAIL;
    bind_to_device(id, *d);
    on.push_back(d);
  }
  std::memset(&id.id.route.addr.src_storage, 0, sizeof id.id.route.addr.src_storage);
  std::memcpy(&id.id.route.addr.src_storage, addr, sockaddr_len(addr));
  id.id.route.addr.dst_addr.sa_family = addr->sa_family;
  if (const int err = bind_service(lib, id, on, port)) {
    id.dev = nullptr;
    id.id.verbs = nullptr;
    id.id.pd = nullptr;
    id.id.port_num = 0;
    return err;
  }
  id.state = IdState::kAddrBound;
  return 0;
}

void fill_route(IdPriv& id, Device& dev, uint16_t peer_lid, const ibv_gid& peer_gid) {
  rdma_route& r = id.id.route;
  std::memcpy(&r.addr.addr.ibaddr.sgid, &dev.gid, 16);
  std::memcpy(&r.addr.addr.ibaddr.dgid, &peer_gid, 16);
  r.addr.addr.ibaddr.pkey = htons(0xffff);
  ibv_sa_path_rec& p = id.path;
  p = ibv_sa_path_rec{};
  p.dgid = peer_gid;
  p.sgid = dev.gid;
  p.dlid = htons(dev.ethernet ? 0 : peer_lid);
  p.slid = htons(dev.ethernet ? 0 : dev.port.lid);
  p.hop_limit = dev.ethernet ? 64 : 0;
  p.traffic_class = id.tos.value_or(0);
  p.reversible = 1;
  p.numb_path = 1;
  p.pkey = htons(0xffff);
  p.sl = 0;
  p.mtu_selector = 2;
  p.mtu = static_cast<uint8_t>(dev.port.active_mtu);
  p.rate_selector = 2;
  p.rate = 7;  // IBV_RATE_40_GBPS, the port's 4x QDR
  p.packet_life_time_selector = 2;
  p.packet_life_time = kPacketLifeTime;
  if (r.path_rec == nullptr) r.path_rec = static_cast<ibv_sa_path_rec*>(std::malloc(sizeof(ibv_sa_path_rec)));
  if (r.path_rec != nullptr) {
    *r.path_rec = p;
    r.num_paths = 1;
  }
  id.peer.lid = dev.ethernet ? 0 : peer_lid;
  id.peer.global = dev.ethernet;
  id.peer.gid = peer_gid;
}

ibv_ah_attr ah_attr_of(const IdPriv& id) {
  ibv_ah_attr a{};
  a.dlid = ntohs(id.path.dlid);
  a.port_num = 1;
  a.sl = id.path.sl;
  if (id.dev != nullptr && id.dev->ethernet) {
    a.is_global = 1;
    a.grh.dgid = id.path.dgid;
    a.grh.sgid_index = 0;
    a.grh.hop_limit = id.path.hop_limit;
    a.grh.traffic_class = id.path.traffic_class;
  }
  return a;
}

// Resolution of an AF_IB destination: the GID names the port (ib_address.cc find_gid_peer).
int resolve_ib(Library& lib, IdPriv& id, const sockaddr_ib& dst) {
  Device* from = id.dev != nullptr ? id.dev : lib.first_device();
  if (from == nullptr) return ENODEV;
  ibv_gid gid{};
  std::memcpy(gid.raw, &dst.sib_addr, 16);
  Device* local = nullptr;
  uint16_t lid = 0;
  if (const int err = find_gid_peer(lib, *from, gid, &local, &lid)) {
    lib.report(&id, RDMA_CM_EVENT_ADDR_ERROR, -err);
    return 0;
  }
  Device& dev = id.dev != nullptr ? *id.dev : (local != nullptr ? *local : *from);
  bind_to_device(id, dev);
  auto& s = reinterpret_cast<sockaddr_ib&>(id.id.route.addr.src_storage);
  if (s.sib_family == AF_IB) std::memcpy(&s.sib_addr, dev.gid.raw, 16);
  std::memcpy(&id.id.route.addr.addr.ibaddr.dgid, &gid, 16);
  id.peer.lid = lid;
  id.peer.global = dev.ethernet;
  id.peer.gid = gid;
  id.state = IdState::kAddrResolved;
  lib.report(&id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
  return 0;
}

int resolve_addr(Library& lib, IdPriv& id, const sockaddr* src, const sockaddr* dst) {
  uint32_t dst_ip = 0;
  uint16_t dst_port = 0;
  if (dst == nullptr) return EINVAL;
  if (id.state == IdState::kIdle) {
    // No source: the wildcard of the destination's family, as the kernel's cma_bind_addr.
    sockaddr_storage any{};
    any.ss_family = dst->sa_family == AF_IB ? AF_IB : AF_INET;
    if (const int err = bind_addr(lib, id, src != nullptr ? src : reinterpret_cast<const sockaddr*>(&any))) return err;
  }
  if (id.state != IdState::kAddrBound) return EINVAL;
  std::memset(&id.id.route.addr.dst_storage, 0, sizeof id.id.route.addr.dst_storage);
  std::memcpy(&id.id.route.addr.dst_storage, dst, sockaddr_len(dst));
  if (dst->sa_family == AF_IB) return resolve_ib(lib, id, *reinterpret_cast<const sockaddr_ib*>(dst));
  if (!ipv4_of(dst, &dst_ip, &dst_port)) {
    lib.report(&id, RDMA_CM_EVENT_ADDR_ERROR, -EAFNOSUPPORT);
    return 0;
  }
  Device* from = id.dev != nullptr ? id.dev : lib.first_device();
  if (from == nullptr) return ENODEV;
  Device* local = nullptr;
  uint16_t lid = 0;
  ibv_gid gid{};
  if (const int err = find_peer(lib, *from, dst_ip, &local, &lid, &gid)) {
    lib.report(&id, RDMA_CM_EVENT_ADDR_ERROR, -err);
    return 0;
  }
  Device& dev = id.dev != nullptr ? *id.dev : (local != nullptr && dst_ip == kLoopback ? *local : *from);
  bind_to_device(id, dev);
  // The source address: the one bound, else the device's (127.0.0.1 toward 127.0.0.1), with the port bound.
  auto* s = reinterpret_cast<sockaddr_in*>(&id.id.route.addr.src_storage);
  if (s->sin_family == AF_INET && is_any(ntohl(s->sin_addr.s_addr))) {
    s->sin_addr.s_addr = dst_ip == kLoopback ? htonl(kLoopback) : dev.ipv4_be;
  }
  std::memcpy(&id.id.route.addr.addr.ibaddr.dgid, &gid, 16);
  id.peer.lid = lid;
  id.peer.global = dev.ethernet;
  id.peer.gid = gid;
  id.state = IdState::kAddrResolved;
  lib.report(&id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
  return 0;
}

int resolve_route(Library& lib, IdPriv& id) {
  if (id.state != IdState::kAddrResolved || id.dev == nullptr) return EINVAL;
  ibv_gid gid{};
  std::memcpy(&gid, &id.id.route.addr.addr.ibaddr.dgid, 16);
  fill_route(id, *id.dev, id.peer.lid, gid);
  id.state = IdState::kRouteResolved;
  lib.report(&id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  return 0;
}

}  // namespace softhca::rdmacm

using namespace softhca::rdmacm;
namespace cm = softhca::cm;

namespace {

// The call's errno as librdmacm returns it; a synchronous id then waits for the event.
int finish(IdPriv* id, std::unique_lock<std::mutex>& g, int err) {
  if (err != 0) return fail(err);
  if (!id->channel->sync) return 0;
  g.unlock();
  return sync_wait(*id);
}

}  // namespace

extern "C" {

int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  if (id == nullptr) return fail(EINVAL);
  std::lock_guard<std::mutex> g(lib->mutex);
  const int err = bind_addr(*lib, *priv(id), addr);
  return err != 0 ? fail(err) : 0;
}

int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr, int /*timeout_ms*/) {
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  if (id == nullptr) return fail(EINVAL);
  std::unique_lock<std::mutex> g(lib->mutex);
  return finish(priv(id), g, resolve_addr(*lib, *priv(id), src_addr, dst_addr));
}

int rdma_resolve_route(rdma_cm_id* id, int /*timeout_ms*/) {
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  if (id == nullptr) return fail(EINVAL);
  std::unique_lock<std::mutex> g(lib->mutex);
  return finish(priv(id), g, resolve_route(*lib, *priv(id)));
}

__be16 rdma_get_src_port(rdma_cm_id* id) {
  const sockaddr* sa = &id->route.addr.src_addr;
  if (sa->sa_family == AF_IB) return htons(static_cast<uint16_t>(ib_sid_of(id->route.addr.src_storage) & 0xffff));
  if (sa->sa_family == AF_INET6) return reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port;
  return reinterpret_cast<const sockaddr_in*>(sa)->sin_port;
}

__be16 rdma_get_dst_port(rdma_cm_id* id) {
  const sockaddr* sa = &id->route.addr.dst_addr;
  if (sa->sa_family == AF_IB) return htons(static_cast<uint16_t>(ib_sid_of(id->route.addr.dst_storage) & 0xffff));
  if (sa->sa_family == AF_INET6) return reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port;
  return reinterpret_cast<const sockaddr_in*>(sa)->sin_port;
}

}  // extern "C"
