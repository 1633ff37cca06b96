// Control path of queue pairs: create (ring sizing, caps reported back, CreateQp), modify
// (ibv_qp_attr + mask -> hwif::QpAttributes; the device validates transitions and masks), query,
// destroy, and qp_to_qp_ex.
// Who may touch what: creation and destruction own the whole object. modify_qp to RESET takes the
// CQ locks (cleaning) and then the SQ and RQ locks to rewind the ring indices; on every
// successful state change it stores qp->state (relaxed: the data path only uses it to refuse
// posting in RESET/INIT, and the application orders modify and post itself).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>

#include "driver/objects.h"
#include "driver/provider.h"
#include "driver/qp_caps.h"
#include "driver/wqe_ring.h"

namespace softhca::driver {
namespace {

constexpr uint32_t kMaxRecvWqes = 1u << 16;  // the RQ doorbell record counter is 16 bits

bool to_hw_type(ibv_qp_type t, hwif::QpType& out) {
  switch (t) {
    case IBV_QPT_RC: out = hwif::QpType::kRc; return true;
    case IBV_QPT_UC: out = hwif::QpType::kUc; return true;
    case IBV_QPT_UD: out = hwif::QpType::kUd; return true;
    case IBV_QPT_XRC_SEND: out = hwif::QpType::kXrcIni; return true;
    default: return false;
  }
}

hwif::AddressVector to_hw_av(const ibv_ah_attr& ah) {
  hwif::AddressVector av;
  av.dlid = ah.dlid;
  av.sl = ah.sl;
  av.src_path_bits = ah.src_path_bits;
  av.static_rate = ah.static_rate;
  av.is_global = ah.is_global != 0;
  std::memcpy(av.dgid.raw.data(), ah.grh.dgid.raw, av.dgid.raw.size());
  av.flow_label = ah.grh.flow_label;
  av.sgid_index = ah.grh.sgid_index;
  av.hop_limit = ah.grh.hop_limit;
  av.traffic_class = ah.grh.traffic_class;
  av.port_num = ah.port_num;
  return av;
}

ibv_ah_attr to_ibv_ah(const hwif::AddressVector& av) {
  ibv_ah_attr ah{};
  ah.dlid = av.dlid;
  ah.sl = av.sl;
  ah.src_path_bits = av.src_path_bits;
  ah.static_rate = av.static_rate;
  ah.is_global = av.is_global ? 1 : 0;
  std::memcpy(ah.grh.dgid.raw, av.dgid.raw.data(), sizeof(ah.grh.dgid.raw));
  ah.grh.flow_label = av.flow_label;
  ah.grh.sgid_index = av.sgid_index;
  ah.grh.hop_limit = av.hop_limit;
  ah.grh.traffic_class = av.traffic_class;
  ah.port_num = av.port_num;
  return ah;
}

// Only the attributes named in the mask are meaningful; the others keep their defaults.
hwif::QpAttributes to_hw_attr(const ibv_qp_attr& a, int mask) {
  hwif::QpAttributes h;
  if (mask & IBV_QP_STATE) h.state = static_cast<hwif::QpState>(a.qp_state);
  if (mask & IBV_QP_CUR_STATE) h.cur_state = static_cast<hwif::QpState>(a.cur_qp_state);
  if (mask & IBV_QP_QKEY) h.qkey = a.qkey;
  if (mask & IBV_QP_RQ_PSN) h.rq_psn = a.rq_psn & 0xffffff;
  if (mask & IBV_QP_SQ_PSN) h.sq_psn = a.sq_psn & 0xffffff;
  if (mask & IBV_QP_DEST_QPN) h.dest_qpn = a.dest_qp_num & 0xffffff;
  if (mask & IBV_QP_ACCESS_FLAGS)
    h.access_flags = a.qp_access_flags & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                          IBV_ACCESS_REMOTE_ATOMIC);
  if (mask & IBV_QP_AV) h.av = to_hw_av(a.ah_attr);
  if (mask & IBV_QP_PATH_MTU) h.path_mtu = static_cast<hwif::Mtu>(a.path_mtu);
  if (mask & IBV_QP_PKEY_INDEX) h.pkey_index = a.pkey_index;
  if (mask & IBV_QP_PORT) h.port_num = a.port_num;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) h.max_rd_atomic = a.max_rd_atomic;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) h.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) h.min_rnr_timer = a.min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) h.timeout = a.timeout;
  if (mask & IBV_QP_RETRY_CNT) h.retry_cnt = a.retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) h.rnr_retry = a.rnr_retry;
  if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) h.en_sqd_async_notify = a.en_sqd_async_notify != 0;
  return h;
}

