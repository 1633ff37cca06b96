// CQE ring helpers shared by poll_cq and CQ cleaning (verbs-abi.md §6.3 "Ownership").
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

}  // namespace softhca::driver
