// Connections (rdmacm.md §3.4, §3.10-§3.14): rdma_listen, rdma_connect, rdma_accept, rdma_reject(_ece),
// rdma_establish, rdma_notify, rdma_disconnect, rdma_get_request, and the wait of synchronous ids.
// RC and UC ids speak REQ/REP/RTU and DREQ/DREP; UD ids SIDR_REQ/SIDR_REP (src/cm).
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "cm/cma_header.h"
#include "cm/timers.h"
#include "rdmacm/library.h"

namespace softhca::rdmacm {

namespace {

constexpr uint8_t kPacketLifeTime = 16;
constexpr uint8_t kTargetAckDelay = 15;  // the CA ACK delay rxe reports; ours is as small

uint32_t random_psn() {
  static thread_local std::mt19937 gen{std::random_device{}()};
  return gen() & 0xffffff;
}

uint32_t ipv4_host(const sockaddr_storage& ss) {
  if (ss.ss_family != AF_INET) return 0x7f000001;
  return ntohl(reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr.s_addr);
}
uint16_t port_host(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
}

bool is_ud(const IdPriv& id) { return id.id.qp_type == IBV_QPT_UD; }

// The service ID a connection asks for: the port space and the destination port, or what an AF_IB
// destination names (rdmacm.md §3.5).
cm::ServiceId service_of(const IdPriv& id) {
  const sockaddr_storage& dst = id.id.route.addr.dst_storage;
  if (is_af_ib(dst)) return cm::ServiceId(ib_sid_of(dst));
  return cm::ServiceId(uint64_t{static_cast<uint16_t>(id.id.ps)} << 16 | port_host(dst));
}

// The local ACK timeout a kernel CM puts in its REQ (rdmacm.md §4.8) for packet lifetime plt.
uint8_t cm_ack_timeout(uint8_t ack_delay, uint8_t plt) {
  int t = plt + 1;
  if (t >= ack_delay) {
    t += ack_delay >= t - 1 ? 1 : 0;
  } else {
    t = ack_delay + (t >= ack_delay - 1 ? 1 : 0);
  }
  return static_cast<uint8_t>(std::min(t, 31));
}

cm::Gid gid_of(const ibv_gid& g) {
  cm::Gid out;
  std::memcpy(out.data(), g.raw, 16);
  return out;
}

// The CMA header and user data as REQ or SIDR_REQ private data; AF_IB ids send the user's bytes
// alone (no header: the whole private data is theirs).
template <class Request>
bool set_private_data(Request& r, const IdPriv& id, const cm::CmaHeader& h, const std::vector<uint8_t>& user) {
  if (is_af_ib(id.id.route.addr.dst_storage)) return r.private_data.assign(user);
  if constexpr (std::is_same_v<Request, cm::Req>) {
    return cm::set_req_private_data(r, h, user);
  } else {
    return cm::set_sidr_req_private_data(r, h, user);
  }
}

size_t user_limit(const IdPriv& id, size_t with_header, size_t field) {
  return is_af_ib(id.id.route.addr.dst_storage) ? field : with_header;
}

cm::CmaHeader header_of(const IdPriv& id) {
  return cm::CmaHeader::ipv4(ipv4_host(id.id.route.addr.src_storage), port_host(id.id.route.addr.src_storage),
                             ipv4_host(id.id.route.addr.dst_storage));
}

std::vector<uint8_t> user_data(const IdPriv& id, const rdma_conn_param* p) {
  std::vector<uint8_t> d = id.connect_data;
  if (p != nullptr && p->private_data != nullptr && p->private_data_len > 0) {
    const auto* b = static_cast<const uint8_t*>(p->private_data);
    d.insert(d.end(), b, b + p->private_data_len);
  }
  return d;
}

int connect_ud(Library& lib, IdPriv& id, const rdma_conn_param* p) {
  const std::vector<uint8_t> user = user_data(id, p);
  if (user.size() > user_limit(id, cm::kSidrReqUserBytes, cm::kSidrReqPrivateDataBytes)) return EINVAL;
  cm::SidrReq q;
  q.pkey = 0xffff;
  q.service_id = service_of(id);
  if (!set_private_data(q, id, header_of(id), user)) return EINVAL;
  Device& dev = *id.dev;
  cm::SidrRequest& s = dev.table->create_sidr();
  id.comm_id = s.request_id();
  lib.by_comm_id[id.comm_id] = &id;
  lib.peers[id.comm_id] = id.peer;
  id.state = IdState::kConnect;
  lib.run(dev, s.start(now(), q));
  lib.kick();
  return 0;
}

int connect_rc(Library& lib, IdPriv& id, const rdma_conn_param* p) {
  Device& dev = *id.dev;
  if (p == nullptr && id.id.qp == nullptr) return EINVAL;
  uint8_t resp = p ? p->responder_resources : 0xff;
  uint8_t init = p ? p->initiator_depth : 0xff;
  if (id.id.ps == RDMA_PS_TCP) {
    if (resp != 0xff && resp > dev.attr.max_qp_rd_atom) return EINVAL;
    if (init != 0xff && init > dev.attr.max_qp_init_rd_atom) return EINVAL;
  }
  if (resp == 0xff) resp = static_cast<uint8_t>(dev.attr.max_qp_rd_atom);
  if (init == 0xff) init = static_cast<uint8_t>(dev.attr.max_qp_init_rd_atom);
  const std::vector<uint8_t> user = user_data(id, p);
  if (user.size() > user_limit(id, cm::kReqUserBytes, cm::kReqPrivateDataBytes)) return EINVAL;
  cm::Req r;
  r.service_id = service_of(id);
  r.local_qpn = Qpn(id.id.qp ? id.id.qp->qp_num : p->qp_num);
  r.responder_resources = resp;
  r.initiator_depth = init;
  r.remote_cm_response_timeout = cm::kCmaCmResponseTimeout;
  r.local_cm_response_timeout = cm::kCmaCmResponseTimeout;
  r.transport_type = id.id.qp && id.id.qp->qp_type == IBV_QPT_UC ? cm::TransportType::kUc : cm::TransportType::kRc;
  if (id.id.qp && id.id.qp->qp_type == IBV_QPT_XRC_SEND) {
    // IBA 12.6.5 (XRC annex): Transport Service Type 3 with Extended Transport Type 1 (XRC).
    r.transport_type = cm::TransportType::kXrc;
    r.extended_transport_type = 1;
  }
  r.end_to_end_flow_control = p && p->flow_control;
  id.psn = random_psn();
  r.starting_psn = Psn(id.psn);
  r.retry_count = static_cast<uint8_t>(std::min<int>(7, p ? p->retry_count : 7));
  r.rnr_retry_count = static_cast<uint8_t>(std::min<int>(7, p ? p->rnr_retry_count : 7));
  r.pkey = 0xffff;
  r.path_mtu = id.path.mtu;
  r.max_cm_retries = cm::kCmaMaxCmRetries;
  r.srq = id.id.qp ? id.id.qp->srq != nullptr : (p && p->srq);
  r.primary.local_lid = Lid(dev.ethernet ? 0xffff : dev.port.lid);
  r.primary.remote_lid = Lid(dev.ethernet ? 0xffff : id.peer.lid);
  r.primary.local_gid = gid_of(dev.gid);
  r.primary.remote_gid = gid_of(id.path.dgid);
  r.primary.packet_rate = id.path.rate;
  r.primary.traffic_class = id.path.traffic_class;
  r.primary.hop_limit = id.path.hop_limit;
  r.primary.subnet_local = id.path.hop_limit <= 1;
  r.primary.local_ack_timeout = id.ack_timeout.value_or(cm_ack_timeout(kTargetAckDelay, kPacketLifeTime));
  if (!set_private_data(r, id, header_of(id), user)) return EINVAL;
  cm::Connection& c = dev.table->create();
  id.comm_id = c.local_id().value();
  lib.by_comm_id[id.comm_id] = &id;
  lib.peers[id.comm_id] = id.peer;
  const cm::Actions a = c.connect(now(), r, kPacketLifeTime);
  id.req = r;
  id.req->local_comm_id = c.local_id();
  id.state = IdState::kConnect;
  lib.run(dev, a);
  lib.kick();
  return 0;
}

int accept_ud(Library& lib, IdPriv& id, const rdma_conn_param* p) {
  cm::SidrRep rep;
  rep.status = cm::SidrStatus::kSuccess;
  rep.qpn = Qpn(id.id.qp ? id.id.qp->qp_num : (p ? p->qp_num : 0));
  rep.qkey = id.qkey;
  if (p != nullptr && p->private_data != nullptr &&
      !rep.private_data.assign({static_cast<const uint8_t*>(p->private_data), p->private_data_len}))
    return EINVAL;
  const cm::Actions a = id.dev->table->sidr_reply(now(), id.sidr_request_id, id.sidr_sender_key, rep);
  if (!a.status.is_ok()) return EINVAL;
  lib.run(*id.dev, a, &id.peer);
  return 0;
}

int accept_rc(Library& lib, IdPriv& id, const rdma_conn_param* p) {
  Device& dev = *id.dev;
  cm::Connection* c = dev.table->find(cm::CommId(id.comm_id));
  if (c == nullptr || !id.req) return EINVAL;
  uint8_t resp = p ? p->responder_resources : 0xff;
  uint8_t init = p ? p->initiator_depth : 0xff;
  if (resp != 0xff && resp > dev.attr.max_qp_rd_atom) return EINVAL;
  if (init != 0xff && init > dev.attr.max_qp_init_rd_atom) return EINVAL;
  if (resp == 0xff) resp = std::min<uint8_t>(id.peer_initiator_depth, static_cast<uint8_t>(dev.attr.max_qp_rd_atom));
  if (init == 0xff)
    init = std::min<uint8_t>(id.peer_responder_resources, static_cast<uint8_t>(dev.attr.max_qp_init_rd_atom));
  if (p == nullptr && id.id.qp == nullptr) return EINVAL;
  cm::Rep rep;
  rep.local_qpn = Qpn(id.id.qp ? id.id.qp->qp_num : p->qp_num);
  id.psn = random_psn();
  rep.starting_psn = Psn(id.psn);
  rep.responder_resources = resp;
  rep.initiator_depth = init;
  rep.target_ack_delay = kTargetAckDelay;
  rep.end_to_end_flow_control = p && p->flow_control;
  rep.rnr_retry_count = static_cast<uint8_t>(std::min<int>(7, p ? p->rnr_retry_count : 7));
  rep.srq = id.id.qp ? id.id.qp->srq != nullptr : (p && p->srq);
  if (p != nullptr && p->private_data != nullptr &&
      !rep.private_data.assign({static_cast<const uint8_t*>(p->private_data), p->private_data_len}))
    return EINVAL;
  id.rep = rep;
  if (id.id.qp != nullptr) {
    cm::QpAttributes qa = cm::qp_attributes(cm::Side::kPassive, *id.req, rep);
    if (const int err = qp_to_rts(id, qa)) {
      qp_to_error(id);
      id.rep.reset();
      return err;
    }
  }
  lib.run(dev, c->accept(now(), rep));
  lib.kick();
  return 0;
}

// Calls fn(lib, id) under the lock; then, for a synchronous id when `waits`, waits for its event.
template <class Fn>
int call(rdma_cm_id* cm_id, bool waits, Fn&& fn) {
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  if (cm_id == nullptr) return fail(EINVAL);
  IdPriv& id = *priv(cm_id);
  bool wait = false;
  {
    std::lock_guard<std::mutex> g(lib->mutex);
    const int err = fn(*lib, id);
    lib->pump();
    if (err != 0) return fail(err);
    wait = waits && id.channel->sync;
  }
  return wait ? sync_wait(id) : 0;
}

}  // namespace

int sync_wait(IdPriv& id) {
  rdma_cm_event* ev = nullptr;
  if (id.id.event != nullptr) {
    rdma_ack_cm_event(id.id.event);
    id.id.event = nullptr;
  }
  if (rdma_get_cm_event(&id.channel->ch, &ev) != 0) return -1;
  id.id.event = ev;
  if (ev->event == RDMA_CM_EVENT_REJECTED) return fail(ECONNREFUSED);
  if (ev->status < 0) return fail(-ev->status);
  if (ev->status > 0) return fail(ev->status);
  return 0;
}

}  // namespace softhca::rdmacm

