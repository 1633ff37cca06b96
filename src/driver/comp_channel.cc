// Completion channels as event queues: a ring of hwif::Eqe in host memory that the device fills
// (owner = pass number & 1, the other bytes first) and an eventfd it writes as the interrupt
// (CreateEqIn.irq_fd). channel->fd is that eventfd, so applications can poll() it.
// get_cq_event consumes the next valid EQE; only when there is none it blocks in read(fd) (or
// returns EAGAIN on a non-blocking fd) and looks again. An eventfd counter may be left non-zero by
// EQEs consumed without reading it: that only makes a later read return at once (a spurious
// wake-up, after which the ring is checked again), never loses an event.
// Who may touch what: the EQ consumer index under CompChannel::lock; the CQ's event count under
// the ibv_cq mutex (as libibverbs); CompChannel::users/refcnt on the control path under the lock.
#include <sys/eventfd.h>
#include <unistd.h>

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
  auto* ch = new (std::nothrow) CompChannel{};
  if (ch == nullptr) return fail_errno<ibv_comp_channel>(ENOMEM);
  const uint32_t nent = 1u << kEqLogNent;
  if (!ch->ring.allocate(static_cast<size_t>(nent) * hwif::kEqeBytes)) {
    delete ch;
    return fail_errno<ibv_comp_channel>(ENOMEM);
  }
  for (uint32_t i = 0; i < nent; ++i) {
    auto* e = new (ch->ring.data() + static_cast<size_t>(i) * hwif::kEqeBytes) hwif::Eqe{};
    e->owner = kEqeInitOwner;
  }
  ch->log_nent = kEqLogNent;
  const int fd = ::eventfd(0, EFD_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    delete ch;
    return fail_errno<ibv_comp_channel>(err);
  }
  hwif::CreateEqIn in;
  in.ring_addr = ch->ring.dma_addr();
  in.log_nent = kEqLogNent;
  in.irq_fd = fd;
  hwif::CreateEqOut out;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in, out); err != 0) {
    ::close(fd);
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
  hwif::DestroyEqIn in;
  in.eqn = ch->eqn;
  if (int err = hwif::exec_cmd(*to_ctx(ibch->context)->link.cmd, in); err != 0) return err;
  ::close(ibch->fd);
  delete ch;
  return 0;
}

// Returns 0 with the CQ, or -1 with errno (EAGAIN on a non-blocking fd with nothing pending),
// as ibv_get_cq_event.
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
    uint64_t count = 0;
    const ssize_t r = ::read(ibch->fd, &count, sizeof(count));
    if (r == static_cast<ssize_t>(sizeof(count)) || (r < 0 && errno == EINTR)) continue;
    if (r >= 0) errno = EIO;
    return -1;
  }
}

}  // namespace softhca::driver
