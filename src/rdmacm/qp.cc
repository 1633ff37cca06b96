// QPs and SRQs on ids (rdmacm.md §3.10): rdma_create_qp(_ex) with the CQs the library makes when
// the caller gives none, the state changes librdmacm does itself (UD straight to RTS, connected QPs
// to INIT, then RTR and RTS with the CM's values at accept and on the REP), rdma_init_qp_attr, and
// rdma_create_srq(_ex) / rdma_destroy_srq.
#include <arpa/inet.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rdmacm/library.h"

namespace softhca::rdmacm {

namespace {

bool connected(const IdPriv& id) {
  const ibv_qp_type t = id.id.qp_type;
  return t == IBV_QPT_RC || t == IBV_QPT_UC || t == IBV_QPT_XRC_SEND || t == IBV_QPT_XRC_RECV;
}
// The reliable requesters (RC and XRC INI) and responders (RC and XRC TGT): what the RTR and RTS
// steps set beyond UC's, as the kernel's cm_init_qp_rtr_attr / cm_init_qp_rts_attr.
bool reliable_responder(const IdPriv& id) { return id.id.qp_type == IBV_QPT_RC || id.id.qp_type == IBV_QPT_XRC_RECV; }
bool reliable_requester(const IdPriv& id) { return id.id.qp_type == IBV_QPT_RC || id.id.qp_type == IBV_QPT_XRC_SEND; }

// The device's XRC domain (opened on first use), for the XRC QPs and SRQs of its ids.
ibv_xrcd* xrcd_of(IdPriv& id) {
  Device* d = id.dev;
  if (d == nullptr) return nullptr;
  if (d->xrcd == nullptr) {
    ibv_xrcd_init_attr a{};
    a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    a.fd = -1;
    a.oflags = O_CREAT;
    d->xrcd = ibv_open_xrcd(d->ctx, &a);
  }
  return d->xrcd;
}

// What the peer may do through the QP once connected: WRITE always, READ and atomics when this
// side takes them (its responder resources in the exchange are not 0).
unsigned int access_for(const IdPriv& id) {
  unsigned int a = IBV_ACCESS_REMOTE_WRITE;
  const uint8_t resp = id.listener ? (id.rep ? id.rep->responder_resources : 0)
                                   : (id.req ? id.req->responder_resources : 0);
  if (resp > 0) a |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  return a;
}

// rdma_init_qp_attr's answer for `state` (rdmacm.md §3.10 table), from what the CM exchanged.
int init_attr(const IdPriv& id, ibv_qp_attr* a, int* mask, ibv_qp_state state) {
  *a = ibv_qp_attr{};
  a->qp_state = state;
  switch (state) {
    case IBV_QPS_INIT:
      a->pkey_index = 0;
      a->port_num = 1;
      *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (connected(id)) {
        a->qp_access_flags = id.req ? access_for(id) : 0;
        *mask |= IBV_QP_ACCESS_FLAGS;
      } else {
        a->qkey = id.qkey;
        *mask |= IBV_QP_QKEY;
      }
      return 0;
    case IBV_QPS_RTR: {
      if (!connected(id)) {
        *mask = IBV_QP_STATE;
        return 0;
      }
      if (!id.req || !id.rep) return EINVAL;
      const cm::QpAttributes q =
          cm::qp_attributes(id.listener ? cm::Side::kPassive : cm::Side::kActive, *id.req, *id.rep);
      a->ah_attr = ah_attr_of(id);
      a->path_mtu = static_cast<ibv_mtu>(q.path_mtu);
      a->dest_qp_num = q.dest_qp_num.value();
      a->rq_psn = q.rq_psn.value();
      *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (reliable_responder(id)) {
        a->max_dest_rd_atomic = q.max_dest_rd_atomic;
        a->min_rnr_timer = 0;
        *mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
      return 0;
    }
    case IBV_QPS_RTS: {
      *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      if (!connected(id)) return 0;
      if (!id.req || !id.rep) return EINVAL;
      const cm::QpAttributes q =
          cm::qp_attributes(id.listener ? cm::Side::kPassive : cm::Side::kActive, *id.req, *id.rep);
      a->sq_psn = q.sq_psn.value();
      if (id.id.qp_type == IBV_QPT_XRC_RECV) {
        a->timeout = id.ack_timeout.value_or(q.timeout);
        *mask |= IBV_QP_TIMEOUT;
      }
      if (reliable_requester(id)) {
        a->timeout = id.ack_timeout.value_or(q.timeout);
        a->retry_cnt = q.retry_cnt;
        a->rnr_retry = q.rnr_retry;
        a->max_rd_atomic = q.max_rd_atomic;
        *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      }
      return 0;
    }
    default: return EINVAL;
  }
}

// A CQ of `entries` (at least 1) with a completion channel of its own, cq_context = the id, as
// librdmacm makes for rdma_get_send_comp / rdma_get_recv_comp. false with errno.
bool library_cq(rdma_cm_id* id, uint32_t entries, ibv_comp_channel** channel, ibv_cq** cq) {
  *channel = ibv_create_comp_channel(id->verbs);
  *cq = *channel ? ibv_create_cq(id->verbs, static_cast<int>(std::max(1u, entries)), id, *channel, 0) : nullptr;
  if (*cq != nullptr) return true;
  const int err = errno;
  if (*channel != nullptr) ibv_destroy_comp_channel(*channel);
  *channel = nullptr;
  errno = err;
  return false;
}

void drop_library_cq(ibv_comp_channel** channel, ibv_cq** cq) {
  if (*cq != nullptr) ibv_destroy_cq(*cq);
  if (*channel != nullptr) ibv_destroy_comp_channel(*channel);
  *cq = nullptr;
  *channel = nullptr;
}

int modify(ibv_qp* qp, const IdPriv& id, ibv_qp_state state) {
  ibv_qp_attr a;
  int mask = 0;
  if (const int err = init_attr(id, &a, &mask, state)) return err;
  return ibv_modify_qp(qp, &a, mask);
}

}  // namespace

int qp_to_rts(IdPriv& id, const cm::QpAttributes& /*a*/) {
  ibv_qp* qp = id.id.qp;
  if (qp == nullptr) return 0;
  // INIT again with the access the exchange allows (the QP is in INIT since rdma_create_qp), then
  // RTR and RTS; init_attr() derives the same values the cm layer gave.
  if (const int err = modify(qp, id, IBV_QPS_INIT)) return err;
  if (const int err = modify(qp, id, IBV_QPS_RTR)) return err;
  return modify(qp, id, IBV_QPS_RTS);
}

void qp_to_error(IdPriv& id) {
  if (id.id.qp == nullptr) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  (void)ibv_modify_qp(id.id.qp, &a, IBV_QP_STATE);
}

}  // namespace softhca::rdmacm

using namespace softhca::rdmacm;
namespace cm = softhca::cm;

extern "C" {

int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  if (id == nullptr || attr == nullptr || id->qp != nullptr || id->verbs == nullptr) return fail(EINVAL);
  IdPriv* p = priv(id);
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == nullptr) {
    attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
    attr->pd = id->pd;
  }
  if (attr->pd == nullptr || attr->pd->context != id->verbs) return fail(EINVAL);
  // An XRC TGT QP is made in the device's XRC domain unless the caller names one.
  if (attr->qp_type == IBV_QPT_XRC_RECV && (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || attr->xrcd == nullptr)) {
    attr->xrcd = xrcd_of(*p);
    if (attr->xrcd == nullptr) return -1;
    attr->comp_mask |= IBV_QP_INIT_ATTR_XRCD;
  }
  // CQs the caller did not give: the library's own, with a completion channel, cq_context = id.
  if (attr->send_cq == nullptr && id->send_cq == nullptr) {
    if (!library_cq(id, attr->cap.max_send_wr, &id->send_cq_channel, &id->send_cq)) return -1;
    p->own_send_cq = true;
  }
  if (attr->recv_cq == nullptr && id->recv_cq == nullptr) {
    if (!library_cq(id, attr->cap.max_recv_wr, &id->recv_cq_channel, &id->recv_cq)) return -1;
    p->own_recv_cq = true;
  }
  if (attr->send_cq == nullptr) attr->send_cq = id->send_cq;
  if (attr->recv_cq == nullptr) attr->recv_cq = id->recv_cq;
  if (attr->srq == nullptr && id->srq != nullptr) attr->srq = id->srq;
  ibv_qp* qp = ibv_create_qp_ex(id->verbs, attr);
  if (qp == nullptr) return -1;
  std::lock_guard<std::mutex> g(lib->mutex);
  // UD: straight to RTS (udaddy reads the Q_Key back); connected: INIT until the CM exchange.
  int err = modify(qp, *p, IBV_QPS_INIT);
  if (err == 0 && !connected(*p)) err = modify(qp, *p, IBV_QPS_RTR);
  if (err == 0 && !connected(*p)) err = modify(qp, *p, IBV_QPS_RTS);
  if (err != 0) {
    ibv_destroy_qp(qp);
    return fail(err);
  }
  if (qp->pd != nullptr) id->pd = qp->pd;  // (a TGT QP has none: the id keeps the device's)
  id->qp = qp;
  return 0;
}