using namespace softhca::rdmacm;
namespace cm = softhca::cm;

extern "C" {

int rdma_listen(rdma_cm_id* id, int backlog) {
  return call(id, false, [&](Library& lib, IdPriv& p) {
    if (p.state == IdState::kIdle) {
      sockaddr_in any{};
      any.sin_family = AF_INET;
      if (const int err = bind_addr(lib, p, reinterpret_cast<const sockaddr*>(&any))) return err;
    }
    if (p.state != IdState::kAddrBound) return EINVAL;
    // The port checked again without REUSEADDR (the kernel's cma_bind_listen): no other owner.
    if (const int err = port_conflict(lib, p, p.service_id, false)) return err;
    for (Device* d : p.bound_on) (void)d->table->listen(cm::ServiceId(p.service_id));
    p.backlog = backlog;
    p.state = IdState::kListen;
    lib.listeners.push_back(&p);
    return 0;
  });
}

int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  return call(id, true, [&](Library& lib, IdPriv& p) {
    if (p.state != IdState::kRouteResolved || p.dev == nullptr) return EINVAL;
    return is_ud(p) ? connect_ud(lib, p, conn_param) : connect_rc(lib, p, conn_param);
  });
}

int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  return call(id, id != nullptr && !is_ud(*priv(id)), [&](Library& lib, IdPriv& p) {
    if (p.listener == nullptr || p.state != IdState::kConnect || p.dev == nullptr) return EINVAL;
    return is_ud(p) ? accept_ud(lib, p, conn_param) : accept_rc(lib, p, conn_param);
  });
}

