// Data path: the ibv_qp_ex work-request builders (ibv_wr_start .. ibv_wr_complete), mlx5 style.
// ibv_wr_start takes the SQ lock and ibv_wr_complete/ibv_wr_abort release it, so everything in
// between runs under SendQueue::lock on the caller's thread. Each op builder (wr_send, wr_rdma_write,
// ...) opens a WQE at sq.cur_post with qpx->wr_id/wr_flags; the data setter (wr_set_sge*,
// wr_set_inline_data*) and, on UD, wr_set_ud_addr (on XRC INI, wr_set_xrc_srqn) complete it,
// whichever comes last. Errors are
// remembered and returned by wr_complete, which then rolls back every WQE of the batch (nothing
// is rung); otherwise it rings once for the batch exactly as post_send does.
// Unsupported builders (tso, atomic_write) stay NULL: create_qp refuses the send_ops_flags that
// would need them (EOPNOTSUPP). bind_mw and local_inv carry no data: they are finished at once.
#include <cerrno>
#include <cstring>

#include "driver/objects.h"
#include "driver/provider.h"
#include "driver/wqe_ring.h"

namespace softhca::driver {
namespace {

constexpr uint32_t kAtomicOperandBytes = 8;

uint64_t op_flag(hwif::WqeOpcode op) {
  switch (op) {
    case hwif::WqeOpcode::kSend: return IBV_QP_EX_WITH_SEND;
    case hwif::WqeOpcode::kSendImm: return IBV_QP_EX_WITH_SEND_WITH_IMM;
    case hwif::WqeOpcode::kRdmaWrite: return IBV_QP_EX_WITH_RDMA_WRITE;
    case hwif::WqeOpcode::kRdmaWriteImm: return IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
    case hwif::WqeOpcode::kRdmaRead: return IBV_QP_EX_WITH_RDMA_READ;
    case hwif::WqeOpcode::kAtomicCs: return IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
    case hwif::WqeOpcode::kAtomicFa: return IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    case hwif::WqeOpcode::kSendInv: return IBV_QP_EX_WITH_SEND_WITH_INV;
    case hwif::WqeOpcode::kBindMw: return IBV_QP_EX_WITH_BIND_MW;
    case hwif::WqeOpcode::kLocalInv: return IBV_QP_EX_WITH_LOCAL_INV;
    default: return 0;
  }
}

bool is_atomic(hwif::WqeOpcode op) { return op == hwif::WqeOpcode::kAtomicCs || op == hwif::WqeOpcode::kAtomicFa; }

// Adds one segment of the open WQE, keeping it within the slot the ring was sized for.
template <class Seg>
bool add_seg(Qp& qp, const Seg& seg) {
  WrBuilder& b = qp.wr;
  if ((b.ds + sizeof(Seg) / hwif::kDsBytes) * hwif::kDsBytes > qp.sq.wqe_size) {
    b.err = EINVAL;
    return false;
  }
  b.data_ptr = sq_put(sq_ring(qp.sq), b.data_ptr, seg);
  b.ds += static_cast<uint32_t>(sizeof(Seg) / hwif::kDsBytes);
  return true;
}

// Opens a WQE for op; false (with b.err set) when it cannot be built.
bool begin_wqe(Qp& qp, hwif::WqeOpcode op) {
  WrBuilder& b = qp.wr;
  SendQueue& sq = qp.sq;
  if (b.err != 0) return false;
  if (b.open || !(qp.send_ops_flags & op_flag(op))) {  // previous WQE unfinished, or an op not asked for
    b.err = EINVAL;
    return false;
  }
  if (sq_full(sq, b.nreq)) {
    b.err = ENOMEM;
    return false;
  }
  const uint8_t flags = ctrl_flags(qp.qpx.wr_flags, qp.sq_sig_all);
  b.ctrl_idx = sq.cur_post;
  b.ctrl_ptr = sq_wqe(sq, b.ctrl_idx);
  b.ctrl = hwif::CtrlSeg{};
  b.ctrl.set(op, static_cast<uint16_t>(b.ctrl_idx & 0xffff), qp.qpn, 0, flags);
  b.ds = 1;
  b.data_ptr = sq_advance(sq_ring(sq), b.ctrl_ptr, sizeof(hwif::CtrlSeg));
  b.need_ud_addr = qp.type == hwif::QpType::kUd;
  if (b.need_ud_addr) {
    b.dgram_ptr = b.data_ptr;
    b.data_ptr = sq_advance(sq_ring(sq), b.data_ptr, sizeof(hwif::DatagramSeg));
    b.ds += static_cast<uint32_t>(sizeof(hwif::DatagramSeg) / hwif::kDsBytes);
  }
  b.need_xrc_srqn = qp.type == hwif::QpType::kXrcIni;
  if (b.need_xrc_srqn) {
    b.dgram_ptr = b.data_ptr;  // the XRC segment's place
    b.data_ptr = sq_advance(sq_ring(sq), b.data_ptr, sizeof(hwif::XrcSeg));
    b.ds += static_cast<uint32_t>(sizeof(hwif::XrcSeg) / hwif::kDsBytes);
  }
  b.data_set = false;
  b.cur_inline = false;
  b.open = true;
  const uint32_t slot = b.ctrl_idx & (sq.wqe_cnt - 1);
  sq.wrid[slot] = qp.qpx.wr_id;
  sq.wqe_head[slot] = sq.head + b.nreq;
  return true;
}

// Finishes the open WQE once its data and (UD) address are set.
void maybe_finish(Qp& qp) {
  WrBuilder& b = qp.wr;
  if (!b.open || !b.data_set || b.need_ud_addr || b.need_xrc_srqn || b.err != 0) return;
  b.ctrl.qpn_ds = (qp.qpn << 8) | (b.ds & 0x3f);
  store_as(b.ctrl_ptr, b.ctrl);
  b.last_idx = b.ctrl_idx;
  b.last_ds = b.ds;
  b.last_inline = b.cur_inline;
  qp.sq.cur_post += ds_to_bbs(b.ds);
  ++b.nreq;
  b.open = false;
}

// The open WQE, ready for its data; false (with b.err set) otherwise.
bool open_for_data(Qp& qp) {
  WrBuilder& b = qp.wr;
  if (b.err != 0) return false;
  if (!b.open || b.data_set) {
    b.err = EINVAL;
    return false;
  }
  return true;
}

void set_imm(Qp& qp, __be32 imm) { std::memcpy(static_cast<void*>(&qp.wr.ctrl.imm), &imm, sizeof(imm)); }

// ---- op builders ----

void wr_send(ibv_qp_ex* qpx) { begin_wqe(*to_qp(qpx), hwif::WqeOpcode::kSend); }

void wr_send_imm(ibv_qp_ex* qpx, __be32 imm) {
  Qp& qp = *to_qp(qpx);
  if (begin_wqe(qp, hwif::WqeOpcode::kSendImm)) set_imm(qp, imm);
}

void wr_send_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  Qp& qp = *to_qp(qpx);
  if (begin_wqe(qp, hwif::WqeOpcode::kSendInv)) qp.wr.ctrl.imm = invalidate_rkey;
}

// A WQE with no data: complete once its segment is in.
void finish_without_data(Qp& qp) {
  qp.wr.data_set = true;
  qp.wr.need_xrc_srqn = false;  // an XRC INI QP's window ops go to no SRQ
  maybe_finish(qp);
}

void wr_bind_mw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* bind_info) {
  Qp& qp = *to_qp(qpx);
  if (!begin_wqe(qp, hwif::WqeOpcode::kBindMw)) return;
  if (mw == nullptr || bind_info == nullptr) {
    qp.wr.err = EINVAL;
    return;
  }
  if (add_seg(qp, make_bind(*mw, rkey, *bind_info))) finish_without_data(qp);
}

