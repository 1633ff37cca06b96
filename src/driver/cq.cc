// Control path of completion queues: create (CreateCq with a ring of CQEs initialised invalid and
// a doorbell record; create_cq_ex also asks for timestamps and installs the ibv_cq_ex ops),
// moderation (ModifyCq), resize (a new ring, ResizeCq, the unpolled CQEs copied over), destroy, event
// acknowledgement, and cleaning a CQ of the CQEs of a QP that is reset or destroyed (mlx5
// __mlx5_cq_clean).
// Who may touch what: the ring, log_nent and cons_index belong to whoever holds Cq::lock (poll_cq,
// arm, cq_clean, resize_cq); comp_events_completed/events_reported are under the ibv_cq mutex as
// libibverbs does; Cq::users is the control path's count of queues using the CQ.
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <utility>

#include "driver/cq_ring.h"
#include "driver/objects.h"
#include "driver/provider.h"
#include "driver/wqe_ring.h"
#include "hwif/cqe.h"

namespace softhca::driver {
namespace {

constexpr uint8_t kCqeInitOpOwn = static_cast<uint8_t>(hwif::CqeOpcode::kInvalid) << 4;  // 0xF0, owner 0
constexpr uint32_t kMaxCqeLog = 24;  // nent <= 2^24 (verbs-abi.md §6.3)

// A ring of nent CQEs from the host kernel, every entry invalid (opcode 0xF, owner 0): what the
// device is given at create and at resize.
bool allocate_ring(pcie::HostKernel& kernel, uint32_t nent, HostBuffer& ring, const ExternalAllocator* ext = nullptr) {
  if (!ring.allocate(kernel, static_cast<size_t>(nent) * hwif::kCqeBytes, ext, ExternalAllocator::kCq)) return false;
  for (uint32_t i = 0; i < nent; ++i) {
    auto* c = new (ring.data() + static_cast<size_t>(i) * hwif::kCqeBytes) hwif::Cqe64{};
    c->op_own = kCqeInitOpOwn;
  }
  return true;
}

// CQEs software owns from cons_index on, as poll_cq would find them now. Caller holds cq.lock.
uint32_t outstanding_cqes(const Cq& cq) {
  const uint32_t nent = 1u << cq.log_nent;
  uint32_t n = 0;
  while (n < nent && cqe_if_valid(cq, cq.cons_index + n) != nullptr) ++n;
  return n;
}

// create_cq and create_cq_ex: `dev_flags` are hwif::CqFlags; `parent`, a parent domain whose
// allocator gives the ring and doorbell record.
Cq* make_cq(ibv_context* ibctx_ptr, int cqe, ibv_comp_channel* channel, int comp_vector, uint32_t dev_flags,
            Pd* parent = nullptr) {
  Context* ctx = to_ctx(ibctx_ptr);
  if (cqe < 0 || static_cast<uint32_t>(cqe) > ctx->caps.max_cqe) return fail_errno<Cq>(EINVAL);
  if (comp_vector < 0 || comp_vector >= ibctx_ptr->num_comp_vectors) return fail_errno<Cq>(EINVAL);
  const uint32_t nent = roundup_pow2(static_cast<uint32_t>(cqe) + 1);
  const uint32_t log_nent = log2_exact(nent);
  if (log_nent > kMaxCqeLog) return fail_errno<Cq>(EINVAL);

  auto* cq = new (std::nothrow) Cq{};
  if (cq == nullptr) return fail_errno<Cq>(ENOMEM);
  // Cq{} zeroes the union's first member only: the ibv_cq_ex tail (comp_mask, status, wr_id, ops)
  // is zeroed here, before the ibv_cq's mutex and condition are initialised below.
  std::memset(&cq->cqx, 0, sizeof(cq->cqx));
  pcie::HostKernel& kernel = *ctx->link.kernel;
  const ExternalAllocator* ext = parent != nullptr ? parent->buffers() : nullptr;
  if (!allocate_ring(kernel, nent, cq->ring, ext) ||
      !cq->dbrec_page.allocate(kernel, hwif::kDbRecBytes, ext, ExternalAllocator::kDbr)) {
    const int err = errno;
    delete cq;
    return fail_errno<Cq>(err);
  }
  cq->dbrec = new (cq->dbrec_page.data()) hwif::CqDbRec{};
  cq->log_nent = log_nent;
  cq->ctx = ctx;
  cq->channel = channel == nullptr ? nullptr : to_channel(channel);

  hwif::CreateCqIn in;
  in.ring_addr = cq->ring.dma_addr();
  in.dbrec_addr = cq->dbrec_page.dma_addr();
  in.log_nent = log_nent;
  in.eqn = cq->channel == nullptr ? hwif::kNoEq : cq->channel->eq.eqn;
  in.uar_index = ctx->link.uar_index;
  in.async_eqn = ctx->async_eq.eqn;
  in.flags = dev_flags;
  hwif::CreateCqOut out;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in, out); err != 0) {
    delete cq;
    return fail_errno<Cq>(err);
  }
  cq->cqn = out.cqn;
  {
    std::lock_guard g(ctx->table_lock);
    if (!ctx->cqs.insert(out.cqn, cq)) {
      hwif::DestroyCqIn d;
      d.cqn = out.cqn;
      (void)hwif::exec_cmd(*ctx->link.cmd, d);
      delete cq;
      return fail_errno<Cq>(ENOMEM);
    }
  }
  if (cq->channel != nullptr) {
    std::lock_guard g(cq->channel->eq.lock);
    cq->channel->users.fetch_add(1, std::memory_order_relaxed);
    cq->channel->ch.refcnt++;
  }
  if (parent != nullptr) {
    cq->parent = parent;
    parent->users.fetch_add(1, std::memory_order_relaxed);
  }
  ibv_cq& c = cq->cq;
  c.context = ibctx_ptr;
  c.channel = channel;
  c.handle = out.cqn;
  c.cqe = static_cast<int>(nent - 1);
  pthread_mutex_init(&c.mutex, nullptr);
  pthread_cond_init(&c.cond, nullptr);
  return cq;
}

