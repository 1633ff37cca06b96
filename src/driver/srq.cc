// Control path of shared receive queues, mlx5 style (verbs-abi.md §6.2): a ring of WQEs, each a
// SrqNextSeg followed by data segments, linked into a free list. post_srq_recv takes WQEs at the
// list head; a completed WQE (the CQE's wqe_counter) is appended at the tail. The tail WQE is a
// sentinel that is never posted, so the device can always follow next_wqe_index from the last
// posted WQE; it starts at WQE 0 and walks the links, counting against SrqDbRec.counter.
// Who may touch what: head/tail/counter and the links under Srq::lock.
#include <cerrno>
#include <memory>
#include <mutex>
#include <new>

#include "driver/objects.h"
#include "driver/provider.h"
#include "driver/wqe_ring.h"

namespace softhca::driver {

// Appends WQE idx to the free list (caller holds srq->lock).
void srq_free_wqe(Srq* srq, uint32_t idx) {
  auto* tail = reinterpret_cast<hwif::SrqNextSeg*>(srq_wqe(*srq, srq->tail));
  tail->next_wqe_index = static_cast<uint16_t>(idx);
  srq->tail = idx;
}

ibv_srq* create_srq(ibv_pd* ibpd, ibv_srq_init_attr* attr) { return create_srq_in(ibpd, attr, nullptr, nullptr); }

ibv_srq* create_srq_in(ibv_pd* ibpd, ibv_srq_init_attr* attr, ibv_xrcd* ibxrcd, ibv_cq* ibcq) {
  Context* ctx = to_ctx(ibpd->context);
  Pd* pd = to_pd(ibpd);
  const hwif::DeviceCaps& caps = ctx->caps;
  if (attr->attr.max_wr > caps.max_srq_wr || attr->attr.max_sge > caps.max_srq_sge) return fail_errno<ibv_srq>(EINVAL);
  if (attr->attr.srq_limit > attr->attr.max_wr) return fail_errno<ibv_srq>(EINVAL);

  const uint32_t max_sge = attr->attr.max_sge == 0 ? 1 : attr->attr.max_sge;
  const uint32_t stride = roundup_pow2(static_cast<uint32_t>(sizeof(hwif::SrqNextSeg) + max_sge * sizeof(hwif::DataSeg)));
  const uint32_t wqe_cnt = roundup_pow2(attr->attr.max_wr + 1);  // + the sentinel
  if (wqe_cnt > 0x10000) return fail_errno<ibv_srq>(EINVAL);     // next_wqe_index is 16 bits

  auto* srq = new (std::nothrow) Srq{};
  if (srq == nullptr) return fail_errno<ibv_srq>(ENOMEM);
  srq->wrid.reset(new (std::nothrow) uint64_t[wqe_cnt]());
  const ExternalAllocator* ext = pd->buffers();  // a parent domain's allocator, if any
  if (srq->wrid == nullptr ||
      !srq->buf.allocate(*ctx->link.kernel, static_cast<size_t>(wqe_cnt) * stride, ext, ExternalAllocator::kSrq) ||
      !srq->dbrec_page.allocate(*ctx->link.kernel, hwif::kDbRecBytes, ext, ExternalAllocator::kDbr)) {
    const int err = errno != 0 ? errno : ENOMEM;
    delete srq;
    return fail_errno<ibv_srq>(err);
  }
  srq->ctx = ctx;
  srq->pd = pd;
  srq->wqe_cnt = wqe_cnt;
  srq->log_stride = log2_exact(stride);
  srq->max_gs = (stride - static_cast<uint32_t>(sizeof(hwif::SrqNextSeg))) / static_cast<uint32_t>(sizeof(hwif::DataSeg));
  srq->limit = attr->attr.srq_limit;
  srq->dbrec = new (srq->dbrec_page.data()) hwif::SrqDbRec{};
  for (uint32_t i = 0; i < wqe_cnt; ++i) {
    auto* next = new (srq_wqe(*srq, i)) hwif::SrqNextSeg{};
    next->next_wqe_index = static_cast<uint16_t>((i + 1) & (wqe_cnt - 1));
  }
  srq->head = 0;
  srq->tail = wqe_cnt - 1;

  hwif::CreateSrqIn in;
  in.pdn = pd->pdn;
  in.ring_addr = srq->buf.dma_addr();
  in.dbrec_addr = srq->dbrec_page.dma_addr();
  in.log_wqe_cnt = log2_exact(wqe_cnt);
  in.log_stride = srq->log_stride;
  in.limit = srq->limit;
  in.async_eqn = ctx->async_eq.eqn;
  if (ibxrcd != nullptr) {
    srq->xrcd = to_xrcd(ibxrcd);
    srq->cq = to_cq(ibcq);
    in.xrcdn = srq->xrcd->xrcdn;
    in.cqn = srq->cq->cqn;
  }
  hwif::CreateSrqOut out;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in, out); err != 0) {
    delete srq;
    return fail_errno<ibv_srq>(err);
  }
  srq->srqn = out.srqn;
  {
    std::lock_guard g(ctx->table_lock);
    if (!ctx->srqs.insert(out.srqn, srq)) {
      hwif::DestroySrqIn d;
      d.srqn = out.srqn;
      (void)hwif::exec_cmd(*ctx->link.cmd, d);
      delete srq;
      return fail_errno<ibv_srq>(ENOMEM);
    }
  }
  ibv_srq& s = srq->srq;
  s.context = ibpd->context;
  s.srq_context = attr->srq_context;
  s.pd = ibpd;
  s.handle = out.srqn;
  pthread_mutex_init(&s.mutex, nullptr);
  pthread_cond_init(&s.cond, nullptr);
  pd->users.fetch_add(1, std::memory_order_relaxed);
  if (srq->xrcd != nullptr) {
    srq->xrcd->users.fetch_add(1, std::memory_order_relaxed);
    srq->cq->users.fetch_add(1, std::memory_order_relaxed);
  }
  attr->attr.max_wr = wqe_cnt - 1;
  attr->attr.max_sge = srq->max_gs;
  return &srq->srq;
}

