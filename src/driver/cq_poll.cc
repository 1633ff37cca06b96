// Data path of completion queues: poll_cq (CQE -> ibv_wc, verbs-abi.md §6.3) and req_notify_cq
// (arming through the CQ doorbell record and the UAR's CQ doorbell). No allocation, no logging.
//
// Who may touch what: everything under Cq::lock. While it is held:
//  - the QP found by QPN stays alive (destroy_qp cleans and unregisters under the same lock);
//  - the SQ's wrid/wqe_head entries of a completed WQE are read without the SQ lock: post_send
//    wrote them before ringing, and the device's CQE (acquire on op_own) comes after the ring;
//  - SendQueue::tail and RecvQueue::tail are stored with release so that post_send/post_recv
//    (acquire) may reuse the slots; poll_cq is their only writer besides a reset to RESET;
//  - SRQ WQEs are freed under the SRQ lock (lock order CQ -> SRQ).
// The consumer index is published with a release store of CqDbRec.set_ci after the batch, so the
// device sees the slots free only after they were read.
#include <cstring>
#include <mutex>

#include "driver/cq_ring.h"
#include "driver/objects.h"
#include "driver/provider.h"
#include "driver/wqe_ring.h"
#include "hwif/cqe.h"
#include "hwif/uar.h"

namespace softhca::driver {
namespace {

constexpr uint32_t kAtomicResultBytes = 8;  // byte_len of an atomic completion (mlx5)

ibv_wc_status syndrome_to_status(uint8_t syndrome) {
  using S = hwif::CqeSyndrome;
  switch (static_cast<S>(syndrome)) {
    case S::kLocLenErr: return IBV_WC_LOC_LEN_ERR;
    case S::kLocQpOpErr: return IBV_WC_LOC_QP_OP_ERR;
    case S::kLocProtErr: return IBV_WC_LOC_PROT_ERR;
    case S::kWrFlushErr: return IBV_WC_WR_FLUSH_ERR;
    case S::kMwBindErr: return IBV_WC_MW_BIND_ERR;
    case S::kBadRespErr: return IBV_WC_BAD_RESP_ERR;
    case S::kLocAccessErr: return IBV_WC_LOC_ACCESS_ERR;
    case S::kRemInvReqErr: return IBV_WC_REM_INV_REQ_ERR;
    case S::kRemAccessErr: return IBV_WC_REM_ACCESS_ERR;
    case S::kRemOpErr: return IBV_WC_REM_OP_ERR;
    case S::kRetryExcErr: return IBV_WC_RETRY_EXC_ERR;
    case S::kRnrRetryExcErr: return IBV_WC_RNR_RETRY_EXC_ERR;
    case S::kRemAbortErr: return IBV_WC_REM_ABORT_ERR;
  }
  return IBV_WC_GENERAL_ERR;
}

// Requester: the CQE's wqe_counter names the completed WQE; with selective signalling every
// earlier WQE retires with it.
void retire_send(Qp& qp, uint16_t wqe_counter, ibv_wc& wc) {
  SendQueue& sq = qp.sq;
  const uint32_t idx = wqe_counter & (sq.wqe_cnt - 1);
  wc.wr_id = sq.wrid[idx];
  sq.tail.store(sq.wqe_head[idx] + 1, std::memory_order_release);
}

// Responder: an SRQ WQE by wqe_counter (`srq`: the QP's, or the XRC SRQ the CQE names), else
// the next RQ WQE in order.
void retire_recv(Qp* qp, Srq* srq, uint16_t wqe_counter, ibv_wc& wc) {
  if (srq != nullptr) {
    std::lock_guard g(srq->lock);
    const uint32_t idx = wqe_counter & (srq->wqe_cnt - 1);
    wc.wr_id = srq->wrid[idx];
    srq_free_wqe(srq, idx);
    return;
  }
  RecvQueue& rq = qp->rq;
  const uint32_t tail = rq.tail.load(std::memory_order_relaxed);
  wc.wr_id = rq.wrid[tail & (rq.wqe_cnt - 1)];
  rq.tail.store(tail + 1, std::memory_order_release);
}

void requester_opcode(const hwif::Cqe64& cqe, ibv_wc& wc) {
  using O = hwif::WqeOpcode;
  switch (static_cast<O>(cqe.sop_drop_qpn.get() >> 24)) {
    case O::kRdmaWriteImm:
      wc.wc_flags |= IBV_WC_WITH_IMM;
      [[fallthrough]];
    case O::kRdmaWrite:
      wc.opcode = IBV_WC_RDMA_WRITE;
      break;
    case O::kSendImm:
      wc.wc_flags |= IBV_WC_WITH_IMM;
      [[fallthrough]];
    case O::kSend:
    case O::kSendInv:
    case O::kNop:
      wc.opcode = IBV_WC_SEND;
      break;
    case O::kRdmaRead:
      wc.opcode = IBV_WC_RDMA_READ;
      wc.byte_len = cqe.byte_cnt.get();
      break;
    case O::kAtomicCs:
      wc.opcode = IBV_WC_COMP_SWAP;
      wc.byte_len = kAtomicResultBytes;
      break;
    case O::kAtomicFa:
      wc.opcode = IBV_WC_FETCH_ADD;
      wc.byte_len = kAtomicResultBytes;
      break;
    case O::kBindMw:
      wc.opcode = IBV_WC_BIND_MW;
      break;
    case O::kLocalInv:
      wc.opcode = IBV_WC_LOCAL_INV;
      break;
  }
}

void responder_fields(const hwif::Cqe64& cqe, ibv_wc& wc) {
  wc.byte_len = cqe.byte_cnt.get();
  switch (cqe.opcode()) {
    case hwif::CqeOpcode::kRespWrImm:
      wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
      wc.wc_flags |= IBV_WC_WITH_IMM;
      std::memcpy(&wc.imm_data, &cqe.imm_inval_pkey, sizeof(wc.imm_data));  // network order, as carried
      break;
    case hwif::CqeOpcode::kRespSendImm:
      wc.opcode = IBV_WC_RECV;
      wc.wc_flags |= IBV_WC_WITH_IMM;
      std::memcpy(&wc.imm_data, &cqe.imm_inval_pkey, sizeof(wc.imm_data));
      break;
    case hwif::CqeOpcode::kRespSendInv:
      wc.opcode = IBV_WC_RECV;
      wc.wc_flags |= IBV_WC_WITH_INV;
      wc.invalidated_rkey = cqe.imm_inval_pkey.get();
      break;
    default:
      wc.opcode = IBV_WC_RECV;
      wc.pkey_index = static_cast<uint16_t>(cqe.imm_inval_pkey.get() & 0xffff);
      break;
  }
  const uint32_t flags_rqpn = cqe.flags_rqpn.get();
  wc.src_qp = flags_rqpn & 0xffffff;
  wc.sl = static_cast<uint8_t>((flags_rqpn >> 24) & 0xf);
  if (flags_rqpn & hwif::kCqeGrhBits) wc.wc_flags |= IBV_WC_GRH;
  wc.slid = cqe.slid.get();
  wc.dlid_path_bits = cqe.ml_path & 0x7f;
}

}  // namespace

bool cqe_to_wc(const Cq& cq, const hwif::Cqe64& cqe, ibv_wc& wc) {
  const uint32_t qpn = cqe_qpn(cqe);
  Qp* qp = cq.ctx->qps.find(qpn);
  Srq* srq = qp != nullptr ? qp->srq : nullptr;
  if (cqe_is_responder(cqe.opcode()) && (qp == nullptr || qp->type == hwif::QpType::kXrcTgt)) {
    // An XRC receive: its TGT QP may be another process's; the CQE names the SRQ (ours).
    srq = cq.ctx->srqs.find(cqe_srqn(cqe));
    if (srq == nullptr || srq->xrcd == nullptr) return false;
  } else if (qp == nullptr) {
    return false;
  }
  wc = ibv_wc{};
  wc.qp_num = qpn;
  const uint16_t wqe_counter = cqe.wqe_counter.get();
  switch (cqe.opcode()) {
    case hwif::CqeOpcode::kReq:
      wc.status = IBV_WC_SUCCESS;
      retire_send(*qp, wqe_counter, wc);
      requester_opcode(cqe, wc);
      return true;
    case hwif::CqeOpcode::kReqErr:
    case hwif::CqeOpcode::kRespErr: {
      const auto err = load_as<hwif::ErrCqe64>(&cqe);
      wc.status = syndrome_to_status(err.syndrome);
      wc.vendor_err = err.vendor_err_synd;
      if (cqe.opcode() == hwif::CqeOpcode::kReqErr) {
        retire_send(*qp, wqe_counter, wc);
      } else {
        retire_recv(qp, srq, wqe_counter, wc);
        wc.opcode = IBV_WC_RECV;
      }
      return true;
    }
    case hwif::CqeOpcode::kRespWrImm:
    case hwif::CqeOpcode::kRespSend:
    case hwif::CqeOpcode::kRespSendImm:
    case hwif::CqeOpcode::kRespSendInv:
      wc.status = IBV_WC_SUCCESS;
      retire_recv(qp, srq, wqe_counter, wc);
      responder_fields(cqe, wc);
      return true;
    case hwif::CqeOpcode::kInvalid:
      break;
  }
  return false;  // an opcode this driver does not know: consumed and not reported
}

int poll_cq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  Cq* cq = to_cq(ibcq);
  std::lock_guard g(cq->lock);
  int n = 0;
  bool consumed = false;
  while (n < num_entries) {
    hwif::Cqe64* cqe = cqe_if_valid(*cq, cq->cons_index);
    if (cqe == nullptr) break;
    ++cq->cons_index;
    consumed = true;
    if (cqe_to_wc(*cq, *cqe, wc[n])) ++n;
  }
  if (consumed) store_dbrec(cq->dbrec->set_ci, cq->cons_index & 0xffffff);
  return n;
}

