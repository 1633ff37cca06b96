#include "cm/actions.h"

namespace softhca::cm {

std::string_view to_string(EventType t) {
  switch (t) {
    case EventType::kReqReceived: return "REQ received";
    case EventType::kRepReceived: return "REP received";
    case EventType::kEstablished: return "established";
    case EventType::kRejected: return "rejected";
    case EventType::kMraReceived: return "MRA received";
    case EventType::kUnreachable: return "unreachable";
    case EventType::kDisconnectRequested: return "disconnect requested";
    case EventType::kDisconnected: return "disconnected";
    case EventType::kTimewaitExit: return "timewait exit";
    case EventType::kSidrReqReceived: return "SIDR_REQ received";
    case EventType::kSidrRepReceived: return "SIDR_REP received";
  }
  return "?";
}

}  // namespace softhca::cm