static int reject_with(rdma_cm_id* id, const void* data, uint8_t len, cm::RejReason reason) {
  return call(id, false, [&](Library& lib, IdPriv& p) {
    if (p.dev == nullptr) return EINVAL;
    const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(data), data ? len : 0);
    if (is_ud(p)) {
      if (p.listener == nullptr) return EINVAL;
      cm::SidrRep rep;
      rep.status = cm::SidrStatus::kRejected;
      if (!rep.private_data.assign(bytes)) return EINVAL;
      const cm::Actions a = p.dev->table->sidr_reply(now(), p.sidr_request_id, p.sidr_sender_key, rep);
      if (!a.status.is_ok()) return EINVAL;
      lib.run(*p.dev, a, &p.peer);
      return 0;
    }
    cm::Connection* c = p.dev->table->find(cm::CommId(p.comm_id));
    if (c == nullptr || bytes.size() > cm::kRejUserBytes) return EINVAL;
    const cm::Actions a = c->reject(now(), reason, bytes);
    if (!a.status.is_ok()) return EINVAL;
    lib.run(*p.dev, a);
    return 0;
  });
}

int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  return reject_with(id, private_data, private_data_len, cm::RejReason::kConsumerDefined);
}

int rdma_reject_ece(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  return reject_with(id, private_data, private_data_len, cm::RejReason::kVendorOptionNotSupported);
}