// What create_cq_ex takes (mlx5 alike): the standard fields and both timestamps; a single-threaded
// CQ is accepted and still locked (the lock is uncontended then).
constexpr uint64_t kCqExWcFlags = uint64_t{IBV_WC_STANDARD_FLAGS} | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                                   IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
constexpr uint32_t kCqExFlags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;

}  // namespace

ibv_cq* create_cq(ibv_context* ibctx_ptr, int cqe, ibv_comp_channel* channel, int comp_vector) {
  Cq* cq = make_cq(ibctx_ptr, cqe, channel, comp_vector, 0);
  return cq == nullptr ? nullptr : &cq->cq;
}

ibv_cq_ex* create_cq_ex(ibv_context* ibctx_ptr, const ibv_cq_init_attr_ex* attr) {
  // rdma-core 44's inline wrapper checks nothing: comp_mask bits it does not define are EINVAL here.
  constexpr uint32_t kKnownCompMask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
  if ((attr->comp_mask & ~kKnownCompMask) != 0) return fail_errno<ibv_cq_ex>(EINVAL);
  if ((attr->wc_flags & ~kCqExWcFlags) != 0) return fail_errno<ibv_cq_ex>(EOPNOTSUPP);
  // IGNORE_OVERRUN and unknown flags.
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0 && (attr->flags & ~kCqExFlags) != 0) {
    return fail_errno<ibv_cq_ex>(EOPNOTSUPP);
  }
  // IBV_CQ_INIT_ATTR_MASK_PD: a parent domain of this context (mlx5: EINVAL for anything else).
  Pd* parent = nullptr;
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) != 0) {
    if (attr->parent_domain == nullptr || attr->parent_domain->context != ibctx_ptr ||
        to_pd(attr->parent_domain)->protection == nullptr)
      return fail_errno<ibv_cq_ex>(EINVAL);
    parent = to_pd(attr->parent_domain);
  }
  if (attr->cqe > static_cast<uint32_t>(std::numeric_limits<int>::max())) return fail_errno<ibv_cq_ex>(EINVAL);
  constexpr uint64_t kTimestamps =
      uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP} | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  const bool timestamps = (attr->wc_flags & kTimestamps) != 0;
  // The wall clock at one reading of the device clock: a CQE's ticks plus the difference are its
  // wall-clock time (1 tick = 1 ns).
  int64_t wall_offset_ns = 0;
  if ((attr->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) != 0) {
    hwif::QueryClockOut clock;
    if (int err = hwif::exec_cmd(*to_ctx(ibctx_ptr)->link.cmd, hwif::QueryClockIn{}, clock); err != 0) {
      return fail_errno<ibv_cq_ex>(err);
    }
    wall_offset_ns = clock.wall_ns - static_cast<int64_t>(clock.ticks);
  }
  Cq* cq = make_cq(ibctx_ptr, static_cast<int>(attr->cqe), attr->channel, static_cast<int>(attr->comp_vector),
                   timestamps ? uint32_t{hwif::kCqTimestamps} : 0u, parent);
  if (cq == nullptr) return nullptr;
  cq->wc_flags = attr->wc_flags;
  cq->wall_offset_ns = wall_offset_ns;
  cq_ex_install_ops(cq);
  return &cq->cqx;
}

