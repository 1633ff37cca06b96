// Service ID resolution for UD (IBA 12.11; rdmacm.md 4.7), sans-I/O like connection.h: the asking
// side's SidrRequest (SIDR_REQ, retransmitted until a SIDR_REP or the retries run out) and the
// SIDR_REP an answering side builds. The answering side keeps no state beyond ConnectionTable's
// duplicate filter. Time is integer picoseconds from the caller.
#pragma once
#include <cstdint>
#include <optional>

#include "base/units.h"
#include "cm/actions.h"
#include "cm/mad_codec.h"
#include "cm/timers.h"

namespace softhca::cm {

class SidrRequest {
 public:
  enum class State : uint8_t { kIdle, kReqSent, kDone };

  // tid_high: the SIDR_REQ gets TransactionID tid_high << 32 | request_id.
  SidrRequest(uint32_t request_id, uint32_t tid_high) : request_id_(request_id), tid_high_(tid_high) {}

  // Idle -> REQ sent: sends req (its request id replaced by this one's), resent every timeout up to
  // max_retries more times. rdma_cm: 4096 ms, 15 retries.
  Actions start(Picoseconds now, const SidrReq& req, Picoseconds timeout = kCmaSidrTimeout,
                uint8_t max_retries = kCmaMaxCmRetries, uint32_t attribute_modifier = 0);
  // A SIDR_REP for this request -> done, event kSidrRepReceived (its status says whether the service
  // was found: rdma_cm reports a non-zero one as UNREACHABLE). Anything else is dropped.
  Actions receive(Picoseconds now, const CmMad& mad);
  // Resends, or after the last try -> done with event kUnreachable (ETIMEDOUT).
  Actions on_timer(Picoseconds now);

  [[nodiscard]] State state() const { return state_; }
  [[nodiscard]] uint32_t request_id() const { return request_id_; }
  [[nodiscard]] std::optional<Picoseconds> deadline() const { return deadline_; }

 private:
  Actions done(Actions a) const;

  uint32_t request_id_;
  uint32_t tid_high_;
  State state_ = State::kIdle;
  std::optional<Picoseconds> deadline_;
  Picoseconds timeout_{0};
  uint8_t retries_left_ = 0;
  MadBytes mad_{};
};

// The SIDR_REP answering req: request id and service ID echoed, the given status, QPN and Q_Key.
SidrRep make_sidr_rep(const SidrReq& req, SidrStatus status, Qpn qpn = Qpn(0), uint32_t qkey = 0);
// The MAD of rep answering a SIDR_REQ of TransactionID tid (SIDR_REP reuses it).
MadBytes encode_sidr_rep(uint64_t tid, const SidrRep& rep, uint32_t attribute_modifier = 0);

}  // namespace softhca::cm
