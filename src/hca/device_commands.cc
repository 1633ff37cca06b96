// The control path: command handlers that create, modify and destroy device objects.
// Runs under the device lock like everything in Device; allocates from the region heap (not the
// data path). Objects are tagged with the current owner; reclaim() destroys a dead owner's.
#include <cerrno>
#include <cstring>
#include <new>
#include <type_traits>
#include <optional>

#include "hca/device.h"
#include "hca/qp_state_machine.h"
#include "hca/send_pipeline.h"

namespace softhca::hca {

using namespace hwif;

namespace {
// Ring sizes as log2. CQs and EQs go up to 2^24 entries (mlx5's limit); send and receive rings
// are indexed by the 16-bit counters of the doorbells and CQEs, so they stay below 2^16.
constexpr uint32_t kMaxLogRing = 24;
constexpr uint32_t kMaxLogWorkQueue = 15;
constexpr uint32_t kMinLogSqBbs = 4;          // a ring must hold the largest WQE (16 basic blocks)
constexpr uint32_t kMinLogRecvStride = 4;     // one 16-byte data segment
constexpr uint32_t kMinLogSrqStride = 5;      // next segment + one data segment
constexpr uint32_t kMaxLogRecvStride = 10;    // up to 63 segments of 16 bytes
bool is_pow2_log(uint32_t log) { return log <= kMaxLogRing; }
bool is_wq_log(uint32_t log) { return log <= kMaxLogWorkQueue; }
}  // namespace

// ---- dispatch --------------------------------------------------------------------------------

namespace {
template <class In, class Out>
int run_command(Device& dev, int (Device::*handler)(const In&, Out&), const void* in, size_t in_len,
                void* out, size_t out_len) {
  constexpr bool kNoOut = std::is_same_v<Out, NoOut>;
  if (in_len != sizeof(In) || (!kNoOut && out_len != sizeof(Out))) return EINVAL;
  In i;
  std::memcpy(&i, in, sizeof(In));
  Out o{};
  const int err = (dev.*handler)(i, o);
  if (err == 0 && !kNoOut) std::memcpy(out, &o, sizeof(Out));
  return err;
}
}  // namespace

int Device::execute(CmdOpcode op, const void* in, size_t in_len, void* out, size_t out_len) {
  const int err = dispatch_command(op, in, in_len, out, out_len);
  end_entry();  // a command that moves a QP to error may have sent something
  return err;
}

int Device::dispatch_command(CmdOpcode op, const void* in, size_t in_len, void* out, size_t out_len) {
  switch (op) {
    case CmdOpcode::kQueryDevice: return run_command(*this, &Device::cmd_query_device, in, in_len, out, out_len);
    case CmdOpcode::kQueryPort: return run_command(*this, &Device::cmd_query_port, in, in_len, out, out_len);
    case CmdOpcode::kAllocPd: return run_command(*this, &Device::cmd_alloc_pd, in, in_len, out, out_len);
    case CmdOpcode::kDeallocPd: return run_command(*this, &Device::cmd_dealloc_pd, in, in_len, out, out_len);
    case CmdOpcode::kCreateMkey: return run_command(*this, &Device::cmd_create_mkey, in, in_len, out, out_len);
    case CmdOpcode::kDestroyMkey: return run_command(*this, &Device::cmd_destroy_mkey, in, in_len, out, out_len);
    case CmdOpcode::kCreateEq: return run_command(*this, &Device::cmd_create_eq, in, in_len, out, out_len);
    case CmdOpcode::kDestroyEq: return run_command(*this, &Device::cmd_destroy_eq, in, in_len, out, out_len);
    case CmdOpcode::kCreateCq: return run_command(*this, &Device::cmd_create_cq, in, in_len, out, out_len);
    case CmdOpcode::kDestroyCq: return run_command(*this, &Device::cmd_destroy_cq, in, in_len, out, out_len);
    case CmdOpcode::kCreateSrq: return run_command(*this, &Device::cmd_create_srq, in, in_len, out, out_len);
    case CmdOpcode::kModifySrq: return run_command(*this, &Device::cmd_modify_srq, in, in_len, out, out_len);
    case CmdOpcode::kQuerySrq: return run_command(*this, &Device::cmd_query_srq, in, in_len, out, out_len);
    case CmdOpcode::kDestroySrq: return run_command(*this, &Device::cmd_destroy_srq, in, in_len, out, out_len);
    case CmdOpcode::kCreateQp: return run_command(*this, &Device::cmd_create_qp, in, in_len, out, out_len);
    case CmdOpcode::kModifyQp: return run_command(*this, &Device::cmd_modify_qp, in, in_len, out, out_len);
    case CmdOpcode::kQueryQp: return run_command(*this, &Device::cmd_query_qp, in, in_len, out, out_len);
    case CmdOpcode::kDestroyQp: return run_command(*this, &Device::cmd_destroy_qp, in, in_len, out, out_len);
    case CmdOpcode::kSetMadAgent: return run_command(*this, &Device::cmd_set_mad_agent, in, in_len, out, out_len);
    case CmdOpcode::kBindService: return run_command(*this, &Device::cmd_bind_service, in, in_len, out, out_len);
    case CmdOpcode::kUnbindService:
      return run_command(*this, &Device::cmd_unbind_service, in, in_len, out, out_len);
    case CmdOpcode::kTrackConnection:
      return run_command(*this, &Device::cmd_track_connection, in, in_len, out, out_len);
    case CmdOpcode::kUntrackConnection:
      return run_command(*this, &Device::cmd_untrack_connection, in, in_len, out, out_len);
    case CmdOpcode::kAttachMcast: return run_command(*this, &Device::cmd_attach_mcast, in, in_len, out, out_len);
    case CmdOpcode::kDetachMcast: return run_command(*this, &Device::cmd_detach_mcast, in, in_len, out, out_len);
    case CmdOpcode::kResizeCq: return run_command(*this, &Device::cmd_resize_cq, in, in_len, out, out_len);
    case CmdOpcode::kSetPortState:
      return run_command(*this, &Device::cmd_set_port_state, in, in_len, out, out_len);
    case CmdOpcode::kModifyCq: return run_command(*this, &Device::cmd_modify_cq, in, in_len, out, out_len);
    case CmdOpcode::kQueryClock: return run_command(*this, &Device::cmd_query_clock, in, in_len, out, out_len);
    case CmdOpcode::kModifyMkey: return run_command(*this, &Device::cmd_modify_mkey, in, in_len, out, out_len);
    case CmdOpcode::kOpenXrcd: return run_command(*this, &Device::cmd_open_xrcd, in, in_len, out, out_len);
    case CmdOpcode::kCloseXrcd: return run_command(*this, &Device::cmd_close_xrcd, in, in_len, out, out_len);
    case CmdOpcode::kOpenQp: return run_command(*this, &Device::cmd_open_qp, in, in_len, out, out_len);
    case CmdOpcode::kAllocDm: return run_command(*this, &Device::cmd_alloc_dm, in, in_len, out, out_len);
    case CmdOpcode::kFreeDm: return run_command(*this, &Device::cmd_free_dm, in, in_len, out, out_len);
    case CmdOpcode::kAllocMw: return run_command(*this, &Device::cmd_alloc_mw, in, in_len, out, out_len);
    case CmdOpcode::kDeallocMw: return run_command(*this, &Device::cmd_dealloc_mw, in, in_len, out, out_len);
  }
  return EOPNOTSUPP;
}

int Device::cmd_query_device(const QueryDeviceIn&, QueryDeviceOut& out) {
  out.caps = config_.caps;
  return 0;
}

int Device::cmd_query_port(const QueryPortIn& in, QueryPortOut& out) {
  if (in.port != 1) return EINVAL;
  out.port = config_.port;
  if (port_down()) {
    out.port.state = PortState::kDown;
    out.port.phys_state = kPhysStateDisabled;
  }
  return 0;
}

int Device::cmd_alloc_pd(const AllocPdIn&, AllocPdOut& out) {
  out.pdn = pds_.insert(owner_);
  return out.pdn == 0 ? ENOMEM : 0;
}

int Device::cmd_dealloc_pd(const DeallocPdIn& in, NoOut&) {
  uint32_t* users = pds_.find(in.pdn);
  if (users == nullptr) return EINVAL;
  if (*users != 0 || mkeys_.count_for_pd(in.pdn) != 0) return EBUSY;
  pds_.erase(in.pdn);
  return 0;
}

int Device::cmd_create_mkey(const CreateMkeyIn& in, CreateMkeyOut& out) {
  if (pds_.find(in.pdn) == nullptr) return EINVAL;
  if (in.length > config_.caps.max_mr_size) return EINVAL;
  // Remote write or atomic access requires local write (IBA 10.6.3.1 / C10-88).
  if ((in.access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(in.access & kAccessLocalWrite))
    return EINVAL;
  if (in.dmn != 0) {
    if (int err = attach_dm_key(in); err != 0) return err;
  }
  const uint32_t key = mkeys_.create(in, owner_);
  if (key == 0) {
    if (in.dmn != 0) detach_dm_key(in.dmn);
    return ENOMEM;
  }
  out.lkey = out.rkey = key;
  return 0;
}

int Device::cmd_destroy_mkey(const DestroyMkeyIn& in, NoOut&) {
  const Mkey* m = mkeys_.find_owned(in.lkey, owner_);
  if (m == nullptr || m->is_window()) return EINVAL;
  if (m->windows != 0) return EBUSY;  // ibv_dereg_mr(3): it fails while windows are bound to the MR
  if (m->dmn != 0) detach_dm_key(m->dmn);
  return mkeys_.destroy(in.lkey) ? 0 : EINVAL;
}

int Device::cmd_modify_mkey(const ModifyMkeyIn& in, NoOut&) {
  Mkey* m = mkeys_.find_owned(in.lkey, owner_);
  if (m == nullptr) return EINVAL;
  if (m->dmn != 0 || m->is_window()) return EINVAL;  // a key in device memory is not registered again (as the kernel's rereg)
  if (m->windows != 0) return EBUSY;                 // windows hold copies of its translation
  const uint32_t pdn = (in.what & kMkeyPd) != 0 ? in.pdn : m->pdn;
  const uint32_t access = (in.what & kMkeyAccess) != 0 ? in.access : m->access;
  if (pds_.find(pdn) == nullptr) return EINVAL;
  // As at create: remote write or atomic access requires local write (IBA 10.6.3.1 / C10-88).
  if ((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(access & kAccessLocalWrite)) return EINVAL;
  if ((in.what & kMkeyTranslation) != 0 && in.length > config_.caps.max_mr_size) return EINVAL;
  m->pdn = pdn;
  m->access = access;
  if ((in.what & kMkeyTranslation) != 0) {
    m->host_addr = in.host_addr;
    m->iova = in.iova;
    m->length = in.length;
  }
  return 0;
}

int Device::cmd_create_eq(const CreateEqIn& in, CreateEqOut& out) {
  if (!is_pow2_log(in.log_nent) || in.ring_addr == 0) return EINVAL;
  EventQueue* eq = nullptr;
  out.eqn = eqs_.insert(owner_, &eq);
  if (eq == nullptr) return ENOMEM;
  eq->ring = in.ring_addr;
  eq->log_nent = in.log_nent;
  eq->msi_vector = in.msi_vector;
  eq->async_events = in.async_events;
  return 0;
}

int Device::cmd_destroy_eq(const DestroyEqIn& in, NoOut&) {
  EventQueue* eq = eqs_.find(in.eqn);
  if (eq == nullptr) return EINVAL;
  if (eq->users != 0) return EBUSY;
  // A CQ, QP or SRQ may still name it as its async EQ (a context closed before its objects were
  // destroyed, which libibverbs refuses anyway): their events then go nowhere.
  eqs_.erase(in.eqn);
  return 0;
}

int Device::cmd_create_cq(const CreateCqIn& in, CreateCqOut& out) {
  if (!is_pow2_log(in.log_nent) || in.ring_addr == 0 || in.dbrec_addr == 0) return EINVAL;
  if ((1u << in.log_nent) - 1 > config_.caps.max_cqe + 1) return EINVAL;
  EventQueue* eq = nullptr;
  if (in.eqn != kNoEq && (eq = eqs_.find(in.eqn)) == nullptr) return EINVAL;
  if (in.async_eqn != kNoEq && eqs_.find(in.async_eqn) == nullptr) return EINVAL;
  CompletionQueue* cq = nullptr;
  out.cqn = cqs_.insert(owner_, &cq);
  if (cq == nullptr) return ENOMEM;
  cq->ring = in.ring_addr;
  cq->dbrec = in.dbrec_addr;
  cq->log_nent = in.log_nent;
  cq->eqn = in.eqn;
  cq->async_eqn = in.async_eqn;
  cq->timestamps = (in.flags & kCqTimestamps) != 0;
  if (eq) ++eq->users;
  return 0;
}

// The switch to the new ring is atomic for the data path: Completer::write runs under the same
// device lock as this command, so a CQE is written either before (into the old ring, below out.pi)
// or after (into the new one). Commands are not counted as PCIe traffic, and the consumer index is
// read uncounted as Completer::write reads it (docs/model.md): a resize adds no TLP.
int Device::cmd_resize_cq(const ResizeCqIn& in, ResizeCqOut& out) {
  CompletionQueue* cq = cqs_.find(in.cqn);
  // The rings are in the owner's memory; only it may move them (another process of the host gets
  // EINVAL, as for a CQN that names nothing).
  if (cq == nullptr || cqs_.owner_of(in.cqn) != owner_) return EINVAL;
  if (!is_pow2_log(in.log_nent) || in.ring_addr == 0) return EINVAL;
  if ((1u << in.log_nent) - 1 > config_.caps.max_cqe + 1) return EINVAL;  // as cmd_create_cq
  if (in.cqe == 0 || in.cqe >= (1u << in.log_nent) || in.cqe > config_.caps.max_cqe) return EINVAL;
  const std::optional<uint32_t> dbrec = read_dbrec_be32(cq->dbrec, false);
  if (!dbrec) return EFAULT;
  // Outstanding CQEs: written and not yet consumed. They must fit what the caller asked for
  // (ibv_resize_cq(3): EINVAL below the number of CQEs in the CQ).
  const uint32_t outstanding = (cq->pi - (*dbrec & 0xffffff)) & 0xffffff;
  if (outstanding > in.cqe) return EINVAL;
  cq->ring = in.ring_addr;
  cq->log_nent = in.log_nent;
  cq->ci_seen = *dbrec & 0xffffff;
  out.pi = cq->pi;
  return 0;
}

// Takes effect for the next qualifying CQE: one already held back keeps its timer, and a count
// lowered to what is already pending raises the event with the next CQE.
int Device::cmd_modify_cq(const ModifyCqIn& in, NoOut&) {
  CompletionQueue* cq = cqs_.find(in.cqn);
  if (cq == nullptr || cqs_.owner_of(in.cqn) != owner_) return EINVAL;
  if (in.cq_count > config_.caps.max_cq_moderation_count) return EINVAL;
  if (in.cq_period_us > config_.caps.max_cq_moderation_period_us) return EINVAL;
  cq->mod_count = static_cast<uint16_t>(in.cq_count);
  cq->mod_period_us = static_cast<uint16_t>(in.cq_period_us);
  return 0;
}

// The clock and the wall clock at one reading of the engine clock.
int Device::cmd_query_clock(const QueryClockIn&, QueryClockOut& out) {
  const Picoseconds t = now();
  out.ticks = static_cast<uint64_t>(t.count() / kPsPerClockTick);
  out.wall_ns = clock_.wall_clock_ns(t);
  return 0;
}

int Device::cmd_destroy_cq(const DestroyCqIn& in, NoOut&) {
  CompletionQueue* cq = cqs_.find(in.cqn);
  if (cq == nullptr) return EINVAL;
  if (cq->users != 0) return EBUSY;
  destroy_cq(in.cqn);
  return 0;
}

void Device::destroy_cq(uint32_t cqn) {
  const CompletionQueue* cq = cqs_.find(cqn);
  if (cq == nullptr) return;
  drop_held_events(*cq);
  if (EventQueue* eq = eqs_.find(cq->eqn)) --eq->users;
  cqs_.erase(cqn);
}

int Device::cmd_create_srq(const CreateSrqIn& in, CreateSrqOut& out) {
  uint32_t* pd_users = pds_.find(in.pdn);
  if (pd_users == nullptr || !is_wq_log(in.log_wqe_cnt) || in.ring_addr == 0 || in.dbrec_addr == 0)
    return EINVAL;
  if (in.log_stride < kMinLogSrqStride || in.log_stride > kMaxLogRecvStride) return EINVAL;
  if ((1u << in.log_wqe_cnt) > config_.caps.max_srq_wr + 1) return EINVAL;
  if (in.async_eqn != kNoEq && eqs_.find(in.async_eqn) == nullptr) return EINVAL;
  XrcDomain* xrcd = nullptr;
  CompletionQueue* xrc_cq = nullptr;
  if (in.xrcdn != kNoXrcd) {
    if (int err = check_xrc_srq(in)) return err;
    xrcd = xrcds_.find(in.xrcdn);
    xrc_cq = cqs_.find(in.cqn);
    if (xrcd == nullptr || xrc_cq == nullptr) return EINVAL;
  }
  SharedReceiveQueue* srq = nullptr;
  out.srqn = srqs_.insert(owner_, &srq);
  if (srq == nullptr) return ENOMEM;
  if (xrcd != nullptr && xrc_cq != nullptr) {
    srq->xrcdn = in.xrcdn;
    srq->cqn = in.cqn;
    ++xrcd->users;
    ++xrc_cq->users;
  }
  srq->pdn = in.pdn;
  srq->ring = in.ring_addr;
  srq->dbrec = in.dbrec_addr;
  srq->log_wqe_cnt = in.log_wqe_cnt;
  srq->log_stride = in.log_stride;
  srq->limit = in.limit;
  srq->async_eqn = in.async_eqn;
  ++*pd_users;
  return 0;
}

int Device::cmd_modify_srq(const ModifySrqIn& in, NoOut&) {
  SharedReceiveQueue* srq = srqs_.find(in.srqn);
  if (srq == nullptr) return EINVAL;
  if (in.limit > (1u << srq->log_wqe_cnt)) return EINVAL;
  srq->limit = in.limit;
  return 0;
}

int Device::cmd_query_srq(const QuerySrqIn& in, QuerySrqOut& out) {
  SharedReceiveQueue* srq = srqs_.find(in.srqn);
  if (srq == nullptr) return EINVAL;
  out.limit = srq->limit;
  return 0;
}

int Device::cmd_destroy_srq(const DestroySrqIn& in, NoOut&) {
  SharedReceiveQueue* srq = srqs_.find(in.srqn);
  if (srq == nullptr) return EINVAL;
  if (srq->users != 0) return EBUSY;
  destroy_srq(in.srqn);
  return 0;
}

void Device::destroy_srq(uint32_t srqn) {
  const SharedReceiveQueue* srq = srqs_.find(srqn);
  if (srq == nullptr) return;
  drop_held_events(*srq);
  if (uint32_t* pd_users = pds_.find(srq->pdn)) --*pd_users;
  if (srq->xrcdn != kNoXrcd) {
    release_xrcd(srq->xrcdn);
    if (CompletionQueue* cq = cqs_.find(srq->cqn)) --cq->users;
  }
  srqs_.erase(srqn);
}

int Device::cmd_create_qp(const CreateQpIn& in, CreateQpOut& out) {
  if (is_xrc(in.type)) return create_xrc_qp(in, out);
  uint32_t* pd_users = pds_.find(in.pdn);
  CompletionQueue* scq = cqs_.find(in.send_cqn);
  CompletionQueue* rcq = cqs_.find(in.recv_cqn);
  SharedReceiveQueue* srq = in.srqn == kNoSrq ? nullptr : srqs_.find(in.srqn);
  if (pd_users == nullptr || scq == nullptr || rcq == nullptr) return EINVAL;
  if (in.srqn != kNoSrq && srq == nullptr) return EINVAL;
  if (in.async_eqn != kNoEq && eqs_.find(in.async_eqn) == nullptr) return EINVAL;
  if (in.type != QpType::kRc && in.type != QpType::kUc && in.type != QpType::kUd) return EOPNOTSUPP;
  if (in.log_sq_bbs < kMinLogSqBbs || !is_wq_log(in.log_sq_bbs) || in.sq_addr == 0 || in.dbrec_addr == 0)
    return EINVAL;
  if (srq == nullptr && (in.rq_addr == 0 || !is_wq_log(in.log_rq_cnt) || in.log_rq_stride < kMinLogRecvStride ||
                         in.log_rq_stride > kMaxLogRecvStride))
    return EINVAL;

  QueuePair* qp = nullptr;
  const uint32_t qpn = qps_.insert(owner_, &qp);
  if (qp == nullptr) return ENOMEM;
  if (!init_qp(qp, qpn, in)) return ENOMEM;
  ++*pd_users;
  ++scq->users;
  ++rcq->users;
  if (srq) ++srq->users;
  out.qpn = qpn;
  return 0;
}

// An INI QP is an RC QP with a send queue only; a TGT QP has no queue at all (its per-QP arrays
// are one basic block, never used) and holds its domain instead of a PD and CQs.
int Device::create_xrc_qp(const CreateQpIn& in, CreateQpOut& out) {
  if (int err = check_xrc_qp(in)) return err;
  if (in.async_eqn != kNoEq && eqs_.find(in.async_eqn) == nullptr) return EINVAL;
  const bool tgt = in.type == QpType::kXrcTgt;
  if (!tgt && (in.log_sq_bbs < kMinLogSqBbs || !is_wq_log(in.log_sq_bbs) || in.sq_addr == 0 || in.dbrec_addr == 0))
    return EINVAL;
  CreateQpIn q = in;
  if (tgt) {
    q.pdn = 0;
    q.send_cqn = q.recv_cqn = 0;
    q.sq_addr = q.rq_addr = q.dbrec_addr = 0;
    q.log_sq_bbs = 0;
  } else {
    q.recv_cqn = 0;
    q.xrcdn = kNoXrcd;
  }
  q.srqn = kNoSrq;
  XrcDomain* xrcd = tgt ? xrcds_.find(in.xrcdn) : nullptr;
  uint32_t* pd_users = tgt ? nullptr : pds_.find(q.pdn);
  CompletionQueue* scq = tgt ? nullptr : cqs_.find(q.send_cqn);
  if (tgt ? xrcd == nullptr : pd_users == nullptr || scq == nullptr) return EINVAL;
  QueuePair* qp = nullptr;
  const uint32_t qpn = qps_.insert(owner_, &qp);
  if (qp == nullptr) return ENOMEM;
  if (!init_qp(qp, qpn, q)) return ENOMEM;
  if (xrcd != nullptr) {
    qp->xrcdn = in.xrcdn;
    qp->handles.add(owner_);
    ++xrcd->users;
  }
  if (pd_users != nullptr) ++*pd_users;
  if (scq != nullptr) ++scq->users;
  out.qpn = qpn;
  return 0;
}

bool Device::init_qp(QueuePair* qp, uint32_t qpn, const CreateQpIn& in) {
  qp->qpn = qpn;
  qp->owner = owner_;
  qp->type = in.type;
  qp->pdn = in.pdn;
  qp->send_cqn = in.send_cqn;
  qp->recv_cqn = in.recv_cqn;
  qp->srqn = in.srqn;
  qp->sq_sig_all = in.sq_sig_all;
  qp->async_eqn = in.async_eqn;
  qp->sq_addr = in.sq_addr;
  qp->log_sq_bbs = in.log_sq_bbs;
  qp->rq_addr = in.rq_addr;
  qp->log_rq_cnt = in.log_rq_cnt;
  qp->log_rq_stride = in.log_rq_stride;
  qp->dbrec = in.dbrec_addr;
  // The per-QP arrays come from the region heap; a full region is ENOMEM, as a full table is.
  qp->sq_shadow = heap_.allocate(qp->sq_shadow_bytes());
  qp->records = heap_.allocate(qp->records_bytes());
  if (qp->sq_shadow == kHeapNone || qp->records == kHeapNone) {
    release_qp_arrays(*qp);
    qps_.erase(qpn);
    return false;
  }
  // The shadow is cleared (a WQE claiming blocks past what was fetched decodes zeros, never an
  // earlier QP's bytes); the records, 17 times larger, are not: the decoder writes each
  // (start_record) before the transport reads it, and only records between the requester's
  // complete and exec indices are ever read. So most of a deep QP's device memory is touched only
  // as its queue is used.
  std::memset(heap_.at<uint8_t>(qp->sq_shadow), 0, qp->sq_shadow_bytes());
  // The SendRecords are not cleared (about 1 KiB per basic block, the most of a QP's footprint):
  // only records in [req.complete, req.exec) are ever read, and each was set up when its WQE was
  // prepared (SendPipeline::start_record and the WQE's parse). SendRecord is an aggregate, so the
  // heap's bytes already hold records (an implicit-lifetime type), and untouched pages cost nothing.
  return true;
}

int Device::check_qp_attr_values(const QueuePair& qp, uint32_t mask, const QpAttributes& a) const {
  if ((mask & kQpPort) && (a.port_num == 0 || a.port_num > config_.caps.phys_port_cnt)) return EINVAL;
  if ((mask & kQpPkeyIndex) && a.pkey_index >= config_.caps.max_pkeys) return EINVAL;
  if ((mask & kQpPathMtu) && (static_cast<uint8_t>(a.path_mtu) < 1 ||
                              static_cast<uint8_t>(a.path_mtu) > static_cast<uint8_t>(config_.port.max_mtu)))
    return EINVAL;
  if ((mask & kQpMaxQpRdAtomic) && a.max_rd_atomic > config_.caps.max_qp_init_rd_atom) return EINVAL;
  if ((mask & kQpMaxDestRdAtomic) && a.max_dest_rd_atomic > config_.caps.max_qp_rd_atom) return EINVAL;
  if ((mask & kQpTimeout) && a.timeout > 31) return EINVAL;
  if ((mask & kQpRetryCnt) && a.retry_cnt > 7) return EINVAL;
  if ((mask & kQpRnrRetry) && a.rnr_retry > 7) return EINVAL;
  if ((mask & kQpMinRnrTimer) && a.min_rnr_timer > 31) return EINVAL;
  if ((mask & kQpDestQpn) && a.dest_qpn > kQpnMask) return EINVAL;
  if ((mask & kQpAv) && qp.type != QpType::kUd && a.av.is_global &&
      a.av.sgid_index >= hwif::kGidTableLen)
    return EINVAL;
  // RoCE routes by IP address only: a connected QP's path must carry a GRH from a GID the port has,
  // as Linux requires of a RoCE address (rdma_check_ah_attr: EINVAL without IB_AH_GRH).
  if ((mask & kQpAv) && qp.type != QpType::kUd && ethernet() &&
      (!a.av.is_global || config_.port.gids[a.av.sgid_index % hwif::kGidTableLen] == hwif::Gid{}))
    return EINVAL;
  return 0;
}

void Device::apply_qp_attrs(QueuePair& qp, uint32_t mask, const QpAttributes& a) {
  QpAttributes& q = qp.attr;
  if (mask & kQpAccessFlags) q.access_flags = a.access_flags;
  if (mask & kQpPkeyIndex) q.pkey_index = a.pkey_index;
  if (mask & kQpPort) q.port_num = a.port_num;
  if (mask & kQpQkey) q.qkey = a.qkey;
  if (mask & kQpAv) q.av = a.av;
  if (mask & kQpPathMtu) q.path_mtu = a.path_mtu;
  if (mask & kQpTimeout) q.timeout = a.timeout;
  if (mask & kQpRetryCnt) q.retry_cnt = a.retry_cnt;
  if (mask & kQpRnrRetry) q.rnr_retry = a.rnr_retry;
  if (mask & kQpMaxQpRdAtomic) q.max_rd_atomic = a.max_rd_atomic;
  if (mask & kQpMinRnrTimer) q.min_rnr_timer = a.min_rnr_timer;
  if (mask & kQpMaxDestRdAtomic) q.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & kQpDestQpn) q.dest_qpn = a.dest_qpn;
  if (mask & kQpRqPsn) {
    q.rq_psn = a.rq_psn & Psn::kMask;
    qp.resp.epsn = q.rq_psn;
  }
  if (mask & kQpSqPsn) {
    q.sq_psn = a.sq_psn & Psn::kMask;
    qp.req.next_psn = qp.req.una_psn = qp.req.tx_psn = qp.req.max_sent_psn = q.sq_psn;
  }
  if (mask & kQpRetryCnt) qp.req.retries_left = a.retry_cnt;
  if (mask & kQpRnrRetry) qp.req.rnr_retries_left = a.rnr_retry;
}

void Device::reset_qp(QueuePair& qp) {
  cancel_timer(qp);
  const QpAttributes keep = qp.attr;
  qp.attr = QpAttributes{};
  qp.attr.port_num = keep.port_num;
  qp.req = RequesterState{};
  qp.resp = ResponderState{};
  qp.rq_ci = 0;
  qp.rq_posted_cached = 0;
  qp.comm_est_raised = false;
  qp.sqd_notify = false;
  // No record is in [req.complete, req.exec) any more: none is read before a WQE sets it up again
  // (cmd_create_qp), so the records are left as they are.
}

int Device::cmd_modify_qp(const ModifyQpIn& in, NoOut&) {
  QueuePair* qp = qps_.find(in.qpn);
  if (qp == nullptr) return EINVAL;
  const QpState from = qp->state();
  if (!modify_is_allowed(qp->type, from, in.attr_mask, in.attr)) return EINVAL;
  if (int err = check_qp_attr_values(*qp, in.attr_mask, in.attr)) return err;
  const QpState to = (in.attr_mask & kQpState) ? in.attr.state : from;
  if (to == QpState::kReset) {
    reset_qp(*qp);
    return 0;
  }
  apply_qp_attrs(*qp, in.attr_mask, in.attr);
  if (to == QpState::kErr) {
    if (from != QpState::kErr) enter_error(*qp);
    return 0;
  }
  qp->attr.state = to;
  if (to == QpState::kSqd && from == QpState::kRts) {
    // SQD: WQEs already started run to completion, later ones wait (IBA 10.3.1 "Send Queue
    // Drain"); SQ_DRAINED when the last started one completes, if the caller asked for it.
    qp->attr.sq_draining = true;
    qp->sqd_notify = (in.attr_mask & kQpEnSqdAsyncNotify) != 0 && in.attr.en_sqd_async_notify;
    check_sq_drained(*qp);
  } else if (to != QpState::kSqd) {
    qp->attr.sq_draining = false;
    qp->sqd_notify = false;
  }
  // WQEs may have been posted in RTR or SQD; they start now (IBA 10.3.1).
  if (to == QpState::kRts && qp->type != QpType::kXrcTgt) {
    const QpScope scope(*this, *qp);  // what it sends counts for the QP
    SendPipeline(*this, *qp).run();
  }
  return 0;
}

int Device::cmd_query_qp(const QueryQpIn& in, QueryQpOut& out) {
  QueuePair* qp = qps_.find(in.qpn);
  if (qp == nullptr) return EINVAL;
  out.attr = qp->attr;
  out.attr.cur_state = qp->attr.state;
  out.attr.sq_psn = qp->req.next_psn;
  out.attr.rq_psn = qp->resp.epsn;
  return 0;
}

int Device::cmd_destroy_qp(const DestroyQpIn& in, NoOut&) {
  QueuePair* qp = qps_.find(in.qpn);
  if (qp == nullptr) return EINVAL;
  if (qp->type == QpType::kXrcTgt) {
    // The caller's handle (its creation or an ibv_open_qp); the QP goes with the last one.
    if (!qp->handles.drop(owner_)) return EINVAL;
    if (qp->handles.total() != 0) return 0;
  }
  destroy_qp(in.qpn);
  return 0;
}

void Device::destroy_qp(uint32_t qpn) {
  QueuePair* qp = qps_.find(qpn);
  if (qp == nullptr) return;
  cancel_timer(*qp);
  drop_held_events(*qp);
  // References taken at creation; the objects cannot be gone while the QP holds them.
  if (uint32_t* pd_users = pds_.find(qp->pdn)) --*pd_users;
  if (CompletionQueue* scq = cqs_.find(qp->send_cqn)) --scq->users;
  if (CompletionQueue* rcq = cqs_.find(qp->recv_cqn)) --rcq->users;
  if (SharedReceiveQueue* srq = srqs_.find(qp->srqn)) --srq->users;
  if (qp->xrcdn != kNoXrcd) release_xrcd(qp->xrcdn);
  McastGroups(state_.mcast).detach_all(qpn);
  if (qp->mad_agent) {
    end_connections_of(qpn);
    MadAgents(state_.mad).detach(qpn);
  }
  release_qp_arrays(*qp);
  qps_.erase(qpn);
}

void Device::release_qp_arrays(const QueuePair& qp) {
  heap_.release(qp.sq_shadow, qp.sq_shadow_bytes());
  heap_.release(qp.records, qp.records_bytes());
}

// ---- reclaim ----------------------------------------------------------------------------------

void Device::reclaim(uint32_t owner) {
  // Users before what they use, so every reference count drops before its object goes. Nothing
  // here touches host memory: the owner's rings and buffers may be gone with its process.
  reclaim_xrc(owner);
  qps_.for_each_of(owner, [&](uint32_t qpn) {
    // TGT QPs went in reclaim_xrc(), or stay for the other processes holding them.
    if (const QueuePair* qp = qps_.find(qpn); qp != nullptr && qp->type != QpType::kXrcTgt) destroy_qp(qpn);
  });
  srqs_.for_each_of(owner, [&](uint32_t srqn) { destroy_srq(srqn); });
  cqs_.for_each_of(owner, [&](uint32_t cqn) { destroy_cq(cqn); });
  eqs_.for_each_of(owner, [&](uint32_t eqn) { eqs_.erase(eqn); });
  mkeys_.destroy_owned(owner);
  reclaim_dm(owner);
  pds_.for_each_of(owner, [&](uint32_t pdn) { pds_.erase(pdn); });
  // Its opens of XRC domains: a domain goes with its last open once nothing is in it.
  xrcds_.for_each([&](uint32_t n, XrcDomain& d) {
    if (d.opens.drop_all(owner) && d.opens.total() == 0 && d.users == 0) xrcds_.erase(n);
  });
  end_entry();  // the DREQs a dead agent's connections get (management.cc) leave now
}

}  // namespace softhca::hca