int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || qp_init_attr == nullptr) return fail(EINVAL);
  ibv_qp_init_attr_ex x{};
  std::memcpy(&x, qp_init_attr, sizeof *qp_init_attr);
  x.comp_mask = IBV_QP_INIT_ATTR_PD;
  x.pd = pd != nullptr ? pd : id->pd;
  const int rc = rdma_create_qp_ex(id, &x);
  if (rc == 0) std::memcpy(qp_init_attr, &x, sizeof *qp_init_attr);  // the caps it got (rdma_client)
  return rc;
}

void rdma_destroy_qp(rdma_cm_id* id) {
  if (id == nullptr) return;
  IdPriv* p = priv(id);
  if (id->qp != nullptr) ibv_destroy_qp(id->qp);
  id->qp = nullptr;
  if (p->own_send_cq) drop_library_cq(&id->send_cq_channel, &id->send_cq);
  if (p->own_recv_cq) drop_library_cq(&id->recv_cq_channel, &id->recv_cq);
  p->own_send_cq = p->own_recv_cq = false;
}

int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  if (id == nullptr || qp_attr == nullptr || qp_attr_mask == nullptr) return fail(EINVAL);
  std::lock_guard<std::mutex> g(lib->mutex);
  const int err = init_attr(*priv(id), qp_attr, qp_attr_mask, qp_attr->qp_state);
  return err != 0 ? fail(err) : 0;
}