void wr_local_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  Qp& qp = *to_qp(qpx);
  if (!begin_wqe(qp, hwif::WqeOpcode::kLocalInv)) return;
  qp.wr.ctrl.imm = invalidate_rkey;
  finish_without_data(qp);
}

void wr_rdma_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  Qp& qp = *to_qp(qpx);
  if (begin_wqe(qp, hwif::WqeOpcode::kRdmaWrite)) add_seg(qp, make_raddr(remote_addr, rkey));
}

void wr_rdma_write_imm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, __be32 imm) {
  Qp& qp = *to_qp(qpx);
  if (!begin_wqe(qp, hwif::WqeOpcode::kRdmaWriteImm)) return;
  set_imm(qp, imm);
  add_seg(qp, make_raddr(remote_addr, rkey));
}

void wr_rdma_read(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  Qp& qp = *to_qp(qpx);
  if (begin_wqe(qp, hwif::WqeOpcode::kRdmaRead)) add_seg(qp, make_raddr(remote_addr, rkey));
}

void wr_atomic_cmp_swp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t compare, uint64_t swap) {
  Qp& qp = *to_qp(qpx);
  if (begin_wqe(qp, hwif::WqeOpcode::kAtomicCs) && add_seg(qp, make_raddr(remote_addr, rkey)))
    add_seg(qp, make_atomic(swap, compare));
}

