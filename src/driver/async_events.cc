// Asynchronous events (ibv_get_async_event(3)): each context has an async EQ (event_ring.h) that
// the device fills with the affiliated events of the context's QPs, CQs and SRQs and with the
// port's state changes; its vector's fd is the context's async_fd, readable exactly while an
// event waits. An EQE names its object by number; the event hands out the process's ibv_qp,
// ibv_cq or ibv_srq and counts it as reported, and destroy_qp/cq/srq wait until every reported
// event was acknowledged (libibverbs' events_completed counters), so an event's element is never
// a freed object. EQEs of objects destroyed before their event was taken are skipped, as the
// kernel drops an object's queued events when it is destroyed.
// Who may touch what: the ring under Context::async_eq.lock; the reported counts under the
// object's ibv mutex, taken while the ring lock is held (destroy_* take the ring lock after
// unlisting the object, then wait on the mutex).
#include <cerrno>
#include <cstdint>
#include <mutex>

#include "driver/objects.h"
#include "driver/provider.h"
#include "hwif/cqe.h"

namespace softhca::driver {
namespace {

// 256 EQEs (4 KiB): events the device holds back while it is full are written as it drains.
constexpr uint32_t kAsyncEqLogNent = 8;

bool qp_event_type(uint8_t type, ibv_event_type& out) {
  switch (type) {
    case hwif::kEqeTypeCommEst: out = IBV_EVENT_COMM_EST; return true;
    case hwif::kEqeTypeSqDrained: out = IBV_EVENT_SQ_DRAINED; return true;
    case hwif::kEqeTypeWqCatastrophic: out = IBV_EVENT_QP_FATAL; return true;
    case hwif::kEqeTypeWqInvalidRequest: out = IBV_EVENT_QP_REQ_ERR; return true;
    case hwif::kEqeTypeWqAccessError: out = IBV_EVENT_QP_ACCESS_ERR; return true;
    case hwif::kEqeTypeSrqLastWqe: out = IBV_EVENT_QP_LAST_WQE_REACHED; return true;
    default: return false;
  }
}

// Counts one reported event of the object behind `mutex`.
void count_reported(pthread_mutex_t* mutex, uint32_t& reported) {
  pthread_mutex_lock(mutex);
  ++reported;
  pthread_mutex_unlock(mutex);
}

// The event of one EQE; false for an EQE to skip (an object gone, a type this ring does not take).
bool resolve(Context& ctx, const hwif::Eqe& e, ibv_async_event& ev) {
  const uint32_t n = e.element.get() & 0xffffff;
  std::lock_guard t(ctx.table_lock);
  if (e.type == hwif::kEqeTypePortChange) {
    if (e.sub_type != hwif::kEqePortActive && e.sub_type != hwif::kEqePortDown) return false;
    ev.event_type = e.sub_type == hwif::kEqePortActive ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
    ev.element.port_num = e.port;
    return true;
  }
  if (e.type == hwif::kEqeTypeCqError) {
    Cq* cq = ctx.cqs.find(n);
    if (cq == nullptr) return false;
    count_reported(&cq->cq.mutex, cq->async_events_reported);
    ev.event_type = IBV_EVENT_CQ_ERR;
    ev.element.cq = &cq->cq;
    return true;
  }
  if (e.type == hwif::kEqeTypeSrqLimit) {
    Srq* srq = ctx.srqs.find(n);
    if (srq == nullptr) return false;
    count_reported(&srq->srq.mutex, srq->events_reported);
    ev.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
    ev.element.srq = &srq->srq;
    return true;
  }
  ibv_event_type type;
  if (!qp_event_type(e.type, type)) return false;
  Qp* qp = ctx.qps.find(n);
  if (qp == nullptr) return false;
  count_reported(&qp->qpx.qp_base.mutex, qp->events_reported);
  ev.event_type = type;
  ev.element.qp = &qp->qpx.qp_base;
  return true;
}

bool take_event(Context& ctx, ibv_async_event& ev) {
  std::lock_guard g(ctx.async_eq.lock);
  for (;;) {
    const hwif::Eqe* eqe = event_ring_peek(ctx.async_eq);
    if (eqe == nullptr) {
      event_ring_idle(ctx, ctx.async_eq);
      return false;
    }
    const hwif::Eqe e = *eqe;
    event_ring_pop(ctx, ctx.async_eq);
    if (resolve(ctx, e, ev)) return true;
  }
}

}  // namespace

int open_async_events(Context& ctx) { return event_ring_create(ctx, ctx.async_eq, kAsyncEqLogNent, true); }

int close_async_events(Context& ctx) { return event_ring_destroy(ctx, ctx.async_eq); }

int get_async_event(ibv_context* ibctx_ptr, ibv_async_event* event) {
  Context* ctx = to_ctx(ibctx_ptr);
  for (;;) {
    if (take_event(*ctx, *event)) return 0;
    // -1 with EAGAIN (O_NONBLOCK on async_fd) or EINTR (a signal), as rdma-core's read().
    if (ctx->link.kernel->wait_vector(ctx->async_eq.fd) != 0) return -1;
  }
}

void ack_async_event(ibv_async_event* event) {
  pthread_mutex_t* mutex = nullptr;
  pthread_cond_t* cond = nullptr;
  unsigned int* completed = nullptr;
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR: {
      ibv_cq* cq = event->element.cq;
      mutex = &cq->mutex;
      cond = &cq->cond;
      completed = &cq->async_events_completed;
      break;
    }
    case IBV_EVENT_SRQ_LIMIT_REACHED:
    case IBV_EVENT_SRQ_ERR: {
      ibv_srq* srq = event->element.srq;
      mutex = &srq->mutex;
      cond = &srq->cond;
      completed = &srq->events_completed;
      break;
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
      ibv_qp* qp = event->element.qp;
      mutex = &qp->mutex;
      cond = &qp->cond;
      completed = &qp->events_completed;
      break;
    }
    default:
      return;  // port and device events name no object
  }
  pthread_mutex_lock(mutex);
  ++*completed;
  pthread_cond_signal(cond);
  pthread_mutex_unlock(mutex);
}

}  // namespace softhca::driver