// An XRC SRQ (IBV_SRQT_XRC) goes in the device's XRC domain and completes in the id's receive CQ
// (the library's own, made here, unless the caller names a domain and a CQ), as librdmacm's.
int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
  if (id == nullptr || attr == nullptr || id->verbs == nullptr) return fail(EINVAL);
  const bool xrc = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type == IBV_SRQT_XRC;
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC && !xrc) return fail(EOPNOTSUPP);
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || attr->pd == nullptr) {
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    attr->pd = id->pd;
  }
  if (xrc) {
    IdPriv* p = priv(id);
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || attr->xrcd == nullptr) {
      attr->xrcd = xrcd_of(*p);
      if (attr->xrcd == nullptr) return -1;
      attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD;
    }
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || attr->cq == nullptr) {
      if (id->recv_cq == nullptr) {
        if (!library_cq(id, attr->attr.max_wr, &id->recv_cq_channel, &id->recv_cq)) return -1;
        p->own_recv_cq = true;
      }
      attr->cq = id->recv_cq;
      attr->comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
    }
    ibv_srq* srq = ibv_create_srq_ex(id->verbs, attr);
    if (srq == nullptr) return -1;
    id->srq = srq;
    return 0;
  }
  ibv_srq_init_attr plain{};
  plain.srq_context = attr->srq_context;
  plain.attr = attr->attr;
  ibv_srq* srq = ibv_create_srq(attr->pd, &plain);
  if (srq == nullptr) return -1;
  attr->attr = plain.attr;
  id->srq = srq;
  return 0;
}

int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (id == nullptr || attr == nullptr) return fail(EINVAL);
  ibv_srq_init_attr_ex x{};
  x.srq_context = attr->srq_context;
  x.attr = attr->attr;
  x.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  // An id of an XRC TGT QP gets an XRC SRQ, as librdmacm's rdma_create_srq gives it.
  x.srq_type = id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
  x.pd = pd != nullptr ? pd : id->pd;
  const int rc = rdma_create_srq_ex(id, &x);
  if (rc == 0) attr->attr = x.attr;
  return rc;
}

void rdma_destroy_srq(rdma_cm_id* id) {
  if (id == nullptr || id->srq == nullptr) return;
  ibv_destroy_srq(id->srq);
  id->srq = nullptr;
}

}  // extern "C"
