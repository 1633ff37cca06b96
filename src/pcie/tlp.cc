#include "pcie/tlp.h"

namespace softhca::pcie {

std::string_view to_string(TlpType t) {
  switch (t) {
    case TlpType::kMWr: return "MWr";
    case TlpType::kMRd: return "MRd";
    case TlpType::kCplD: return "CplD";
  }
  return "?";
}

std::string_view to_string(Direction d) {
  return d == Direction::kDownstream ? "downstream" : "upstream";
}

std::string_view to_string(TlpCause c) {
  switch (c) {
    case TlpCause::kDoorbell: return "doorbell";
    case TlpCause::kBlueFlame: return "blueflame";
    case TlpCause::kCqArm: return "cq_arm";
    case TlpCause::kWqeRead: return "wqe_read";
    case TlpCause::kPayloadRead: return "payload_read";
    case TlpCause::kRecvWqeRead: return "recv_wqe_read";
    case TlpCause::kDbRecRead: return "dbrec_read";
    case TlpCause::kPayloadWrite: return "payload_write";
    case TlpCause::kAtomic: return "atomic";
    case TlpCause::kCqeWrite: return "cqe_write";
    case TlpCause::kEqeWrite: return "eqe_write";
    case TlpCause::kInterrupt: return "interrupt";
    case TlpCause::kEqDoorbell: return "eq_doorbell";
    case TlpCause::kDmWrite: return "dm_write";
    case TlpCause::kDmRead: return "dm_read";
  }
  return "?";
}

}  // namespace softhca::pcie
