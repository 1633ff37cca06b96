// CM events into rdma_cm events (rdmacm.md §3.8, §3.9): what the kernel's rdma_cm and librdmacm
// do between a MAD arriving and the application's rdma_get_cm_event — new passive ids for REQs and
// SIDR_REQs, the active side's QP taken to RTS and the RTU sent when a REP arrives, the QP put in
// ERR on a REJ or a DREQ, each event with the parameters and private data lengths the real one has.
#include <arpa/inet.h>

#include <cstring>
#include <new>

#include "cm/cma_header.h"
#include "cm/qp_attributes.h"
#include "rdmacm/library.h"

namespace softhca::rdmacm {

namespace {

IdPriv* find_listener(Library& lib, Device& dev, uint64_t service_id) {
  for (IdPriv* l : lib.listeners) {
    if (l->state != IdState::kListen || l->service_id != service_id) continue;
    for (Device* d : l->bound_on) {
      if (d == &dev) return l;
    }
  }
  return nullptr;
}

void set_ipv4(sockaddr_storage& ss, uint32_t ip_host, uint16_t port_host) {
  auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
  std::memset(&ss, 0, sizeof ss);
  sin->sin_family = AF_INET;
  sin->sin_addr.s_addr = htonl(ip_host);
  sin->sin_port = htons(port_host);
}

// A request's addresses: the CMA header's (IP ids), or for an AF_IB listener the GIDs and the
// service ID (no header).
struct RequestAddresses {
  bool af_ib = false;
  cm::CmaHeader header;
  uint64_t service_id = 0;
};

// Reads what a request's private data says of its addresses; false when an IP listener gets no
// valid IPv4 header. `user` is then the application's part of the private data.
bool addresses_of(const IdPriv& listener, uint64_t service_id, std::span<const uint8_t> data, RequestAddresses& a,
                  std::span<const uint8_t>& user) {
  if (is_af_ib(listener.id.route.addr.src_storage)) {
    a.af_ib = true;
    a.service_id = service_id;
    user = data;
    return true;
  }
  if (cm::decode_cma_header(data, a.header) != cm::CmaHeaderStatus::kOk || a.header.ip_version != cm::IpVersion::kV4)
    return false;
  user = data.subspan(cm::kCmaHeaderBytes);
  return true;
}

// A new passive id for a request that reached `listener` on `dev` (rdmacm.md §3.9).
IdPriv* new_passive_id(Library& lib, IdPriv* listener, Device& dev, const RequestAddresses& a,
                       const PeerAddress& from, const ibv_gid& peer_gid) {
  auto* id = new (std::nothrow) IdPriv;
  if (id == nullptr) return nullptr;
  id->channel = listener->channel->sync ? new_channel(true) : listener->channel;
  if (id->channel == nullptr) {
    delete id;
    return nullptr;
  }
  id->id.channel = &id->channel->ch;
  id->id.context = listener->id.context;
  id->id.ps = listener->id.ps;
  id->id.qp_type = listener->id.qp_type;
  id->id.verbs = dev.ctx;
  id->id.pd = dev.pd;
  id->id.port_num = 1;
  id->dev = &dev;
  id->listener = listener;
  id->state = IdState::kConnect;
  id->peer = from;
  if (a.af_ib) {
    set_ib_address(id->id.route.addr.src_storage, dev.gid, listener->service_id);
    set_ib_address(id->id.route.addr.dst_storage, peer_gid, a.service_id);
  } else {
    const cm::CmaHeader& h = a.header;
    set_ipv4(id->id.route.addr.src_storage, h.dst_ipv4(), static_cast<uint16_t>(listener->service_id & 0xffff));
    set_ipv4(id->id.route.addr.dst_storage, h.src_ipv4(), h.src_port);
  }
  fill_route(*id, dev, from.lid, peer_gid);
  lib.ids.insert(id);
  return id;
}

rdma_conn_param conn_of_rep(const cm::Rep& p) {
  rdma_conn_param c{};
  c.responder_resources = p.initiator_depth;
  c.initiator_depth = p.responder_resources;
  c.flow_control = p.end_to_end_flow_control;
  c.rnr_retry_count = p.rnr_retry_count;
  c.srq = p.srq;
  c.qp_num = p.local_qpn.value();
  return c;
}

void on_req(Library& lib, Device& dev, const cm::Event& e, const PeerAddress* from) {
  const cm::Req& r = std::get<cm::Req>(e.payload);
  cm::Connection* conn = dev.table->find(e.comm_id);
  if (conn == nullptr || from == nullptr) return;
  IdPriv* listener = find_listener(lib, dev, r.service_id.value());
  RequestAddresses a;
  std::span<const uint8_t> user;
  const std::span<const uint8_t> data(r.private_data.bytes);
  const bool header_ok = listener != nullptr && addresses_of(*listener, r.service_id.value(), data, a, user);
  ibv_gid peer_gid{};
  std::memcpy(peer_gid.raw, r.primary.local_gid.data(), 16);
  IdPriv* id = header_ok ? new_passive_id(lib, listener, dev, a, *from, peer_gid) : nullptr;
  if (id == nullptr) {
    // The rdma_cm layer refuses what reached the CM but no id can take (rdmacm.md §4.11, 5).
    lib.run(dev, conn->reject(now(), cm::RejReason::kConsumerDefined), from);
    return;
  }
  id->comm_id = e.comm_id.value();
  lib.by_comm_id[id->comm_id] = id;
  lib.peers[id->comm_id] = *from;
  id->req = r;
  id->peer_qpn = r.local_qpn.value();
  id->peer_responder_resources = r.responder_resources;
  id->peer_initiator_depth = r.initiator_depth;
  rdma_conn_param c{};
  c.responder_resources = r.initiator_depth;
  c.initiator_depth = r.responder_resources;
  c.flow_control = r.end_to_end_flow_control;
  c.retry_count = r.retry_count;
  c.rnr_retry_count = r.rnr_retry_count;
  c.srq = r.srq;
  c.qp_num = r.local_qpn.value();
  lib.report(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &c, nullptr, user.data(), user.size(), listener, listener);
}

void on_sidr_req(Library& lib, Device& dev, const cm::Event& e, const PeerAddress* from) {
  const cm::SidrReq& q = std::get<cm::SidrReq>(e.payload);
  if (from == nullptr) return;
  IdPriv* listener = find_listener(lib, dev, q.service_id.value());
  RequestAddresses a;
  std::span<const uint8_t> user;
  const std::span<const uint8_t> data(q.private_data.bytes);
  const bool header_ok = listener != nullptr && addresses_of(*listener, q.service_id.value(), data, a, user);
  IdPriv* id = header_ok ? new_passive_id(lib, listener, dev, a, *from, from->gid) : nullptr;
  if (id == nullptr) {
    lib.run(dev, dev.table->sidr_reply(now(), q.request_id, sender_key_of(*from),
                                       cm::make_sidr_rep(q, cm::SidrStatus::kRejected)),
            from);
    return;
  }
  id->sidr_request_id = q.request_id;
  id->sidr_sender_key = sender_key_of(*from);
  rdma_ud_param u{};
  lib.report(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, nullptr, &u, user.data(), user.size(), listener, listener);
}

void on_sidr_rep(Library& lib, const cm::Event& e) {
  const cm::SidrRep& r = std::get<cm::SidrRep>(e.payload);
  auto it = lib.by_comm_id.find(r.request_id);
  if (it == lib.by_comm_id.end()) return;
  IdPriv* id = it->second;
  lib.by_comm_id.erase(it);
  id->comm_id = 0;
  rdma_ud_param u{};
  const std::span<const uint8_t> data = r.private_data.view();
  if (r.status != cm::SidrStatus::kSuccess) {
    lib.report(id, RDMA_CM_EVENT_UNREACHABLE, static_cast<int>(r.status), nullptr, &u, data.data(), data.size());
    return;
  }
  u.ah_attr = ah_attr_of(*id);
  u.qp_num = r.qpn.value();
  u.qkey = r.qkey;
  id->state = IdState::kConnect;
  lib.report(id, RDMA_CM_EVENT_ESTABLISHED, 0, nullptr, &u, data.data(), data.size());
}

void on_rep(Library& lib, Device& dev, IdPriv* id, const cm::Event& e) {
  const cm::Rep& p = std::get<cm::Rep>(e.payload);
  id->rep = p;
  id->peer_qpn = p.local_qpn.value();
  cm::Connection* conn = dev.table->find(e.comm_id);
  if (conn == nullptr) return;
  if (id->id.qp == nullptr) {
    const rdma_conn_param c = conn_of_rep(p);
    lib.report(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &c, nullptr, p.private_data.bytes.data(), cm::kRepUserBytes);
    return;
  }
  // librdmacm's "accept on the active side": RTR, RTS, then the RTU (rdmacm.md §3.8).
  if (const int err = qp_to_rts(*id, cm::qp_attributes(cm::Side::kActive, *id->req, p))) {
    lib.run(dev, conn->reject(now(), cm::RejReason::kConsumerDefined));
    const rdma_conn_param c = conn_of_rep(p);
    lib.report(id, RDMA_CM_EVENT_CONNECT_ERROR, -err, &c, nullptr, p.private_data.bytes.data(), cm::kRepUserBytes);
    return;
  }
  lib.run(dev, conn->establish(now()));
}

}  // namespace

void Library::on_cm_event(Device& dev, const cm::Event& e, const PeerAddress* sender) {
  using T = cm::EventType;
  if (e.type == T::kReqReceived) return on_req(*this, dev, e, sender);
  if (e.type == T::kSidrReqReceived) return on_sidr_req(*this, dev, e, sender);
  if (e.type == T::kSidrRepReceived) return on_sidr_rep(*this, e);
  auto it = by_comm_id.find(e.comm_id.value());
  if (it == by_comm_id.end()) return;  // its id is gone: the event is dropped, as the real library does
  IdPriv* id = it->second;
  const auto forget = [&] {
    untrack(*id);
    by_comm_id.erase(id->comm_id);
    id->comm_id = 0;
  };
  switch (e.type) {
    case T::kRepReceived: return on_rep(*this, dev, id, e);
    case T::kEstablished:
      id->connected_once = true;
      track(*id);
      // The RTU of rdma_establish: the application had CONNECT_RESPONSE and gets nothing more.
      if (id->listener == nullptr && id->id.qp == nullptr) return;
      if (id->listener == nullptr && id->rep) {
        const rdma_conn_param c = conn_of_rep(*id->rep);
        report(id, RDMA_CM_EVENT_ESTABLISHED, 0, &c, nullptr, id->rep->private_data.bytes.data(), cm::kRepUserBytes);
      } else {
        report(id, RDMA_CM_EVENT_ESTABLISHED, 0);
      }
      return;
    case T::kRejected: {
      // The QP goes to ERR when the application takes the event (rdma_get_cm_event), as librdmacm
      // does: until then the application owns it, and may have destroyed it.
      const cm::Rej& j = std::get<cm::Rej>(e.payload);
      rdma_conn_param c{};
      forget();
      report(id, RDMA_CM_EVENT_REJECTED, static_cast<int>(j.reason), &c, nullptr, j.private_data.bytes.data(),
             cm::kRejUserBytes);
      return;
    }
    case T::kUnreachable:
      forget();
      report(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      return;
    case T::kDisconnectRequested:
    case T::kDisconnected:
      // The QP is the application's (it may be destroyed already: perftest destroys its QPs with
      // ibv_destroy_qp and still gets DISCONNECTED); librdmacm leaves it alone here too.
      untrack(*id);
      if (!id->disconnected) {
        id->disconnected = true;
        id->state = IdState::kDisconnect;
        report(id, RDMA_CM_EVENT_DISCONNECTED, e.status != 0 ? -e.status : 0);
      }
      return;
    case T::kTimewaitExit:
      forget();
      if (id->disconnected) report(id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
      return;
    default: return;  // kMraReceived: the CM waits longer by itself
  }
}

}  // namespace softhca::rdmacm
