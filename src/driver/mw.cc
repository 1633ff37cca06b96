// Memory windows (ibv_alloc_mw(3), ibv_bind_mw(3)): a window is a key the device makes (AllocMw)
// that opens nothing until a bind WQE binds it to part of an MR; binds, local invalidations and
// SENDs with invalidate are WQEs (qp_post.cc, qp_ex_ops.cc), executed by the device in send
// queue order. Control path, except bind_mw, which posts one WQE under the send queue's lock as
// post_send does.
#include <cerrno>
#include <new>

#include "driver/objects.h"
#include "driver/provider.h"

namespace softhca::driver {

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  if (pd == nullptr || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)) return fail_errno<ibv_mw>(EINVAL);
  Pd* p = to_pd(pd);
  Context* ctx = to_ctx(pd->context);
  hwif::AllocMwIn in;
  in.pdn = p->pdn;
  in.type = static_cast<uint32_t>(type);
  hwif::AllocMwOut out;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in, out); err != 0) return fail_errno<ibv_mw>(err);
  auto* mw = new (std::nothrow) ibv_mw{};
  if (mw == nullptr) {
    hwif::DeallocMwIn d;
    d.rkey = out.rkey;
    (void)hwif::exec_cmd(*ctx->link.cmd, d);
    return fail_errno<ibv_mw>(ENOMEM);
  }
  mw->context = pd->context;
  mw->pd = pd;
  mw->rkey = out.rkey;
  mw->handle = out.rkey;  // the device finds the window by its index, whatever its variant now
  mw->type = type;
  p->users.fetch_add(1, std::memory_order_relaxed);
  return mw;
}

int dealloc_mw(ibv_mw* mw) {
  hwif::DeallocMwIn in;
  in.rkey = mw->handle;
  if (int err = hwif::exec_cmd(*to_ctx(mw->context)->link.cmd, in); err != 0) return err;
  to_pd(mw->pd)->users.fetch_sub(1, std::memory_order_relaxed);
  delete mw;
  return 0;
}

int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
  // ibv_bind_mw checked the type (1), the MR's PD and an empty bind's address and length.
  if (qp == nullptr || mw_bind == nullptr) return EINVAL;
  ibv_send_wr wr{};
  wr.wr_id = mw_bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = mw_bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);  // each bind of a type 1 window gives it a new key
  wr.bind_mw.bind_info = mw_bind->bind_info;
  ibv_send_wr* bad = nullptr;
  if (int err = post_send(qp, &wr, &bad); err != 0) return err;
  mw->rkey = wr.bind_mw.rkey;
  return 0;
}

}  // namespace softhca::driver
