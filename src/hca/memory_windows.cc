// Memory windows (IBA 10.6.7, ibv_alloc_mw(3), ibv_bind_mw(3)): keys of the memory-key table that
// open part of an MR to remote peers once a bind WQE has bound them. The commands make and free
// them; binds and local invalidations are WQEs, executed in send-queue order by the send pipeline
// (run_memory_op); a SEND with invalidate invalidates at the responder. A window holds a copy of
// the translation of the part of its MR it opens, so the data path checks it as any key
// (MemoryKeys::check); its MR counts it and cannot change or go while it is bound.
// The checks of a bind follow IBA 10.6.7.2 as Linux's rxe applies them.
#include <cerrno>

#include "hca/device.h"

namespace softhca::hca {

using namespace hwif;

int Device::cmd_alloc_mw(const AllocMwIn& in, AllocMwOut& out) {
  if (pds_.find(in.pdn) == nullptr) return EINVAL;
  if (in.type != static_cast<uint32_t>(KeyKind::kWindow1) && in.type != static_cast<uint32_t>(KeyKind::kWindow2))
    return EINVAL;
  const uint32_t key = mkeys_.create_window(in.pdn, static_cast<KeyKind>(in.type), owner_);
  if (key == 0) return ENOMEM;
  out.rkey = key;
  return 0;
}

int Device::cmd_dealloc_mw(const DeallocMwIn& in, NoOut&) {
  // By its index: a bind of a type 2 window changed its key without the driver's copy.
  Mkey* mw = mkeys_.find_index(in.rkey);
  if (mw == nullptr || !mw->is_window() || mkeys_.find_owned(mw->key, owner_) == nullptr) return EINVAL;
  unbind_window(*mw);
  return mkeys_.destroy(mw->key) ? 0 : EINVAL;
}

void Device::unbind_window(Mkey& mw) {
  if (mw.mr_key != 0) {
    if (Mkey* mr = mkeys_.find(mw.mr_key); mr != nullptr && mr->windows > 0) --mr->windows;
  }
  mw.mr_key = 0;
  mw.bound_qpn = 0;
  mw.access = 0;
  mw.host_addr = mw.iova = mw.length = 0;
}

bool Device::invalidate_window(uint32_t key, uint32_t pdn, uint32_t qpn) {
  Mkey* mw = mkeys_.find(key);
  // Only a bound type 2 window is invalidated (IBA o10-37.2.26); from the wire, only by the QP it
  // is bound to (qpn 0: a local invalidation, by any QP of its PD).
  if (mw == nullptr || mw->kind != KeyKind::kWindow2 || mw->mr_key == 0 || mw->pdn != pdn) return false;
  if (qpn != 0 && mw->bound_qpn != qpn) return false;
  unbind_window(*mw);
  return true;
}

std::optional<CqeSyndrome> Device::run_memory_op(QueuePair& qp, const SendWqe& w) {
  if (w.opcode == WqeOpcode::kLocalInv) {
    if (invalidate_window(w.invalidate_key(), qp.pdn, 0)) return std::nullopt;
    return CqeSyndrome::kLocQpOpErr;
  }
  const BindInfo& b = w.bind;
  // The window by its index (as an mlx5 mkey: the variant is what the bind sets), in the QP's PD;
  // the new key is the same window's.
  Mkey* mw = mkeys_.find_index(b.mw_key);
  if (mw == nullptr || !mw->is_window() || mw->pdn != qp.pdn || (b.new_key >> 8) != (b.mw_key >> 8))
    return CqeSyndrome::kMwBindErr;
  const bool type2 = mw->kind == KeyKind::kWindow2;
  // A type 2 window is bound once, until invalidated; a type 1 window may be bound again (the new
  // bind replaces the old) or unbound with a bind of no MR and no length.
  if (type2 && mw->mr_key != 0) return CqeSyndrome::kMwBindErr;
  if (!type2 && b.mr_lkey == 0 && b.length == 0) {
    unbind_window(*mw);
    mw->key = b.new_key;
    return std::nullopt;
  }
  const Mkey* mr = mkeys_.find(b.mr_lkey);
  if (mr == nullptr || mr->is_window() || mr->pdn != qp.pdn || (mr->access & kAccessMwBind) == 0)
    return CqeSyndrome::kMwBindErr;
  const bool zero_based = (b.access & kAccessZeroBased) != 0;
  const uint32_t access = b.access & kAccessRemote;
  // Remote write or atomic through the window needs local write on the MR (IBA C10-88 for MRs,
  // o10-36.2.x for windows); a type 1 window is never zero-based (rxe, as the spec's type 1 binds
  // give virtual addresses).
  if (((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) != 0 && (mr->access & kAccessLocalWrite) == 0) ||
      (zero_based && !type2) || !mr->covers(b.addr, b.length))
    return CqeSyndrome::kMwBindErr;
  const uint32_t mr_key = mr->key;
  const uint64_t host = mr->host_at(b.addr);
  unbind_window(*mw);
  if (Mkey* m = mkeys_.find(mr_key); m != nullptr) ++m->windows;
  mw->mr_key = mr_key;
  mw->bound_qpn = type2 ? qp.qpn : 0;
  mw->access = access;
  mw->host_addr = host;
  mw->iova = zero_based ? 0 : b.addr;
  mw->length = b.length;
  mw->key = b.new_key;
  return std::nullopt;
}

}  // namespace softhca::hca
