// Identifiers (rdmacm.md §3.1, §3.3, §3.4, §3.13, §3.16, §3.19): rdma_create_id, rdma_destroy_id,
// rdma_migrate_id, rdma_set_option, rdma_create_ep / rdma_destroy_ep, ECE, and the multicast calls
// softhca does not have yet (ENOSYS, docs/rdma-cm.md).
#include <arpa/inet.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "rdmacm/library.h"

using namespace softhca::rdmacm;
namespace cm = softhca::cm;

namespace {

// Ends what the id's connection has going as the kernel does when its cm_id is destroyed: a DREQ
// for an established connection, a REJ for a request not answered yet.
void drop_connection(Library& lib, IdPriv& id) {
  if (id.comm_id == 0 || id.dev == nullptr) return;
  if (id.id.qp_type != IBV_QPT_UD) {
    if (softhca::cm::Connection* c = id.dev->table->find(softhca::cm::CommId(id.comm_id))) {
      using S = softhca::cm::Connection::State;
      if (c->state() == S::kEstablished) {
        lib.run(*id.dev, c->disconnect(now()));
      } else if (c->state() == S::kReqRcvd || c->state() == S::kMraReqSent || c->state() == S::kRepRcvd ||
                 c->state() == S::kMraRepSent) {
        lib.run(*id.dev, c->reject(now(), softhca::cm::RejReason::kConsumerDefined));
      }
    }
  }
  lib.by_comm_id.erase(id.comm_id);
  id.comm_id = 0;
}

// Drops the events of `id` still queued on its channel, as the kernel's ucma_destroy_id does: they
// were never handed out, so nobody acknowledges them. A listener's unread CONNECT_REQUESTs go with
// their new ids, whose requests are rejected (the kernel destroys those ids).
void drop_queued_events(Library& lib, IdPriv& id) {
  for (rdma_cm_event* ev : id.channel->take_if([&](rdma_cm_event* e) {
         return reinterpret_cast<EventPriv*>(e)->accounted == &id;
       })) {
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->id != &id.id) {
      IdPriv* child = priv(ev->id);
      for (rdma_cm_event* own : child->channel->take_if([&](rdma_cm_event* e) {
             return reinterpret_cast<EventPriv*>(e)->accounted == child;
           })) {
        delete reinterpret_cast<EventPriv*>(own);
      }
      drop_connection(lib, *child);
      lib.ids.erase(child);
      if (child->channel->sync) delete_channel(child->channel);
      std::free(child->id.route.path_rec);
      delete child;
    }
    delete reinterpret_cast<EventPriv*>(ev);
  }
}

}  // namespace

extern "C" {

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context, rdma_port_space ps) {
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  if (id == nullptr) return fail(EINVAL);
  ibv_qp_type type;
  switch (ps) {
    case RDMA_PS_TCP:
    case RDMA_PS_IB: type = IBV_QPT_RC; break;
    case RDMA_PS_UDP:
    case RDMA_PS_IPOIB: type = IBV_QPT_UD; break;
    default: return fail(EINVAL);
  }
  auto* p = new (std::nothrow) IdPriv;
  if (p == nullptr) return fail(ENOMEM);
  p->channel = channel != nullptr ? to_channel(channel) : new_channel(true);
  if (p->channel == nullptr) {
    delete p;
    return -1;
  }
  p->id.channel = &p->channel->ch;
  p->id.context = context;
  p->id.ps = ps;
  p->id.qp_type = type;
  std::lock_guard<std::mutex> g(lib->mutex);
  lib->ids.insert(p);
  *id = &p->id;
  return 0;
}

int rdma_destroy_id(rdma_cm_id* id) {
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  if (id == nullptr) return fail(EINVAL);
  IdPriv* p = priv(id);
  if (p->id.event != nullptr) {
    rdma_ack_cm_event(p->id.event);
    p->id.event = nullptr;
  }
  std::unique_lock<std::mutex> g(lib->mutex);
  drop_connection(*lib, *p);
  if (p->state == IdState::kListen) {
    for (Device* d : p->bound_on) (void)d->table->unlisten(softhca::cm::ServiceId(p->service_id));
    std::erase(lib->listeners, p);
  }
  unbind_service(*p);
  p->state = IdState::kDestroying;
  drop_queued_events(*lib, *p);
  // Every event handed out for the id must have been acknowledged (rdmacm.md §3.3).
  lib->acked.wait(g, [&] { return p->events_acked >= p->events_reported; });
  lib->ids.erase(p);
  g.unlock();
  if (p->channel->sync) delete_channel(p->channel);
  std::free(p->id.route.path_rec);
  delete p;
  return 0;
}

int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  if (id == nullptr) return fail(EINVAL);
  IdPriv* p = priv(id);
  if (channel == nullptr && p->channel->sync) return fail(EINVAL);
  Channel* to = channel != nullptr ? to_channel(channel) : new_channel(true);
  if (to == nullptr) return -1;
  Channel* from = p->channel;
  if (from->sync && p->id.event != nullptr) {
    rdma_ack_cm_event(p->id.event);
    p->id.event = nullptr;
  }
  std::unique_lock<std::mutex> g(lib->mutex);
  from->move_events_of(id, *to);
  p->channel = to;
  p->id.channel = &to->ch;
  // Events already handed out on the old channel must be acknowledged first.
  lib->acked.wait(g, [&] { return p->events_acked >= p->events_reported; });
  g.unlock();
  if (from->sync) delete_channel(from);
  return 0;
}

