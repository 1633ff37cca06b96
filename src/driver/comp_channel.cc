// Completion channels as event queues: a ring of hwif::Eqe in host memory that the device fills
// (owner = pass number & 1, the other bytes first) and an MSI-X vector it raises as the interrupt.
// Both come from the host kernel (alloc_coherent, alloc_vector); channel->fd is the vector's file
// descriptor, so applications can poll() it.
// get_cq_event consumes the next valid EQE; only when there is none it waits for the vector
// (HostKernel::wait_vector: blocking, or EAGAIN on a non-blocking fd) and looks again. A firing
// may be left pending by EQEs consumed without waiting: that only makes a later wait return at
// once (a spurious wake-up, after which the ring is checked again), never loses an event.
// Who may touch what: the EQ consumer index under CompChannel::lock; the CQ's event count under
// the ibv_cq mutex (as libibverbs); CompChannel::users/refcnt on the control path under the lock.
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <new>

#include "driver/objects.h"
#include "driver/provider.h"
#include "hwif/cqe.h"

namespace softhca::driver {
namespace {

// 1024 EQEs (16 KiB). The device has no EQ consumer index, so the ring must hold every event not
// yet taken; each armed CQ produces at most one event per arm, so this bounds the CQs a channel
// may have armed with events outstanding at once.
constexpr uint32_t kEqLogNent = 10;
constexpr uint8_t kEqeInitOwner = 1;  // invalid for pass 0 (mlx5 MLX5_EQE_OWNER_INIT_VAL)

hwif::Eqe* eqe_at(const CompChannel& ch, uint32_t index) {
  return reinterpret_cast<hwif::Eqe*>(ch.ring.data()) + (index & ((1u << ch.log_nent) - 1));
}

// Takes the next valid EQE, if any, and returns the CQ it names (nullptr when none is pending).
// EQEs of unknown CQs (destroyed meanwhile) and of other types are skipped.
Cq* take_event(CompChannel& ch, Context& ctx) {
  std::lock_guard g(ch.lock);
  for (;;) {
    hwif::Eqe* eqe = eqe_at(ch, ch.ci);
    const uint8_t owner = std::atomic_ref<uint8_t>(eqe->owner).load(std::memory_order_acquire);
    if ((owner & 1) != ((ch.ci >> ch.log_nent) & 1)) return nullptr;
    ++ch.ci;
    if (eqe->type != hwif::kEqeTypeCompletion) continue;
    Cq* cq = nullptr;
    {
      std::lock_guard t(ctx.table_lock);
      cq = ctx.cqs.find(eqe->cqn.get());
    }
    if (cq == nullptr) continue;
    // Counted before ch.lock is released: destroy_cq takes ch.lock after unlisting the CQ, so it
    // either never sees this event's CQ or waits for this event to be acknowledged.
    pthread_mutex_lock(&cq->cq.mutex);
    ++cq->events_reported;
    pthread_mutex_unlock(&cq->cq.mutex);
    return cq;
  }
}

}  // namespace

ibv_comp_channel* create_comp_channel(ibv_context* ibctx_ptr) {
  Context* ctx = to_ctx(ibctx_ptr);
  pcie::HostKernel& kernel = *ctx->link.kernel;
  auto* ch = new (std::nothrow) CompChannel{};
  if (ch == nullptr) return fail_errno<ibv_comp_channel>(ENOMEM);
  const uint32_t nent = 1u << kEqLogNent;
  if (!ch->ring.allocate(kernel, static_cast<size_t>(nent) * hwif::kEqeBytes)) {
    const int err = errno;
    delete ch;
    return fail_errno<ibv_comp_channel>(err);
  }
  for (uint32_t i = 0; i < nent; ++i) {
    auto* e = new (ch->ring.data() + static_cast<size_t>(i) * hwif::kEqeBytes) hwif::Eqe{};
    e->owner = kEqeInitOwner;
  }
  ch->log_nent = kEqLogNent;
  const int fd = kernel.alloc_vector(&ch->msi_vector);
  if (fd < 0) {
    const int err = errno;
    delete ch;
    return fail_errno<ibv_comp_channel>(err);
  }
  hwif::CreateEqIn in;
  in.ring_addr = ch->ring.dma_addr();
  in.log_nent = kEqLogNent;
  in.msi_vector = ch->msi_vector;
  hwif::CreateEqOut out;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in, out); err != 0) {
    kernel.free_vector(ch->msi_vector, fd);
    delete ch;
    return fail_errno<ibv_comp_channel>(err);
  }
  ch->eqn = out.eqn;
  ch->ch.context = ibctx_ptr;
  ch->ch.fd = fd;
  ch->ch.refcnt = 0;
  return &ch->ch;
}

int destroy_comp_channel(ibv_comp_channel* ibch) {
  CompChannel* ch = to_channel(ibch);
  {
    std::lock_guard g(ch->lock);
    if (ch->users.load(std::memory_order_relaxed) != 0) return EBUSY;
  }
  const DeviceLink& link = to_ctx(ibch->context)->link;
  hwif::DestroyEqIn in;
  in.eqn = ch->eqn;
  if (int err = hwif::exec_cmd(*link.cmd, in); err != 0) return err;
  // After DestroyEq: the device raises the vector no more.
  link.kernel->free_vector(ch->msi_vector, ibch->fd);
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
