#include "hca/device_stats.h"

namespace softhca::hca {

std::string_view to_string(DropReason r) {
  switch (r) {
    case DropReason::kMalformed: return "malformed";
    case DropReason::kWrongLid: return "wrong_lid";
    case DropReason::kUnknownQp: return "unknown_qp";
    case DropReason::kWrongTransport: return "wrong_transport";
    case DropReason::kBadPkey: return "bad_pkey";
    case DropReason::kBadQkey: return "bad_qkey";
    case DropReason::kNoReceiveWqe: return "no_receive_wqe";
    case DropReason::kPsnOutOfWindow: return "psn_out_of_window";
    case DropReason::kCount: break;
  }
  return "?";
}

}  // namespace softhca::hca