void wr_atomic_fetch_add(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
  Qp& qp = *to_qp(qpx);
  if (begin_wqe(qp, hwif::WqeOpcode::kAtomicFa) && add_seg(qp, make_raddr(remote_addr, rkey)))
    add_seg(qp, make_atomic(add, 0));
}

// ---- setters ----

void wr_set_ud_addr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  Qp& qp = *to_qp(qpx);
  WrBuilder& b = qp.wr;
  if (b.err != 0) return;
  if (!b.open || !b.need_ud_addr || ah == nullptr) {
    b.err = EINVAL;
    return;
  }
  store_as(b.dgram_ptr, make_datagram(*to_ah(ah), remote_qpn, remote_qkey));  // ctrl+48 stays in the BB
  b.need_ud_addr = false;
  maybe_finish(qp);
}

void wr_set_xrc_srqn(ibv_qp_ex* qpx, uint32_t remote_srqn) {
  Qp& qp = *to_qp(qpx);
  WrBuilder& b = qp.wr;
  if (b.err != 0) return;
  if (!b.open || !b.need_xrc_srqn) {
    b.err = EINVAL;
    return;
  }
  store_as(b.dgram_ptr, make_xrc(remote_srqn));  // ctrl+16 stays in the BB
  b.need_xrc_srqn = false;
  maybe_finish(qp);
}

void wr_set_sge_list(ibv_qp_ex* qpx, size_t num_sge, const ibv_sge* sg) {
  Qp& qp = *to_qp(qpx);
  if (!open_for_data(qp)) return;
  WrBuilder& b = qp.wr;
  if (num_sge > qp.sq.max_gs) {
    b.err = ENOMEM;  // as mlx5's wr_set_sge_list: "Num SGEs exceeds the maximum"
    return;
  }
  if (is_atomic(b.ctrl.opcode())) {
    if (num_sge != 1) {
      b.err = EINVAL;
      return;
    }
    if (!add_seg(qp, make_data(sg[0].lkey, sg[0].addr, kAtomicOperandBytes))) return;
  } else {
    for (size_t i = 0; i < num_sge; ++i) {
      if (sg[i].length != 0 && !add_seg(qp, make_data(sg[i].lkey, sg[i].addr, sg[i].length))) return;
    }
  }
  b.data_set = true;
  maybe_finish(qp);
}

// wr_set_sge_list() of one SGE, without the list.
void wr_set_sge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  Qp& qp = *to_qp(qpx);
  if (!open_for_data(qp)) return;
  WrBuilder& b = qp.wr;
  if (qp.sq.max_gs < 1) {
    b.err = ENOMEM;
    return;
  }
  if (is_atomic(b.ctrl.opcode())) length = kAtomicOperandBytes;
  if (length != 0 && !add_seg(qp, make_data(lkey, addr, length))) return;
  b.data_set = true;
  maybe_finish(qp);
}

