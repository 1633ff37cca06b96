// Completion channels as event queues (event_ring.h): the device writes a completion EQE naming
// the CQ into the channel's ring and raises its MSI-X vector; channel->fd is the vector's file
// descriptor, readable exactly while an EQE waits, so applications can poll() or epoll it.
// get_cq_event takes the next valid EQE; only when there is none it publishes the consumer index
// and waits for the vector (HostKernel::wait_vector: blocking, or EAGAIN on a non-blocking fd;
// EINTR when a signal interrupts it) and looks again.
// Who may touch what: the EQ's consumer state under EventRing::lock; the CQ's event count under
// the ibv_cq mutex (as libibverbs); CompChannel::users/refcnt on the control path under the lock.
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <new>

#include "driver/objects.h"
#include "driver/provider.h"
#include "hwif/cqe.h"

namespace softhca::driver {
namespace {

// 1024 EQEs (16 KiB). The device holds back an event that finds the ring full until the consumer
// index frees a slot, so the size bounds only how many events wait in host memory.
constexpr uint32_t kEqLogNent = 10;

// Takes the next valid EQE, if any, and returns the CQ it names (nullptr when none is pending).
// EQEs of unknown CQs (destroyed meanwhile) and of other types are skipped.
Cq* take_event(CompChannel& ch, Context& ctx) {
  std::lock_guard g(ch.eq.lock);
  for (;;) {
    const hwif::Eqe* eqe = event_ring_peek(ch.eq);
    if (eqe == nullptr) {
      event_ring_idle(ctx, ch.eq);
      return nullptr;
    }
    const uint8_t type = eqe->type;
    const uint32_t cqn = eqe->element.get();
    event_ring_pop(ctx, ch.eq);
    if (type != hwif::kEqeTypeCompletion) continue;
    Cq* cq = nullptr;
    {
      std::lock_guard t(ctx.table_lock);
      cq = ctx.cqs.find(cqn);
    }
    if (cq == nullptr) continue;
    // Counted before the ring lock is released: destroy_cq takes it after unlisting the CQ, so
    // it either never sees this event's CQ or waits for this event to be acknowledged.
    pthread_mutex_lock(&cq->cq.mutex);
    ++cq->events_reported;
    pthread_mutex_unlock(&cq->cq.mutex);
    return cq;
  }
}

}  // namespace

ibv_comp_channel* create_comp_channel(ibv_context* ibctx_ptr) {
  Context* ctx = to_ctx(ibctx_ptr);
  auto* ch = new (std::nothrow) CompChannel{};
  if (ch == nullptr) return fail_errno<ibv_comp_channel>(ENOMEM);
  if (int err = event_ring_create(*ctx, ch->eq, kEqLogNent, false); err != 0) {
    delete ch;
    return fail_errno<ibv_comp_channel>(err);
  }
  ch->ch.context = ibctx_ptr;
  ch->ch.fd = ch->eq.fd;
  ch->ch.refcnt = 0;
  return &ch->ch;
}

int destroy_comp_channel(ibv_comp_channel* ibch) {
  CompChannel* ch = to_channel(ibch);
  {
    std::lock_guard g(ch->eq.lock);
    if (ch->users.load(std::memory_order_relaxed) != 0) return EBUSY;
  }
  if (int err = event_ring_destroy(*to_ctx(ibch->context), ch->eq); err != 0) return err;
  delete ch;
  return 0;
}

// Returns 0 with the CQ, or -1 with errno (EAGAIN on a non-blocking fd with nothing pending, EINTR
// when a signal interrupted the wait), as ibv_get_cq_event.
int get_cq_event(ibv_comp_channel* ibch, ibv_cq** cq_out, void** cq_context) {
  CompChannel* ch = to_channel(ibch);
  Context* ctx = to_ctx(ibch->context);
  for (;;) {
    if (Cq* cq = take_event(*ch, *ctx); cq != nullptr) {
      cq->arm_sn.fetch_add(1, std::memory_order_relaxed);  // mlx5_cq_event
      *cq_out = &cq->cq;
      *cq_context = cq->cq.cq_context;
      return 0;
    }
    // A signal that interrupts the wait ends it with EINTR, as rdma-core's read() of the channel fd
    // does (a handler installed with SA_RESTART restarts the wait instead, in the kernel): programs
    // such as qperf end timed tests with SIGALRM and expect the waiter to come back.
    if (ctx->link.kernel->wait_vector(ibch->fd) == 0) continue;
    return -1;
  }
}

}  // namespace softhca::driver