// Moderation is the device's (hwif::ModifyCqIn); the kernel refuses a mask of none or unknown
// bits with EINVAL, the device a period above its maximum (cq_count is 16 bits: always in range).
int modify_cq(ibv_cq* ibcq, const ibv_modify_cq_attr* attr) {
  if (attr->attr_mask == 0 || (attr->attr_mask & ~static_cast<uint32_t>(IBV_CQ_ATTR_MODERATE)) != 0) return EINVAL;
  Cq* cq = to_cq(ibcq);
  hwif::ModifyCqIn in;
  in.cqn = cq->cqn;
  in.cq_count = attr->moderate.cq_count;
  in.cq_period_us = attr->moderate.cq_period;
  return hwif::exec_cmd(*cq->ctx->link.cmd, in);
}

// ibv_resize_cq (mlx5_resize_cq): a ring of roundup_pow2(cqe + 1) entries. Under the CQ lock, so
// no poll, arm or clean runs meanwhile: ResizeCq switches the device to the new ring and reports
// its producer index pi at the switch; the CQEs [cons_index, pi) are still in the old ring (the
// device writes nothing there any more) and are copied, in order, to their slots in the new one
// with the owner bit of the new size. The device writes CQEs from pi on into the new ring while
// the copy runs; they are on other slots (pi - cons_index <= cqe < nent). The indices run on
// unchanged, the doorbell record and an arm request stay as they were.
int resize_cq(ibv_cq* ibcq, int cqe) {
  if (ibcq == nullptr) return EINVAL;
  Cq* cq = to_cq(ibcq);
  Context* ctx = cq->ctx;
  if (cqe <= 0 || static_cast<uint32_t>(cqe) > ctx->caps.max_cqe) return EINVAL;
  const uint32_t nent = roundup_pow2(static_cast<uint32_t>(cqe) + 1);
  const uint32_t log_nent = log2_exact(nent);
  if (log_nent > kMaxCqeLog) return EINVAL;

  // Allocated before the lock: polling threads wait only for the switch and the copy.
  HostBuffer ring;
  if (!allocate_ring(*ctx->link.kernel, nent, ring, cq->parent != nullptr ? cq->parent->buffers() : nullptr)) {
    return errno;
  }

  std::lock_guard g(cq->lock);
  // Judged by the entries asked for, not the rounded size; the device judges again at the switch
  // (CQEs may arrive meanwhile), so this is only the early answer.
  if (outstanding_cqes(*cq) > static_cast<uint32_t>(cqe)) return EINVAL;
  if (log_nent == cq->log_nent) return 0;  // the same ring size: nothing to move (as mlx5)
  hwif::ResizeCqIn in;
  in.cqn = cq->cqn;
  in.ring_addr = ring.dma_addr();
  in.log_nent = log_nent;
  in.cqe = static_cast<uint32_t>(cqe);
  hwif::ResizeCqOut out;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in, out); err != 0) return err;  // the old ring stays

  const uint32_t mask = nent - 1;
  auto* dst_ring = reinterpret_cast<hwif::Cqe64*>(ring.data());
  for (uint32_t i = cq->cons_index; i != out.pi; ++i) {
    hwif::Cqe64* dst = &dst_ring[i & mask];
    std::memcpy(dst, cqe_at(*cq, i), sizeof(*dst));
    dst->op_own = static_cast<uint8_t>((dst->op_own & ~hwif::kCqeOwnerBit) | ((i >> log_nent) & 1));
  }
  cq->ring = std::move(ring);  // the old ring goes back to the host kernel
  cq->log_nent = log_nent;
  ibcq->cqe = static_cast<int>(nent - 1);
  return 0;
}