void set_state(Qp& qp, ibv_qp_state s) {
  qp.qpx.qp_base.state = s;
  qp.state.store(static_cast<uint8_t>(s), std::memory_order_relaxed);
}

// Locks the CQs a QP uses (one or two), and cleans them of the QP's CQEs.
// (An XRC INI QP has a send CQ only, a TGT QP none: its receives complete in its SRQs' CQs.)
void clean_cqs(Qp& qp) {
  if (qp.recv_cq != nullptr) cq_clean(qp.recv_cq, qp.qpn, qp.srq);
  if (qp.send_cq != nullptr && qp.send_cq != qp.recv_cq) cq_clean(qp.send_cq, qp.qpn, nullptr);
}

// After ->RESET: the device forgot the rings, so the driver starts again at index 0.
void reset_rings(Qp& qp) {
  clean_cqs(qp);
  if (qp.dbrec == nullptr) return;  // a TGT QP has no rings
  {
    std::lock_guard g(qp.sq.lock);
    qp.sq.head = 0;
    qp.sq.cur_post = 0;
    qp.sq.tail.store(0, std::memory_order_release);
    qp.wr = WrBuilder{};
    store_dbrec(qp.dbrec->sq_counter, 0);
  }
  std::lock_guard g(qp.rq.lock);
  qp.rq.head = 0;
  qp.rq.tail.store(0, std::memory_order_release);
  store_dbrec(qp.dbrec->rq_counter, 0);
}