void wr_set_inline_data_list(ibv_qp_ex* qpx, size_t num_buf, const ibv_data_buf* bufs) {
  Qp& qp = *to_qp(qpx);
  if (!open_for_data(qp)) return;
  WrBuilder& b = qp.wr;
  const hwif::WqeOpcode op = b.ctrl.opcode();
  if (is_atomic(op) || op == hwif::WqeOpcode::kRdmaRead) {
    b.err = EINVAL;
    return;
  }
  uint64_t total = 0;
  for (size_t i = 0; i < num_buf; ++i) total += bufs[i].length;
  if (total > qp.sq.max_inline) {
    b.err = ENOMEM;
    return;
  }
  if (total > 0) {
    const uint32_t ds = static_cast<uint32_t>((sizeof(hwif::InlineHdr) + total + hwif::kDsBytes - 1) / hwif::kDsBytes);
    if ((b.ds + ds) * hwif::kDsBytes > qp.sq.wqe_size) {
      b.err = EINVAL;
      return;
    }
    sq_put_inline(sq_ring(qp.sq), b.data_ptr, static_cast<uint32_t>(total), [&](auto&& copy) {
      for (size_t i = 0; i < num_buf; ++i) copy(bufs[i].addr, bufs[i].length);
    });
    b.ds += ds;
  }
  b.cur_inline = true;
  b.data_set = true;
  maybe_finish(qp);
}

void wr_set_inline_data(ibv_qp_ex* qpx, void* addr, size_t length) {
  const ibv_data_buf buf{addr, length};
  wr_set_inline_data_list(qpx, 1, &buf);
}

// ---- batch ----

void wr_start(ibv_qp_ex* qpx) {
  Qp& qp = *to_qp(qpx);
  qp.sq.lock.lock();  // released by wr_complete or wr_abort
  WrBuilder& b = qp.wr;
  b = WrBuilder{};
  b.start_head = qp.sq.head;
  b.start_cur_post = qp.sq.cur_post;
  const uint8_t s = qp.state.load(std::memory_order_relaxed);
  if (s == IBV_QPS_RESET || s == IBV_QPS_INIT) b.err = EINVAL;
}

int wr_complete(ibv_qp_ex* qpx) {
  Qp& qp = *to_qp(qpx);
  WrBuilder& b = qp.wr;
  int err = b.err;
  if (err == 0 && b.open) err = EINVAL;  // the last WQE never got its data/address
  if (err != 0) {
    qp.sq.cur_post = b.start_cur_post;
  } else if (b.nreq != 0) {
    ring_send_doorbell(qp, b.nreq, b.last_idx, b.last_ds, b.last_inline);
  }
  b = WrBuilder{};
  qp.sq.lock.unlock();
  return err;
}

void wr_abort(ibv_qp_ex* qpx) {
  Qp& qp = *to_qp(qpx);
  qp.sq.cur_post = qp.wr.start_cur_post;
  qp.wr = WrBuilder{};
  qp.sq.lock.unlock();
}

}  // namespace

void qp_ex_install_ops(Qp* qp) {
  ibv_qp_ex& x = qp->qpx;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
  x.wr_send = wr_send;
  x.wr_send_imm = wr_send_imm;
  x.wr_send_inv = wr_send_inv;
  x.wr_bind_mw = wr_bind_mw;
  x.wr_local_inv = wr_local_inv;
  x.wr_rdma_write = wr_rdma_write;
  x.wr_rdma_write_imm = wr_rdma_write_imm;
  x.wr_rdma_read = wr_rdma_read;
  x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  x.wr_atomic_fetch_add = wr_atomic_fetch_add;
  x.wr_set_ud_addr = wr_set_ud_addr;
  x.wr_set_xrc_srqn = wr_set_xrc_srqn;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
}

}  // namespace softhca::driver