// cq_context is set by the verbs layer (ibv_create_cq's cq_context argument) or here by the caller
// before use; this driver does not see it at creation.
int destroy_cq(ibv_cq* ibcq) {
  Cq* cq = to_cq(ibcq);
  Context* ctx = cq->ctx;
  if (cq->users.load(std::memory_order_relaxed) != 0) return EBUSY;
  hwif::DestroyCqIn in;
  in.cqn = cq->cqn;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in); err != 0) return err;  // the device refuses with EBUSY too
  {
    std::lock_guard g(ctx->table_lock);
    ctx->cqs.erase(cq->cqn);
  }
  if (cq->channel != nullptr) {
    std::lock_guard g(cq->channel->eq.lock);
    cq->channel->users.fetch_sub(1, std::memory_order_relaxed);
    cq->channel->ch.refcnt--;
  }
  if (cq->parent != nullptr) cq->parent->users.fetch_sub(1, std::memory_order_relaxed);
  // A get_async_event that found this CQ has counted its event once the lock is free.
  { std::lock_guard g(ctx->async_eq.lock); }
  // As libibverbs: wait until every event returned by get_cq_event and get_async_event was
  // acknowledged.
  pthread_mutex_lock(&ibcq->mutex);
  while (ibcq->comp_events_completed != cq->events_reported || ibcq->async_events_completed != cq->async_events_reported)
    pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
  pthread_mutex_unlock(&ibcq->mutex);
  pthread_cond_destroy(&ibcq->cond);
  pthread_mutex_destroy(&ibcq->mutex);
  delete cq;
  return 0;
}

void ack_cq_events(ibv_cq* ibcq, unsigned int nevents) {
  pthread_mutex_lock(&ibcq->mutex);
  ibcq->comp_events_completed += nevents;
  pthread_cond_signal(&ibcq->cond);
  pthread_mutex_unlock(&ibcq->mutex);
}

namespace {

// Drops the not-yet-polled CQEs for which drop(cqe) says so, compacting the later ones towards the
// producer end and keeping each slot's owner bit (the device wrote it for that slot). Under the CQ
// lock; the caller makes sure the device writes no more CQEs that drop() would take.
template <class Drop>
void drop_unpolled(Cq* cq, Drop drop) {
  std::lock_guard g(cq->lock);
  const uint32_t nent = 1u << cq->log_nent;
  uint32_t prod = cq->cons_index;
  while (prod - cq->cons_index < nent && cqe_if_valid(*cq, prod) != nullptr) ++prod;
  uint32_t nfreed = 0;
  for (uint32_t p = prod; p != cq->cons_index;) {
    --p;
    hwif::Cqe64* cqe = cqe_at(*cq, p);
    if (drop(*cqe)) {
      ++nfreed;
    } else if (nfreed != 0) {
      hwif::Cqe64* dst = cqe_at(*cq, p + nfreed);
      const uint8_t owner = dst->op_own & hwif::kCqeOwnerBit;
      std::memcpy(dst, cqe, sizeof(*dst));
      dst->op_own = static_cast<uint8_t>((dst->op_own & ~hwif::kCqeOwnerBit) | owner);
    }
  }
  if (nfreed != 0) {
    cq->cons_index += nfreed;
    store_dbrec(cq->dbrec->set_ci, cq->cons_index & 0xffffff);
  }
}

}  // namespace

// The not-yet-polled CQEs of qpn, with the SRQ WQEs of its dropped receive completions freed. Runs
// after the device stopped writing CQEs for qpn (the QP was reset or destroyed).
void cq_clean(Cq* cq, uint32_t qpn, Srq* srq) {
  drop_unpolled(cq, [&](const hwif::Cqe64& cqe) {
    if (cqe_qpn(cqe) != qpn) return false;
    if (srq != nullptr && cqe_is_responder(cqe.opcode())) {
      std::lock_guard gs(srq->lock);
      srq_free_wqe(srq, cqe.wqe_counter.get());
    }
    return true;
  });
}

// The CQEs of an XRC SRQ's receives (any TGT QP's) still in its CQ, dropped when it is destroyed:
// nothing could retire them any more.
void cq_clean_srq(Cq* cq, uint32_t srqn) {
  drop_unpolled(cq, [&](const hwif::Cqe64& cqe) { return cqe_is_responder(cqe.opcode()) && cqe_srqn(cqe) == srqn; });
}

}  // namespace softhca::driver