void release_users(Qp& qp) {
  if (qp.pd != nullptr) qp.pd->users.fetch_sub(1, std::memory_order_relaxed);
  if (qp.send_cq != nullptr) qp.send_cq->users.fetch_sub(1, std::memory_order_relaxed);
  if (qp.recv_cq != nullptr) qp.recv_cq->users.fetch_sub(1, std::memory_order_relaxed);
  if (qp.srq != nullptr) qp.srq->users.fetch_sub(1, std::memory_order_relaxed);
  if (qp.xrcd != nullptr) qp.xrcd->users.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace

ibv_qp* create_qp(ibv_pd* ibpd, ibv_qp_init_attr* attr, uint64_t send_ops_flags) {
  Context* ctx = to_ctx(ibpd->context);
  const hwif::DeviceCaps& caps = ctx->caps;
  hwif::QpType type;
  if (!to_hw_type(attr->qp_type, type)) return fail_errno<ibv_qp>(EOPNOTSUPP);
  if (send_ops_flags & ~(kSupportedSendOps & send_ops_of_type(type))) return fail_errno<ibv_qp>(EOPNOTSUPP);
  // An XRC INI QP sends only: no receive CQ, receive queue or SRQ (ibv_create_qp_ex(3)).
  const bool ini = type == hwif::QpType::kXrcIni;
  if (attr->send_cq == nullptr || (attr->recv_cq == nullptr && !ini)) return fail_errno<ibv_qp>(EINVAL);
  if (ini) attr->cap.max_recv_wr = attr->cap.max_recv_sge = 0;
  ibv_qp_cap& req = attr->cap;
  if (req.max_send_wr > caps.max_qp_wr || req.max_recv_wr > caps.max_qp_wr || req.max_send_sge > caps.max_sge ||
      req.max_recv_sge > caps.max_sge || req.max_inline_data > caps.max_inline_data)
    return fail_errno<ibv_qp>(EINVAL);

  SendLayout sl;
  if (int err = compute_send_layout(type, send_ops_flags, req.max_send_wr, req.max_send_sge, req.max_inline_data, sl);
      err != 0)
    return fail_errno<ibv_qp>(err);

  const bool has_srq = attr->srq != nullptr || ini;  // (INI: no receive queue, as with an SRQ)
  const uint32_t rq_cnt = has_srq ? 0 : roundup_pow2(std::max<uint32_t>(req.max_recv_wr, 1));
  const uint32_t rq_stride = roundup_pow2(static_cast<uint32_t>(sizeof(hwif::DataSeg)) * std::max<uint32_t>(req.max_recv_sge, 1));
  if (rq_cnt > kMaxRecvWqes) return fail_errno<ibv_qp>(EINVAL);

  auto* qp = new (std::nothrow) Qp{};
  if (qp == nullptr) return fail_errno<ibv_qp>(ENOMEM);
  SendQueue& sq = qp->sq;
  RecvQueue& rq = qp->rq;
  sq.wqe_cnt = sl.wqe_cnt;
  sq.max_post = sl.max_post;
  sq.wqe_size = sl.wqe_size;
  sq.max_gs = req.max_send_sge;
  sq.max_inline = std::min(sl.max_inline, caps.max_inline_data);
  sq.wrid.reset(new (std::nothrow) uint64_t[sq.wqe_cnt]());
  sq.wqe_head.reset(new (std::nothrow) uint32_t[sq.wqe_cnt]());
  // A parent domain's allocator, when it has one, gives the rings and the doorbell record.
  const ExternalAllocator* ext = to_pd(ibpd)->buffers();
  bool ok = sq.wrid != nullptr && sq.wqe_head != nullptr &&
            sq.buf.allocate(*ctx->link.kernel, static_cast<size_t>(sq.wqe_cnt) * hwif::kSendWqeBbBytes, ext,
                            ExternalAllocator::kQp) &&
            qp->dbrec_page.allocate(*ctx->link.kernel, hwif::kDbRecBytes, ext, ExternalAllocator::kDbr);
  if (ok && !has_srq) {
    rq.wqe_cnt = rq_cnt;
    rq.log_stride = log2_exact(rq_stride);
    rq.max_gs = rq_stride / static_cast<uint32_t>(sizeof(hwif::DataSeg));
    rq.wrid.reset(new (std::nothrow) uint64_t[rq_cnt]());
    ok = rq.wrid != nullptr &&
         rq.buf.allocate(*ctx->link.kernel, static_cast<size_t>(rq_cnt) * rq_stride, ext, ExternalAllocator::kQp);
  }
  if (!ok) {
    const int err = errno != 0 ? errno : ENOMEM;
    delete qp;
    return fail_errno<ibv_qp>(err);
  }
  qp->dbrec = new (qp->dbrec_page.data()) hwif::QpDbRec{};
  qp->ctx = ctx;
  qp->pd = to_pd(ibpd);
  qp->send_cq = to_cq(attr->send_cq);
  qp->recv_cq = attr->recv_cq != nullptr && !ini ? to_cq(attr->recv_cq) : nullptr;
  qp->srq = attr->srq != nullptr && !ini ? to_srq(attr->srq) : nullptr;
  qp->type = type;
  qp->sq_sig_all = attr->sq_sig_all != 0;
  qp->send_ops_flags = send_ops_flags;

  hwif::CreateQpIn in;
  in.type = type;
  in.pdn = qp->pd->pdn;
  in.send_cqn = qp->send_cq->cqn;
  in.recv_cqn = qp->recv_cq != nullptr ? qp->recv_cq->cqn : 0;
  in.srqn = qp->srq != nullptr ? qp->srq->srqn : hwif::kNoSrq;
  in.sq_addr = sq.buf.dma_addr();
  in.log_sq_bbs = log2_exact(sq.wqe_cnt);
  in.rq_addr = has_srq ? 0 : rq.buf.dma_addr();
  in.log_rq_cnt = has_srq ? 0 : log2_exact(rq.wqe_cnt);
  in.log_rq_stride = has_srq ? 0 : rq.log_stride;
  in.dbrec_addr = qp->dbrec_page.dma_addr();
  in.uar_index = ctx->link.uar_index;
  in.sq_sig_all = qp->sq_sig_all;
  in.async_eqn = ctx->async_eq.eqn;
  hwif::CreateQpOut out;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in, out); err != 0) {
    delete qp;
    return fail_errno<ibv_qp>(err);
  }
  qp->qpn = out.qpn;
  {
    std::lock_guard g(ctx->table_lock);
    if (!ctx->qps.insert(out.qpn, qp)) {
      hwif::DestroyQpIn d;
      d.qpn = out.qpn;
      (void)hwif::exec_cmd(*ctx->link.cmd, d);
      delete qp;
      return fail_errno<ibv_qp>(ENOMEM);
    }
  }
  qp->pd->users.fetch_add(1, std::memory_order_relaxed);
  qp->send_cq->users.fetch_add(1, std::memory_order_relaxed);
  if (qp->recv_cq != nullptr) qp->recv_cq->users.fetch_add(1, std::memory_order_relaxed);
  if (qp->srq != nullptr) qp->srq->users.fetch_add(1, std::memory_order_relaxed);

  ibv_qp_cap& cap = qp->cap;
  cap.max_send_wr = sq.max_post;
  cap.max_send_sge = sq.max_gs;
  cap.max_inline_data = sq.max_inline;
  cap.max_recv_wr = has_srq ? 0 : rq.wqe_cnt;
  cap.max_recv_sge = has_srq ? 0 : rq.max_gs;
  req = cap;

  ibv_qp& b = qp->qpx.qp_base;
  b.context = ibpd->context;
  b.qp_context = attr->qp_context;
  b.pd = ibpd;
  b.send_cq = attr->send_cq;
  b.recv_cq = ini ? nullptr : attr->recv_cq;
  b.srq = ini ? nullptr : attr->srq;
  b.handle = out.qpn;
  b.qp_num = out.qpn;
  b.qp_type = attr->qp_type;
  pthread_mutex_init(&b.mutex, nullptr);
  pthread_cond_init(&b.cond, nullptr);
  set_state(*qp, IBV_QPS_RESET);
  if (send_ops_flags != 0) qp_ex_install_ops(qp);
  return &b;
}

int modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int attr_mask) {
  Qp* qp = to_qp(ibqp);
  hwif::ModifyQpIn in;
  in.qpn = qp->qpn;
  in.attr_mask = static_cast<uint32_t>(attr_mask);
  in.attr = to_hw_attr(*attr, attr_mask);
  if (int err = hwif::exec_cmd(*qp->ctx->link.cmd, in); err != 0) return err;
  if (attr_mask & IBV_QP_STATE) {
    if (attr->qp_state == IBV_QPS_RESET) reset_rings(*qp);
    set_state(*qp, attr->qp_state);
  }
  return 0;
}

// The device answers every attribute; attr_mask only says what the caller cares about.
int query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int /*attr_mask*/, ibv_qp_init_attr* init_attr) {
  Qp* qp = to_qp(ibqp);
  hwif::QueryQpIn in;
  in.qpn = qp->qpn;
  hwif::QueryQpOut out;
  if (int err = hwif::exec_cmd(*qp->ctx->link.cmd, in, out); err != 0) return err;
  const hwif::QpAttributes& h = out.attr;
  std::memset(attr, 0, sizeof(*attr));
  attr->qp_state = static_cast<ibv_qp_state>(h.state);
  attr->cur_qp_state = static_cast<ibv_qp_state>(h.state);
  attr->path_mtu = static_cast<ibv_mtu>(h.path_mtu);
  attr->path_mig_state = IBV_MIG_MIGRATED;
  attr->qkey = h.qkey;
  attr->rq_psn = h.rq_psn;
  attr->sq_psn = h.sq_psn;
  attr->dest_qp_num = h.dest_qpn;
  attr->qp_access_flags = static_cast<unsigned int>(h.access_flags);
  attr->cap = qp->cap;
  attr->ah_attr = to_ibv_ah(h.av);
  attr->pkey_index = h.pkey_index;
  attr->sq_draining = h.sq_draining ? 1 : 0;
  attr->max_rd_atomic = h.max_rd_atomic;
  attr->max_dest_rd_atomic = h.max_dest_rd_atomic;
  attr->min_rnr_timer = h.min_rnr_timer;
  attr->port_num = h.port_num;
  attr->timeout = h.timeout;
  attr->retry_cnt = h.retry_cnt;
  attr->rnr_retry = h.rnr_retry;
  if (init_attr != nullptr) {
    std::memset(init_attr, 0, sizeof(*init_attr));
    const ibv_qp& b = qp->qpx.qp_base;
    init_attr->qp_context = b.qp_context;
    init_attr->send_cq = b.send_cq;
    init_attr->recv_cq = b.recv_cq;
    init_attr->srq = b.srq;
    init_attr->cap = qp->cap;
    init_attr->qp_type = b.qp_type;
    init_attr->sq_sig_all = qp->sq_sig_all ? 1 : 0;
  }
  return 0;
}

int destroy_qp(ibv_qp* ibqp) {
  Qp* qp = to_qp(ibqp);
  Context* ctx = qp->ctx;
  hwif::DestroyQpIn in;
  in.qpn = qp->qpn;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in); err != 0) return err;
  // The device writes no more CQEs for this QP: drop the ones not polled yet, then unregister.
  // A poll_cq that found this QP holds the CQ lock, which cq_clean waits for.
  clean_cqs(*qp);
  if (!qp->opened) {
    std::lock_guard g(ctx->table_lock);
    ctx->qps.erase(qp->qpn);
  }
  release_users(*qp);
  // As libibverbs: every event get_async_event returned for it acknowledged first (one being
  // counted has been once the async EQ's lock is free).
  { std::lock_guard g(ctx->async_eq.lock); }
  pthread_mutex_lock(&ibqp->mutex);
  while (ibqp->events_completed != qp->events_reported) pthread_cond_wait(&ibqp->cond, &ibqp->mutex);
  pthread_mutex_unlock(&ibqp->mutex);
  pthread_cond_destroy(&ibqp->cond);
  pthread_mutex_destroy(&ibqp->mutex);
  delete qp;
  return 0;
}

ibv_qp_ex* qp_to_qp_ex(ibv_qp* ibqp) {
  Qp* qp = to_qp(ibqp);
  return qp->send_ops_flags != 0 ? &qp->qpx : nullptr;
}

}  // namespace softhca::driver
