// Data path: post_send (WQE building, verbs-abi.md §6.1), post_recv and post_srq_recv (§6.2).
// No allocation, no logging, no lock but the queue's own.
//
// Who may touch what:
//  - post_send holds SendQueue::lock from the first WR to the doorbell. It writes WQEs into free
//    ring slots (sq_full: slots of retired WRs only, by the acquire load of tail), the wrid and
//    wqe_head entries poll_cq will read, and rings once for the whole list.
//  - post_recv holds RecvQueue::lock; post_srq_recv holds Srq::lock. Each publishes its WQEs with
//    a release store of its doorbell record counter, which is all the device reads.
// A WR that fails validation is not written (nothing of it reaches the ring index), *bad_wr points
// to it, and the WRs before it are rung as usual (as mlx5).
#include <cerrno>
#include <cstring>
#include <mutex>

#include "driver/objects.h"
#include "driver/provider.h"
#include "driver/wqe_ring.h"

namespace softhca::driver {
namespace {

struct SendPlan {
  hwif::WqeOpcode opcode = hwif::WqeOpcode::kNop;
  bool rdma = false;    // raddr segment
  bool atomic = false;  // raddr + atomic + the 8-byte result data segment
  bool bind = false;     // a BindSeg, no data
  bool no_data = false;  // bind, local invalidate
  bool use_inline = false;
  uint32_t inline_bytes = 0;
  uint32_t ds = 0;
};

// Validates one WR against the QP and computes its layout. 0 or a positive errno.
int plan_send(const Qp& qp, const ibv_send_wr& wr, SendPlan& p) {
  const SendQueue& sq = qp.sq;
  if (wr.num_sge < 0) return EINVAL;
  if (static_cast<uint32_t>(wr.num_sge) > sq.max_gs) return ENOMEM;  // as mlx5: "max gs exceeded"
  const bool connected = qp.type != hwif::QpType::kUd;
  const bool rc = qp.type == hwif::QpType::kRc || qp.type == hwif::QpType::kXrcIni;
  switch (wr.opcode) {
    case IBV_WR_SEND: p.opcode = hwif::WqeOpcode::kSend; break;
    case IBV_WR_SEND_WITH_IMM: p.opcode = hwif::WqeOpcode::kSendImm; break;
    case IBV_WR_RDMA_WRITE:
      if (!connected) return EINVAL;
      p.opcode = hwif::WqeOpcode::kRdmaWrite;
      p.rdma = true;
      break;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      if (!connected) return EINVAL;
      p.opcode = hwif::WqeOpcode::kRdmaWriteImm;
      p.rdma = true;
      break;
    case IBV_WR_RDMA_READ:
      if (!rc) return EINVAL;
      p.opcode = hwif::WqeOpcode::kRdmaRead;
      p.rdma = true;
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      if (!rc || wr.num_sge != 1) return EINVAL;
      p.opcode = wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? hwif::WqeOpcode::kAtomicCs : hwif::WqeOpcode::kAtomicFa;
      p.atomic = true;
      break;
    case IBV_WR_SEND_WITH_INV:
      if (!rc) return EINVAL;
      p.opcode = hwif::WqeOpcode::kSendInv;
      break;
    case IBV_WR_BIND_MW:
      if (!connected || wr.bind_mw.mw == nullptr) return EINVAL;
      p.opcode = hwif::WqeOpcode::kBindMw;
      p.bind = p.no_data = true;
      break;
    case IBV_WR_LOCAL_INV:
      if (!connected) return EINVAL;
      p.opcode = hwif::WqeOpcode::kLocalInv;
      p.no_data = true;
      break;
    default:
      return EINVAL;  // TSO, ATOMIC_WRITE, DRIVER1: not supported
  }
  if (!connected && wr.wr.ud.ah == nullptr) return EINVAL;

  uint32_t ds = 1 + (connected ? 0 : sizeof(hwif::DatagramSeg) / hwif::kDsBytes);
  if (qp.type == hwif::QpType::kXrcIni) ds += sizeof(hwif::XrcSeg) / hwif::kDsBytes;
  if (p.rdma) ds += 1;
  if (p.no_data) {
    ds += p.bind ? static_cast<uint32_t>(sizeof(hwif::BindSeg) / hwif::kDsBytes) : 0;
  } else if (p.atomic) {
    ds += 3;  // raddr, atomic, result data segment
  } else if ((wr.send_flags & IBV_SEND_INLINE) && wr.num_sge > 0 && p.opcode != hwif::WqeOpcode::kRdmaRead) {
    uint64_t total = 0;
    for (int i = 0; i < wr.num_sge; ++i) total += wr.sg_list[i].length;
    if (total > sq.max_inline) return ENOMEM;
    p.use_inline = true;
    p.inline_bytes = static_cast<uint32_t>(total);
    if (total > 0) ds += static_cast<uint32_t>((sizeof(hwif::InlineHdr) + total + hwif::kDsBytes - 1) / hwif::kDsBytes);
  } else {
    for (int i = 0; i < wr.num_sge; ++i) ds += wr.sg_list[i].length != 0 ? 1 : 0;
  }
  // Never larger than the slot the ring was sized for (an op the QP was not created for may be).
  if (ds * hwif::kDsBytes > sq.wqe_size) return EINVAL;
  p.ds = ds;
  return 0;
}

// Writes the planned WQE at sq.cur_post (caller holds the SQ lock and checked the room).
void write_send_wqe(Qp& qp, const ibv_send_wr& wr, const SendPlan& plan, uint32_t nreq) {
  SendQueue& sq = qp.sq;
  const uint32_t idx = sq.cur_post;
  const SqRing ring = sq_ring(sq);
  uint8_t* ctrl_p = sq_wqe(sq, idx);
  uint8_t* p = sq_advance(ring, ctrl_p, sizeof(hwif::CtrlSeg));
  if (qp.type == hwif::QpType::kUd) {
    p = sq_put(ring, p, make_datagram(*to_ah(wr.wr.ud.ah), wr.wr.ud.remote_qpn, wr.wr.ud.remote_qkey));
  } else if (qp.type == hwif::QpType::kXrcIni) {
    p = sq_put(ring, p, make_xrc(wr.qp_type.xrc.remote_srqn));
  }
  if (plan.bind) {
    p = sq_put(ring, p, make_bind(*wr.bind_mw.mw, wr.bind_mw.rkey, wr.bind_mw.bind_info));
  } else if (plan.no_data) {
    // a local invalidate: its key is in the control segment
  } else if (plan.atomic) {
    p = sq_put(ring, p, make_raddr(wr.wr.atomic.remote_addr, wr.wr.atomic.rkey));
    const bool cas = plan.opcode == hwif::WqeOpcode::kAtomicCs;
    p = sq_put(ring, p, make_atomic(cas ? wr.wr.atomic.swap : wr.wr.atomic.compare_add, cas ? wr.wr.atomic.compare_add : 0));
    p = sq_put(ring, p, make_data(wr.sg_list[0].lkey, wr.sg_list[0].addr, 8));
  } else {
    if (plan.rdma) p = sq_put(ring, p, make_raddr(wr.wr.rdma.remote_addr, wr.wr.rdma.rkey));
    if (plan.use_inline) {
      if (plan.inline_bytes > 0) {
        sq_put_inline(ring, p, plan.inline_bytes, [&](auto&& copy) {
          for (int i = 0; i < wr.num_sge; ++i) {
            const ibv_sge& s = wr.sg_list[i];
            copy(reinterpret_cast<const void*>(static_cast<uintptr_t>(s.addr)), s.length);
          }
        });
      }
    } else {
      for (int i = 0; i < wr.num_sge; ++i) {
        const ibv_sge& s = wr.sg_list[i];
        if (s.length != 0) p = sq_put(ring, p, make_data(s.lkey, s.addr, s.length));
      }
    }
  }
  hwif::CtrlSeg ctrl{};
  ctrl.set(plan.opcode, static_cast<uint16_t>(idx & 0xffff), qp.qpn, plan.ds, ctrl_flags(wr.send_flags, qp.sq_sig_all));
  if (plan.opcode == hwif::WqeOpcode::kSendImm || plan.opcode == hwif::WqeOpcode::kRdmaWriteImm) {
    std::memcpy(static_cast<void*>(&ctrl.imm), &wr.imm_data, sizeof(ctrl.imm));  // already in network order
  } else if (plan.opcode == hwif::WqeOpcode::kSendInv || plan.opcode == hwif::WqeOpcode::kLocalInv) {
    ctrl.imm = wr.invalidate_rkey;  // host order in the WR, big-endian in the WQE (as mlx5)
  }
  store_as(ctrl_p, ctrl);
  const uint32_t slot = idx & (sq.wqe_cnt - 1);
  sq.wrid[slot] = wr.wr_id;
  sq.wqe_head[slot] = sq.head + nreq;
}

bool send_allowed(uint8_t state) { return state != IBV_QPS_RESET && state != IBV_QPS_INIT; }

}  // namespace

int post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Qp& qp = *to_qp(ibqp);
  SendQueue& sq = qp.sq;
  std::lock_guard g(sq.lock);
  if (!send_allowed(qp.state.load(std::memory_order_relaxed))) {
    *bad_wr = wr;
    return EINVAL;
  }
  int err = 0;
  uint32_t nreq = 0;
  uint32_t last_idx = 0;
  uint32_t last_ds = 0;
  bool last_inline = false;
  for (; wr != nullptr; wr = wr->next, ++nreq) {
    if (sq_full(sq, nreq)) {
      err = ENOMEM;
      break;
    }
    SendPlan plan;
    if ((err = plan_send(qp, *wr, plan)) != 0) break;
    write_send_wqe(qp, *wr, plan, nreq);
    last_idx = sq.cur_post;
    last_ds = plan.ds;
    last_inline = plan.use_inline;
    sq.cur_post += ds_to_bbs(plan.ds);
  }
  if (err != 0) *bad_wr = wr;
  if (nreq != 0) ring_send_doorbell(qp, nreq, last_idx, last_ds, last_inline);
  return err;
}