// Only the limit can change (no IBV_DEVICE_SRQ_RESIZE): IBV_SRQ_MAX_WR -> EINVAL.
int modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int attr_mask) {
  Srq* srq = to_srq(ibsrq);
  if (attr_mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  if (attr_mask & IBV_SRQ_MAX_WR) return EINVAL;
  if (!(attr_mask & IBV_SRQ_LIMIT)) return 0;
  if (attr->srq_limit > srq->wqe_cnt - 1) return EINVAL;
  hwif::ModifySrqIn in;
  in.srqn = srq->srqn;
  in.limit = attr->srq_limit;
  if (int err = hwif::exec_cmd(*srq->ctx->link.cmd, in); err != 0) return err;
  srq->limit = attr->srq_limit;
  return 0;
}

int get_srq_num(ibv_srq* ibsrq, uint32_t* srq_num) {
  Srq* srq = to_srq(ibsrq);
  if (srq->xrcd == nullptr) return EINVAL;  // only an XRC SRQ is named by its number (ibv_get_srq_num(3))
  *srq_num = srq->srqn;
  return 0;
}

int query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  Srq* srq = to_srq(ibsrq);
  hwif::QuerySrqIn in;
  in.srqn = srq->srqn;
  hwif::QuerySrqOut out;
  if (int err = hwif::exec_cmd(*srq->ctx->link.cmd, in, out); err != 0) return err;
  attr->max_wr = srq->wqe_cnt - 1;
  attr->max_sge = srq->max_gs;
  attr->srq_limit = out.limit;
  return 0;
}

int destroy_srq(ibv_srq* ibsrq) {
  Srq* srq = to_srq(ibsrq);
  if (srq->users.load(std::memory_order_relaxed) != 0) return EBUSY;
  hwif::DestroySrqIn in;
  in.srqn = srq->srqn;
  if (int err = hwif::exec_cmd(*srq->ctx->link.cmd, in); err != 0) return err;
  Context* ctx = srq->ctx;
  {
    std::lock_guard g(ctx->table_lock);
    ctx->srqs.erase(srq->srqn);
  }
  srq->pd->users.fetch_sub(1, std::memory_order_relaxed);
  if (srq->xrcd != nullptr) {
    // Its receives not yet polled can no longer be retired (mlx5 cleans the CQ the same way).
    cq_clean_srq(srq->cq, srq->srqn);
    srq->xrcd->users.fetch_sub(1, std::memory_order_relaxed);
    srq->cq->users.fetch_sub(1, std::memory_order_relaxed);
  }
  // As libibverbs: every event get_async_event returned for it acknowledged first (one being
  // counted has been once the async EQ's lock is free).
  { std::lock_guard g(ctx->async_eq.lock); }
  pthread_mutex_lock(&ibsrq->mutex);
  while (ibsrq->events_completed != srq->events_reported) pthread_cond_wait(&ibsrq->cond, &ibsrq->mutex);
  pthread_mutex_unlock(&ibsrq->mutex);
  pthread_cond_destroy(&ibsrq->cond);
  pthread_mutex_destroy(&ibsrq->mutex);
  delete srq;
  return 0;
}

}  // namespace softhca::driver