int rdma_establish(rdma_cm_id* id) {
  return call(id, false, [&](Library& lib, IdPriv& p) {
    // Only after a CONNECT_RESPONSE: an id with a QP was established by the library itself.
    if (p.id.qp != nullptr) return EINVAL;
    cm::Connection* c = p.dev ? p.dev->table->find(cm::CommId(p.comm_id)) : nullptr;
    if (c == nullptr) return EINVAL;
    const cm::Actions a = c->establish(now());
    if (!a.status.is_ok()) return EINVAL;
    lib.run(*p.dev, a);
    return 0;
  });
}

int rdma_notify(rdma_cm_id* id, ibv_event_type event) {
  return call(id, false, [&](Library& lib, IdPriv& p) {
    if (event != IBV_EVENT_COMM_EST) return 0;  // the only event the CM takes (rdmacm.md §3.20)
    cm::Connection* c = p.dev ? p.dev->table->find(cm::CommId(p.comm_id)) : nullptr;
    if (c == nullptr) return EINVAL;
    lib.run(*p.dev, c->notify_established(now()));
    return 0;
  });
}

int rdma_disconnect(rdma_cm_id* id) {
  bool waits = false;
  const int rc = call(id, false, [&](Library& lib, IdPriv& p) {
    if (!p.connected_once && p.comm_id == 0) return EINVAL;
    qp_to_error(p);
    cm::Connection* c = p.dev ? p.dev->table->find(cm::CommId(p.comm_id)) : nullptr;
    untrack(p);
    if (c != nullptr && !p.disconnected) {  // else the peer disconnected first: nothing to send
      const cm::Actions a = c->disconnect(now());
      if (a.status.is_ok()) {
        lib.run(*p.dev, a);
        lib.kick();
        waits = p.channel->sync;  // for the DISCONNECTED the DREP brings
      }
    }
    // A synchronous id returns with the DISCONNECTED of the peer's DREQ too, when it is still
    // queued (librdmacm's ucma_complete after the DISCONNECT command).
    if (p.channel->sync && p.channel->has_event_of(&p.id)) waits = true;
    return 0;
  });
  if (rc != 0 || !waits) return rc;
  return sync_wait(*priv(id));
}

int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  if (listen == nullptr || id == nullptr) return fail(EINVAL);
  IdPriv& l = *priv(listen);
  if (!l.channel->sync) return fail(EINVAL);
  rdma_cm_event* ev = nullptr;
  if (l.id.event != nullptr) {
    rdma_ack_cm_event(l.id.event);
    l.id.event = nullptr;
  }
  if (rdma_get_cm_event(&l.channel->ch, &ev) != 0) return -1;
  if (ev->status != 0) {
    const int err = ev->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : -ev->status;
    rdma_ack_cm_event(ev);
    return fail(err);
  }
  if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    rdma_ack_cm_event(ev);
    return fail(EINVAL);
  }
  IdPriv& n = *priv(ev->id);
  n.id.event = ev;
  if (l.ep_qp_attr) {
    ibv_qp_init_attr attr = *l.ep_qp_attr;
    if (rdma_create_qp(&n.id, l.id.pd, &attr) != 0) {
      const int err = errno;
      rdma_destroy_id(&n.id);
      return fail(err);
    }
  }
  *id = &n.id;
  return 0;
}

}  // extern "C"