int post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Qp& qp = *to_qp(ibqp);
  RecvQueue& rq = qp.rq;
  std::lock_guard g(rq.lock);
  if (qp.state.load(std::memory_order_relaxed) == IBV_QPS_RESET || qp.srq != nullptr) {
    *bad_wr = wr;
    return EINVAL;
  }
  int err = 0;
  uint32_t nreq = 0;
  const uint32_t tail = rq.tail.load(std::memory_order_acquire);
  for (; wr != nullptr; wr = wr->next, ++nreq) {
    if (rq.head + nreq - tail >= rq.wqe_cnt) {
      err = ENOMEM;
      break;
    }
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > rq.max_gs) {
      err = EINVAL;
      break;
    }
    const uint32_t idx = (rq.head + nreq) & (rq.wqe_cnt - 1);
    put_recv_sges(rq.buf.data() + (static_cast<size_t>(idx) << rq.log_stride), wr->sg_list, wr->num_sge, rq.max_gs);
    rq.wrid[idx] = wr->wr_id;
  }
  if (err != 0) *bad_wr = wr;
  if (nreq != 0) {
    rq.head += nreq;
    store_dbrec(qp.dbrec->rq_counter, rq.head & 0xffff);
  }
  return err;
}

int post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Srq& srq = *to_srq(ibsrq);
  std::lock_guard g(srq.lock);
  int err = 0;
  uint32_t nreq = 0;
  for (; wr != nullptr; wr = wr->next, ++nreq) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > srq.max_gs) {
      err = EINVAL;
      break;
    }
    if (srq.head == srq.tail) {  // only the sentinel is free
      err = ENOMEM;
      break;
    }
    const uint32_t idx = srq.head;
    uint8_t* wqe = srq_wqe(srq, idx);
    srq.head = load_as<hwif::SrqNextSeg>(wqe).next_wqe_index.get();
    put_recv_sges(wqe + sizeof(hwif::SrqNextSeg), wr->sg_list, wr->num_sge, srq.max_gs);
    srq.wrid[idx] = wr->wr_id;
  }
  if (err != 0) *bad_wr = wr;
  if (nreq != 0) {
    srq.counter += nreq;
    store_dbrec(srq.dbrec->counter, srq.counter & 0xffff);
  }
  return err;
}

}  // namespace softhca::driver
