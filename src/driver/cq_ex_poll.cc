// Data path of extended CQs (ibv_create_cq_ex): the ibv_cq_ex poll ops start_poll / next_poll /
// end_poll and the read_* functions of the completion polled last (verbs-abi.md §6.3 for the CQE).
// No allocation, no logging.
//
// Who may touch what: start_poll takes Cq::lock and, when it finds a completion, keeps it until
// end_poll (ENOENT from start_poll releases it: end_poll is not called then, ibv_create_cq_ex(3)).
// Between the two, the polling thread alone reads and writes cons_index, `cur` and `cur_ts`, as
// poll_cq does under the same lock (cq_poll.cc says what that lock covers). The consumer index is
// published at end_poll, so the device reuses the slots only after they were read.
#include <cerrno>

#include "driver/cq_ring.h"
#include "driver/objects.h"
#include "driver/wqe_ring.h"
#include "hwif/cqe.h"

namespace softhca::driver {
namespace {

Cq* of(ibv_cq_ex* c) { return reinterpret_cast<Cq*>(c); }

// Stands on the next completion, skipping CQEs of no known QP. Caller holds cq.lock.
int advance(Cq& cq) {
  for (;;) {
    const hwif::Cqe64* cqe = cqe_if_valid(cq, cq.cons_index);
    if (cqe == nullptr) return ENOENT;
    ++cq.cons_index;
    cq.consumed = true;
    if (!cqe_to_wc(cq, *cqe, cq.cur)) continue;
    const hwif::CqeOpcode op = cqe->opcode();
    // An error CQE has no timestamp field (hwif::ErrCqe64 uses those bytes).
    cq.cur_ts = op == hwif::CqeOpcode::kReqErr || op == hwif::CqeOpcode::kRespErr ? 0 : cqe->timestamp.get();
    cq.cqx.status = cq.cur.status;
    cq.cqx.wr_id = cq.cur.wr_id;
    return 0;
  }
}

void publish(Cq& cq) {
  if (!cq.consumed) return;
  store_dbrec(cq.dbrec->set_ci, cq.cons_index & 0xffffff);
  cq.consumed = false;
}

int start_poll(ibv_cq_ex* c, ibv_poll_cq_attr* attr) {
  if (attr == nullptr || attr->comp_mask != 0) return EINVAL;
  Cq& cq = *of(c);
  cq.lock.lock();
  const int ret = advance(cq);
  if (ret != 0) {
    publish(cq);  // CQEs of destroyed QPs were consumed
    cq.lock.unlock();
  }
  return ret;
}

int next_poll(ibv_cq_ex* c) { return advance(*of(c)); }

void end_poll(ibv_cq_ex* c) {
  Cq& cq = *of(c);
  publish(cq);
  cq.lock.unlock();
}

ibv_wc_opcode read_opcode(ibv_cq_ex* c) { return of(c)->cur.opcode; }
uint32_t read_vendor_err(ibv_cq_ex* c) { return of(c)->cur.vendor_err; }
uint32_t read_byte_len(ibv_cq_ex* c) { return of(c)->cur.byte_len; }
// The immediate in network order, or with IBV_WC_WITH_INV the invalidated R_Key (host order, the
// other member of ibv_wc's union), which ibv_wc_read_invalidated_rkey reads through this op.
__be32 read_imm_data(ibv_cq_ex* c) { return of(c)->cur.imm_data; }
uint32_t read_qp_num(ibv_cq_ex* c) { return of(c)->cur.qp_num; }
uint32_t read_src_qp(ibv_cq_ex* c) { return of(c)->cur.src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* c) { return of(c)->cur.wc_flags; }
uint32_t read_slid(ibv_cq_ex* c) { return of(c)->cur.slid; }
uint8_t read_sl(ibv_cq_ex* c) { return of(c)->cur.sl; }
uint8_t read_dlid_path_bits(ibv_cq_ex* c) { return of(c)->cur.dlid_path_bits; }
uint64_t read_completion_ts(ibv_cq_ex* c) { return of(c)->cur_ts; }
uint64_t read_completion_wallclock_ns(ibv_cq_ex* c) {
  const Cq& cq = *of(c);
  return cq.cur_ts == 0 ? 0 : static_cast<uint64_t>(static_cast<int64_t>(cq.cur_ts) + cq.wall_offset_ns);
}

}  // namespace

// Every reader the CQ can answer is installed, asked for or not (a reader of a field not asked for
// answers what the CQE holds: 0 for a timestamp); CVLAN, flow tag and tag-matching info cannot be
// asked for (create_cq_ex refuses them), so their readers stay NULL, as in mlx5.
void cq_ex_install_ops(Cq* cq) {
  ibv_cq_ex& x = cq->cqx;
  x.start_poll = start_poll;
  x.next_poll = next_poll;
  x.end_poll = end_poll;
  x.read_opcode = read_opcode;
  x.read_vendor_err = read_vendor_err;
  x.read_byte_len = read_byte_len;
  x.read_imm_data = read_imm_data;
  x.read_qp_num = read_qp_num;
  x.read_src_qp = read_src_qp;
  x.read_wc_flags = read_wc_flags;
  x.read_slid = read_slid;
  x.read_sl = read_sl;
  x.read_dlid_path_bits = read_dlid_path_bits;
  x.read_completion_ts = read_completion_ts;
  x.read_completion_wallclock_ns = read_completion_wallclock_ns;
  x.read_cvlan = nullptr;
  x.read_flow_tag = nullptr;
  x.read_tm_info = nullptr;
}

}  // namespace softhca::driver
