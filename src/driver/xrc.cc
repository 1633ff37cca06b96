// Control path of XRC (IBA 11.2.4; ibv_open_xrcd(3), ibv_open_qp(3)): domains opened by file,
// TGT QPs (created or opened) and what each holds. A TGT QP has no rings, PD or CQs: its
// receives complete in the CQ of the XRC SRQ each message names, found by the SRQ number the CQE
// carries (cq_poll.cc).
// Who may touch what: as every control-path object, the caller owns it during create/destroy;
// `users` counters are atomics so that close_xrcd's check never races a create.
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <mutex>
#include <new>

#include "driver/objects.h"
#include "driver/provider.h"

namespace softhca::driver {
namespace {

// The parts of a Qp every TGT handle has, created or opened.
Qp* new_tgt_qp(Xrcd* xrcd, uint32_t qpn, void* qp_context, bool opened) {
  auto* qp = new (std::nothrow) Qp{};
  if (qp == nullptr) return nullptr;
  qp->ctx = xrcd->ctx;
  qp->xrcd = xrcd;
  qp->opened = opened;
  qp->qpn = qpn;
  qp->type = hwif::QpType::kXrcTgt;
  ibv_qp& b = qp->qpx.qp_base;
  b.context = xrcd->xrcd.context;
  b.qp_context = qp_context;
  b.handle = qpn;
  b.qp_num = qpn;
  b.qp_type = IBV_QPT_XRC_RECV;
  b.state = IBV_QPS_RESET;
  pthread_mutex_init(&b.mutex, nullptr);
  pthread_cond_init(&b.cond, nullptr);
  return qp;
}

}  // namespace

ibv_xrcd* open_xrcd(ibv_context* ibctx, int fd, int oflags) {
  Context* ctx = to_ctx(ibctx);
  hwif::OpenXrcdIn in;
  if (fd == -1) {
    in.anonymous = true;
  } else {
    struct stat st {};
    if (fstat(fd, &st) != 0) return fail_errno<ibv_xrcd>(EBADF);
    in.file_dev = st.st_dev;
    in.file_ino = st.st_ino;
    in.create = (oflags & O_CREAT) != 0;
    in.exclusive = (oflags & O_EXCL) != 0;
  }
  auto* x = new (std::nothrow) Xrcd{};
  if (x == nullptr) return fail_errno<ibv_xrcd>(ENOMEM);
  hwif::OpenXrcdOut out;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in, out); err != 0) {
    delete x;
    return fail_errno<ibv_xrcd>(err);
  }
  x->ctx = ctx;
  x->xrcdn = out.xrcdn;
  x->xrcd.context = ibctx;
  return &x->xrcd;
}

int close_xrcd(ibv_xrcd* ibxrcd) {
  Xrcd* x = to_xrcd(ibxrcd);
  if (x->users.load(std::memory_order_relaxed) != 0) return EBUSY;
  hwif::CloseXrcdIn in;
  in.xrcdn = x->xrcdn;
  if (int err = hwif::exec_cmd(*x->ctx->link.cmd, in); err != 0) return err;
  delete x;
  return 0;
}

ibv_qp* create_xrc_tgt_qp(ibv_xrcd* ibxrcd, void* qp_context) {
  Xrcd* x = to_xrcd(ibxrcd);
  Context* ctx = x->ctx;
  hwif::CreateQpIn in;
  in.type = hwif::QpType::kXrcTgt;
  in.xrcdn = x->xrcdn;
  in.uar_index = ctx->link.uar_index;
  in.async_eqn = ctx->async_eq.eqn;
  hwif::CreateQpOut out;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in, out); err != 0) return fail_errno<ibv_qp>(err);
  Qp* qp = new_tgt_qp(x, out.qpn, qp_context, false);
  bool ok = qp != nullptr;
  if (ok) {
    std::lock_guard g(ctx->table_lock);
    ok = ctx->qps.insert(out.qpn, qp);  // for its affiliated events
  }
  if (!ok) {
    hwif::DestroyQpIn d;
    d.qpn = out.qpn;
    (void)hwif::exec_cmd(*ctx->link.cmd, d);
    delete qp;
    return fail_errno<ibv_qp>(ENOMEM);
  }
  x->users.fetch_add(1, std::memory_order_relaxed);
  return &qp->qpx.qp_base;
}

ibv_qp* open_qp(ibv_xrcd* ibxrcd, uint32_t qpn, void* qp_context) {
  Xrcd* x = to_xrcd(ibxrcd);
  hwif::OpenQpIn in;
  in.xrcdn = x->xrcdn;
  in.qpn = qpn;
  if (int err = hwif::exec_cmd(*x->ctx->link.cmd, in); err != 0) return fail_errno<ibv_qp>(err);
  Qp* qp = new_tgt_qp(x, qpn, qp_context, true);
  if (qp == nullptr) {
    hwif::DestroyQpIn d;
    d.qpn = qpn;
    (void)hwif::exec_cmd(*x->ctx->link.cmd, d);  // the handle just taken
    return fail_errno<ibv_qp>(ENOMEM);
  }
  // Its state is the device's (another process may have moved it already).
  hwif::QueryQpIn q;
  q.qpn = qpn;
  hwif::QueryQpOut st;
  if (hwif::exec_cmd(*x->ctx->link.cmd, q, st) == 0) {
    qp->qpx.qp_base.state = static_cast<ibv_qp_state>(st.attr.state);
    qp->state.store(static_cast<uint8_t>(st.attr.state), std::memory_order_relaxed);
  }
  x->users.fetch_add(1, std::memory_order_relaxed);
  return &qp->qpx.qp_base;
}

}  // namespace softhca::driver