// Arms the CQ for the next (solicited) completion (mlx5_arm_cq): the arm word goes to the
// doorbell record, then to the CQ doorbell as {arm word, cqn}, big-endian. The sequence number
// sn = arm_sn & 3 tells the device which arm request this is; get_cq_event advances arm_sn.
int req_notify_cq(ibv_cq* ibcq, int solicited_only) {
  Cq* cq = to_cq(ibcq);
  std::lock_guard g(cq->lock);
  const uint32_t sn = cq->arm_sn.load(std::memory_order_relaxed) & 3;
  const uint32_t cmd = solicited_only ? hwif::kCqArmSolicited : 0;
  const uint32_t arm = (sn << 28) | cmd | (cq->cons_index & 0xffffff);
  store_dbrec(cq->dbrec->arm, arm);
  struct {
    Be32 hi;
    Be32 lo;
  } db{Be32(arm), Be32(cq->cqn)};
  static_assert(sizeof(db) == hwif::kDoorbellBytes);
  const Context& ctx = *cq->ctx;
  ctx.link.host_port->write_doorbell(hwif::uar_page_offset(ctx.link.uar_index) + hwif::kCqDoorbellOffset, &db,
                                     pcie::TlpCause::kCqArm);
  return 0;
}

}  // namespace softhca::driver