int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval, size_t optlen) {
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  if (id == nullptr || optval == nullptr) return fail(EINVAL);
  IdPriv* p = priv(id);
  std::lock_guard<std::mutex> g(lib->mutex);
  if (level == RDMA_OPTION_IB) {
    if (optname != RDMA_OPTION_IB_PATH) return fail(ENOSYS);
    return fail(EOPNOTSUPP);  // path records from the caller: no SA here, and none are taken
  }
  if (level != RDMA_OPTION_ID) return fail(ENOSYS);
  switch (optname) {
    case RDMA_OPTION_ID_TOS:
      if (optlen != sizeof(uint8_t)) return fail(EINVAL);
      p->tos = *static_cast<uint8_t*>(optval);
      return 0;
    case RDMA_OPTION_ID_REUSEADDR: {
      if (optlen != sizeof(int)) return fail(EINVAL);
      const bool on = *static_cast<int*>(optval) != 0;
      if ((on && p->state == IdState::kListen) || (!on && p->state != IdState::kIdle)) return fail(EINVAL);
      p->reuse_addr = on;
      return 0;
    }
    case RDMA_OPTION_ID_AFONLY:
      if (optlen != sizeof(int)) return fail(EINVAL);
      if (p->state != IdState::kIdle && p->state != IdState::kAddrBound) return fail(EINVAL);
      p->af_only = *static_cast<int*>(optval) != 0;
      return 0;
    case RDMA_OPTION_ID_ACK_TIMEOUT:
      if (optlen != sizeof(uint8_t)) return fail(EINVAL);
      if (p->id.qp_type != IBV_QPT_RC && p->id.qp_type != IBV_QPT_UC) return fail(EINVAL);
      p->ack_timeout = *static_cast<uint8_t*>(optval);
      return 0;
    default: return fail(ENOSYS);
  }
}

int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || res == nullptr) return fail(EINVAL);
  rdma_cm_id* cm_id = nullptr;
  if (rdma_create_id(nullptr, &cm_id, nullptr, static_cast<rdma_port_space>(res->ai_port_space)) != 0) return -1;
  IdPriv* p = priv(cm_id);
  if (res->ai_qp_type) p->id.qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
  const auto undo = [&] {
    const int err = errno;
    rdma_destroy_ep(cm_id);
    return fail(err);
  };
  if (res->ai_flags & RAI_PASSIVE) {
    if (rdma_bind_addr(cm_id, res->ai_src_addr) != 0) return undo();
    if (pd != nullptr) p->id.pd = pd;
    if (qp_init_attr != nullptr) {
      p->ep_qp_attr = *qp_init_attr;
      p->ep_qp_attr->qp_type = p->id.qp_type;
    }
    *id = cm_id;
    return 0;
  }
  if (rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000) != 0) return undo();
  if (rdma_resolve_route(cm_id, 2000) != 0) return undo();
  if (qp_init_attr != nullptr) {
    qp_init_attr->qp_type = p->id.qp_type;
    if (rdma_create_qp(cm_id, pd, qp_init_attr) != 0) return undo();
  }
  if (res->ai_connect_len > 0 && res->ai_connect != nullptr) {
    const auto* b = static_cast<const uint8_t*>(res->ai_connect);
    p->connect_data.assign(b, b + res->ai_connect_len);
  }
  *id = cm_id;
  return 0;
}

void rdma_destroy_ep(rdma_cm_id* id) {
  if (id == nullptr) return;
  if (id->qp != nullptr) rdma_destroy_qp(id);
  if (id->srq != nullptr) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}

int rdma_set_local_ece(rdma_cm_id* id, ibv_ece* ece) {
  if (id == nullptr || id->qp != nullptr || ece == nullptr || ece->vendor_id == 0 || ece->comp_mask != 0)
    return fail(EINVAL);
  return fail(EOPNOTSUPP);  // softhca's device has no ECE options to offer (docs/rdma-cm.md)
}

int rdma_get_remote_ece(rdma_cm_id* id, ibv_ece* ece) {
  if (id == nullptr || id->qp != nullptr || ece == nullptr) return fail(EINVAL);
  *ece = ibv_ece{};  // nothing from the peer: softhca's CM sends and reads no ECE
  return 0;
}

// Multicast needs device multicast (ibv_attach_mcast), which softhca does not have yet.
int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* /*context*/) {
  if (id == nullptr || addr == nullptr) return fail(EINVAL);
  return fail(ENOSYS);
}

int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* attr, void* /*context*/) {
  if (id == nullptr || attr == nullptr) return fail(EINVAL);
  if (attr->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED) return fail(ENOTSUP);
  return fail(ENOSYS);
}

int rdma_leave_multicast(rdma_cm_id* id, sockaddr* addr) {
  if (id == nullptr || addr == nullptr) return fail(EINVAL);
  return fail(EADDRNOTAVAIL);  // nothing was joined
}

}  // extern "C"
