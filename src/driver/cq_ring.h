// CQE ring helpers shared by poll_cq, the ibv_cq_ex poll ops and CQ cleaning (verbs-abi.md §6.3 "Ownership").
// Caller holds Cq::lock. The device writes a CQE's 63 other bytes before op_own (release on its
// side); the acquire load of op_own here makes them visible before they are read.
#pragma once
#include <atomic>
#include <cstdint>

#include "driver/objects.h"
#include "hwif/cqe.h"

namespace softhca::driver {

inline hwif::Cqe64* cqe_at(const Cq& cq, uint32_t index) {
  return reinterpret_cast<hwif::Cqe64*>(cq.ring.data()) + (index & ((1u << cq.log_nent) - 1));
}

// The CQE at free-running index `index` if software owns it (opcode valid and owner bit equal
// to the pass number & 1), else nullptr.
inline hwif::Cqe64* cqe_if_valid(const Cq& cq, uint32_t index) {
  hwif::Cqe64* cqe = cqe_at(cq, index);
  const uint8_t op_own = std::atomic_ref<uint8_t>(cqe->op_own).load(std::memory_order_acquire);
  const bool sw_owner = (op_own & hwif::kCqeOwnerBit) == ((index >> cq.log_nent) & 1);
  if ((op_own >> 4) == static_cast<uint8_t>(hwif::CqeOpcode::kInvalid) || !sw_owner) return nullptr;
  return cqe;
}

inline bool cqe_is_responder(hwif::CqeOpcode op) {
  switch (op) {
    case hwif::CqeOpcode::kRespWrImm:
    case hwif::CqeOpcode::kRespSend:
    case hwif::CqeOpcode::kRespSendImm:
    case hwif::CqeOpcode::kRespSendInv:
    case hwif::CqeOpcode::kRespErr:
      return true;
    default:
      return false;
  }
}

inline uint32_t cqe_qpn(const hwif::Cqe64& cqe) { return cqe.sop_drop_qpn.get() & 0xffffff; }
// The SRQ a responder CQE's WQE came from (success and error CQEs keep it at the same offset);
// 0 for none.
inline uint32_t cqe_srqn(const hwif::Cqe64& cqe) { return cqe.srqn_uidx.get() & 0xffffff; }

// Fills wc from one CQE and retires its WQE (cq_poll.cc). False when the CQE belongs to no known
// QP or has an unknown opcode: consumed and not reported.
bool cqe_to_wc(const Cq& cq, const hwif::Cqe64& cqe, ibv_wc& wc);

// Fills the ibv_cq_ex poll and read ops of a CQ made by create_cq_ex (cq_ex_poll.cc).
void cq_ex_install_ops(Cq* cq);

}  // namespace softhca::driver
