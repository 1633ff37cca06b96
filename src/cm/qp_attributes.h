// The QP attributes each end of an RC/UC connection takes from the REQ and REP (rdmacm.md 4.12, as
// the Linux ib_cm computes them), as plain numbers for the library above to put into ibv_qp_attr:
// the cm layer does not include verbs headers. min_rnr_timer is not carried by the CM (rdma_cm uses
// 0); access flags and P_Key index are the caller's.
#pragma once
#include <cstdint>

#include "base/psn.h"
#include "base/strong_id.h"
#include "cm/messages.h"

namespace softhca::cm {

enum class Side : uint8_t { kActive, kPassive };  // sent the REQ / sent the REP

struct QpAttributes {
  // RTR
  Qpn dest_qp_num;
  Psn rq_psn;
  uint8_t path_mtu = 0;            // IB MTU enum (ibv_mtu: 1 = 256 ... 5 = 4096)
  uint8_t max_dest_rd_atomic = 0;  // responder resources
  // RTS
  Psn sq_psn;
  uint8_t max_rd_atomic = 0;       // initiator depth
  uint8_t retry_cnt = 0;
  uint8_t rnr_retry = 0;
  uint8_t timeout = 0;             // local ACK timeout exponent (4.096 us * 2^x)
  // Address vector toward the peer (RoCE: is_global, GRH fields)
  Gid dgid{};
  Gid sgid{};                      // our GID: the caller finds its index
  uint32_t flow_label = 0;
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint8_t sl = 0;
  uint16_t pkey = 0;
  bool operator==(const QpAttributes&) const = default;
};

// side's attributes for the connection of req and rep. The timeout is the REQ's primary Local ACK
// Timeout on both sides (an rdma_cm ACK_TIMEOUT option overrides it above this layer).
QpAttributes qp_attributes(Side side, const Req& req, const Rep& rep);

}  // namespace softhca::cm
