// The op table of every context: the verbs_context members the inline wrappers of verbs.h reach
// through verbs_get_ctx_op (verbs-abi.md §2.1-2.3). softhca provides query_port,
// query_device_ex, create_qp_ex, create_srq_ex, create_cq_ex, modify_cq, query_rt_values,
// alloc_td, dealloc_td, alloc_parent_domain, XRC's open_xrcd, close_xrcd, open_qp and
// get_srq_num, and device memory's alloc_dm, free_dm and reg_dm_mr; every other op is NULL, which the inline wrappers answer with EOPNOTSUPP (errno for
// object-returning verbs, the return value for int verbs). The data-path ops of ibv_context_ops (poll_cq, req_notify_cq, post_send, post_recv,
// post_srq_recv) are the driver's; of the rest, the two that inline code calls without a NULL
// check (bind_mw, dealloc_mw) get an EOPNOTSUPP default when the driver leaves them empty.
#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "driver/provider.h"
#include "runtime/trace_recorder.h"
#include "verbs/glue.h"
#include "verbs/unsupported.h"

namespace softhca::verbs {
namespace {

// port_attr_len is the caller's sizeof(struct ibv_port_attr): 52 from today's verbs.h.
int query_port_op(ibv_context* ctx, uint8_t port_num, ibv_port_attr* port_attr,
                  size_t port_attr_len) {
  if (ctx == nullptr || port_attr == nullptr) return EINVAL;
  return driver::query_port(ctx, port_num, port_attr, port_attr_len);
}

int query_device_ex_op(ibv_context* ctx, const ibv_query_device_ex_input* input,
                       ibv_device_attr_ex* attr, size_t attr_size) {
  if (ctx == nullptr || attr == nullptr) return EINVAL;
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  // The caller's struct must at least reach comp_mask, the first member after orig_attr.
  if (attr_size < offsetof(ibv_device_attr_ex, comp_mask) + sizeof(attr->comp_mask)) return EINVAL;
  return driver::query_device_ex(ctx, input, attr, attr_size);
}

// The comp_mask bits of ibv_qp_init_attr_ex that rdma-core 44 defines (its RESERVED bit is not in
// the installed header): unknown bits are an error, known but unsupported ones "not supported".
constexpr uint32_t kQpInitAttrKnown = (IBV_QP_INIT_ATTR_SEND_OPS_FLAGS << 1) - 1;
constexpr uint32_t kQpInitAttrSupported = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
                                          IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;

// An XRC TGT QP (ibv_create_qp_ex(3): IBV_QPT_XRC_RECV needs IBV_QP_INIT_ATTR_XRCD, and nothing
// of a send or receive queue applies to it).
ibv_qp* create_xrc_recv_qp(ibv_context* ctx, ibv_qp_init_attr_ex* attr_ex) {
  const uint32_t mask = attr_ex->comp_mask;
  ibv_xrcd* xrcd = (mask & IBV_QP_INIT_ATTR_XRCD) != 0 ? attr_ex->xrcd : nullptr;
  if (xrcd == nullptr || xrcd->context != ctx || (mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_qp* qp = driver::create_xrc_tgt_qp(xrcd, attr_ex->qp_context);
  if (qp == nullptr) return nullptr;
  attr_ex->cap = ibv_qp_cap{};
  return qp;
}

// Reached for every comp_mask except exactly PD (which the inline wrapper sends to ibv_create_qp).
// perftest's new post-send path asks for PD | SEND_OPS_FLAGS (verbs-abi.md §2.4).
ibv_qp* create_qp_ex_op(ibv_context* ctx, ibv_qp_init_attr_ex* attr_ex) {
  if (ctx == nullptr || attr_ex == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  const uint32_t mask = attr_ex->comp_mask;
  if ((mask & ~kQpInitAttrKnown) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  const bool has_create_flags =
      (mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 && attr_ex->create_flags != 0;
  if ((mask & ~kQpInitAttrSupported) != 0 || has_create_flags) {
    return unsupported<ibv_qp*>();  // TSO, RSS, creation flags
  }
  if (attr_ex->qp_type == IBV_QPT_XRC_RECV) return create_xrc_recv_qp(ctx, attr_ex);
  ibv_pd* pd = (mask & IBV_QP_INIT_ATTR_PD) != 0 ? attr_ex->pd : nullptr;
  if (pd == nullptr || pd->context != ctx) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_qp_init_attr attr{};
  attr.qp_context = attr_ex->qp_context;
  attr.send_cq = attr_ex->send_cq;
  attr.recv_cq = attr_ex->recv_cq;
  attr.srq = attr_ex->srq;
  attr.cap = attr_ex->cap;
  attr.qp_type = attr_ex->qp_type;
  attr.sq_sig_all = attr_ex->sq_sig_all;
  const uint64_t send_ops_flags =
      (mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0 ? attr_ex->send_ops_flags : 0;
  ibv_qp* qp = driver::create_qp(pd, &attr, send_ops_flags);
  if (qp == nullptr) return nullptr;
  attr_ex->cap = attr.cap;  // the capabilities the QP actually has
  init_qp_fields(qp, pd, attr);
  return qp;
}

// Reached for everything but a basic SRQ on a PD (which the inline wrapper sends to
// ibv_create_srq): a basic SRQ, or an XRC SRQ (IBV_SRQT_XRC with its XRCD, CQ and PD, as
// ibv_create_srq_ex(3) requires). Tag-matching SRQs are not supported.
ibv_srq* create_srq_ex_op(ibv_context* ctx, ibv_srq_init_attr_ex* attr_ex) {
  if (ctx == nullptr || attr_ex == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  const uint32_t mask = attr_ex->comp_mask;
  if ((mask & ~static_cast<uint32_t>(IBV_SRQ_INIT_ATTR_RESERVED - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  const ibv_srq_type type = (mask & IBV_SRQ_INIT_ATTR_TYPE) != 0 ? attr_ex->srq_type : IBV_SRQT_BASIC;
  if (type == IBV_SRQT_TM || (mask & IBV_SRQ_INIT_ATTR_TM) != 0) return unsupported<ibv_srq*>();
  const bool xrc = type == IBV_SRQT_XRC;
  if (type != IBV_SRQT_BASIC && !xrc) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_pd* pd = (mask & IBV_SRQ_INIT_ATTR_PD) != 0 ? attr_ex->pd : nullptr;
  ibv_xrcd* xrcd = (mask & IBV_SRQ_INIT_ATTR_XRCD) != 0 ? attr_ex->xrcd : nullptr;
  ibv_cq* cq = (mask & IBV_SRQ_INIT_ATTR_CQ) != 0 ? attr_ex->cq : nullptr;
  if (pd == nullptr || pd->context != ctx ||
      (xrc && (xrcd == nullptr || xrcd->context != ctx || cq == nullptr || cq->context != ctx))) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_srq_init_attr attr{};
  attr.srq_context = attr_ex->srq_context;
  attr.attr = attr_ex->attr;
  ibv_srq* srq = driver::create_srq_in(pd, &attr, xrc ? xrcd : nullptr, xrc ? cq : nullptr);
  if (srq == nullptr) return nullptr;
  attr_ex->attr = attr.attr;
  srq->context = ctx;
  srq->srq_context = attr.srq_context;
  srq->pd = pd;
  return srq;
}

// Reached from the inline ibv_create_cq_ex after its comp_mask check. As libibverbs' command
// helper, the consumer's cq_context and channel go into the new CQ.
ibv_cq_ex* create_cq_ex_op(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  if (ctx == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_cq_ex* cq = driver::create_cq_ex(ctx, attr);
  if (cq == nullptr) return nullptr;
  cq->context = ctx;
  cq->channel = attr->channel;
  cq->cq_context = attr->cq_context;
  return cq;
}

int modify_cq_op(ibv_cq* cq, ibv_modify_cq_attr* attr) {
  if (cq == nullptr || attr == nullptr) return EINVAL;
  return driver::modify_cq(cq, attr);
}

int query_rt_values_op(ibv_context* ctx, ibv_values_ex* values) {
  if (ctx == nullptr || values == nullptr) return EINVAL;
  return driver::query_rt_values(ctx, values);
}

ibv_td* alloc_td_op(ibv_context* ctx, ibv_td_init_attr* attr) {
  if (ctx == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return driver::alloc_td(ctx, attr);
}

int dealloc_td_op(ibv_td* td) {
  if (td == nullptr) return EINVAL;
  return driver::dealloc_td(td);
}

ibv_pd* alloc_parent_domain_op(ibv_context* ctx, ibv_parent_domain_init_attr* attr) {
  if (ctx == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return driver::alloc_parent_domain(ctx, attr);
}

// Device memory (ibv_alloc_dm(3)): libibverbs' inline wrappers call these unchecked.
ibv_dm* alloc_dm_op(ibv_context* ctx, ibv_alloc_dm_attr* attr) {
  if (ctx == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return driver::alloc_dm(ctx, attr);
}

int free_dm_op(ibv_dm* dm) { return dm == nullptr ? EINVAL : driver::free_dm(dm); }

ibv_mr* reg_dm_mr_op(ibv_pd* pd, ibv_dm* dm, uint64_t dm_offset, size_t length, unsigned int access) {
  if (pd == nullptr || dm == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return driver::reg_dm_mr(pd, dm, dm_offset, length, access);
}

// As libibverbs' ibv_cmd_open_xrcd: both FD and OFLAGS are required, unknown bits unsupported.
ibv_xrcd* open_xrcd_op(ibv_context* ctx, ibv_xrcd_init_attr* attr) {
  if (ctx == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) return unsupported<ibv_xrcd*>();
  if ((attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) == 0 || (attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) == 0) {
    errno = EINVAL;
    return nullptr;
  }
  return driver::open_xrcd(ctx, attr->fd, attr->oflags);
}

int close_xrcd_op(ibv_xrcd* xrcd) {
  if (xrcd == nullptr) return EINVAL;
  return driver::close_xrcd(xrcd);
}

// As libibverbs' ibv_cmd_open_qp: the QPN, the XRCD and the type are required; only a TGT QP
// (IBV_QPT_XRC_RECV) can be opened.
ibv_qp* open_qp_op(ibv_context* ctx, ibv_qp_open_attr* attr) {
  if (ctx == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED) return unsupported<ibv_qp*>();
  constexpr uint32_t kNeeded = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if ((attr->comp_mask & kNeeded) != kNeeded || attr->xrcd == nullptr || attr->xrcd->context != ctx ||
      attr->qp_type != IBV_QPT_XRC_RECV) {
    errno = EINVAL;
    return nullptr;
  }
  void* qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) != 0 ? attr->qp_context : nullptr;
  return driver::open_qp(attr->xrcd, attr->qp_num, qp_context);
}

int get_srq_num_op(ibv_srq* srq, uint32_t* srq_num) {
  if (srq == nullptr || srq_num == nullptr) return EINVAL;
  return driver::get_srq_num(srq, srq_num);
}

int bind_mw_unsupported(ibv_qp* /*qp*/, ibv_mw* /*mw*/, ibv_mw_bind* /*mw_bind*/) {
  return unsupported<int>();
}

int dealloc_mw_unsupported(ibv_mw* /*mw*/) { return unsupported<int>(); }

// SOFTHCA_TRACE's per-thread tracks (docs/observability.md): post_send is reported before the
// driver rings anything, a poll only when it found completions.
int traced_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  uint32_t n = 0;
  for (const ibv_send_wr* w = wr; w != nullptr; w = w->next) ++n;
  if (runtime::CpuTap* tap = runtime::process_cpu_tap()) tap->on_cpu(runtime::CpuEventKind::kPostSend, qp->qp_num, n);
  return driver::post_send(qp, wr, bad_wr);
}

int traced_poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  const int n = driver::poll_cq(cq, num_entries, wc);
  if (n > 0) {
    if (runtime::CpuTap* tap = runtime::process_cpu_tap()) {
      tap->on_cpu(runtime::CpuEventKind::kPollHit, cq->handle, static_cast<uint32_t>(n));  // handle = CQN
    }
  }
  return n;
}

}  // namespace

void install_context_ops(verbs_context* vctx) {
  // Supported extended verbs.
  vctx->query_port = query_port_op;
  vctx->query_device_ex = query_device_ex_op;
  vctx->create_qp_ex = create_qp_ex_op;
  vctx->create_srq_ex = create_srq_ex_op;
  vctx->create_cq_ex = create_cq_ex_op;
  vctx->modify_cq = modify_cq_op;
  vctx->query_rt_values = query_rt_values_op;
  vctx->alloc_td = alloc_td_op;
  vctx->dealloc_td = dealloc_td_op;
  vctx->alloc_parent_domain = alloc_parent_domain_op;
  vctx->open_qp = open_qp_op;
  vctx->get_srq_num = get_srq_num_op;
  vctx->open_xrcd = open_xrcd_op;
  vctx->close_xrcd = close_xrcd_op;
  vctx->alloc_dm = alloc_dm_op;
  vctx->free_dm = free_dm_op;
  vctx->reg_dm_mr = reg_dm_mr_op;
  // Not supported: NULL makes the inline wrapper answer EOPNOTSUPP.
  vctx->advise_mr = nullptr;
  vctx->alloc_null_mr = nullptr;
  vctx->read_counters = nullptr;
  vctx->attach_counters_point_flow = nullptr;
  vctx->create_counters = nullptr;
  vctx->destroy_counters = nullptr;
  vctx->modify_flow_action_esp = nullptr;
  vctx->destroy_flow_action = nullptr;
  vctx->create_flow_action_esp = nullptr;
  vctx->modify_qp_rate_limit = nullptr;
  vctx->post_srq_ops = nullptr;
  vctx->destroy_rwq_ind_table = nullptr;
  vctx->create_rwq_ind_table = nullptr;
  vctx->destroy_wq = nullptr;
  vctx->modify_wq = nullptr;
  vctx->create_wq = nullptr;
  vctx->ibv_destroy_flow = nullptr;
  vctx->ABI_placeholder2 = nullptr;
  vctx->ibv_create_flow = nullptr;
  vctx->ABI_placeholder1 = nullptr;
  vctx->_ABI_placeholder3 = 0;

  // Memory windows: alloc_mw is NULL-checked by ibv_alloc_mw; the other two are called unchecked.
  ibv_context_ops& ops = vctx->context.ops;
  if (runtime::process_cpu_tap() != nullptr && ops.post_send == driver::post_send) {
    ops.post_send = traced_post_send;
    if (ops.poll_cq == driver::poll_cq) ops.poll_cq = traced_poll_cq;
  }
  if (ops.alloc_mw == nullptr) {
    if (ops.bind_mw == nullptr) ops.bind_mw = bind_mw_unsupported;
    if (ops.dealloc_mw == nullptr) ops.dealloc_mw = dealloc_mw_unsupported;
  }
}

}  // namespace softhca::verbs
