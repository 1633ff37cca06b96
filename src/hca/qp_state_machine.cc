#include "hca/qp_state_machine.h"

namespace softhca::hca {

using hwif::QpState;
using hwif::QpType;
using namespace hwif;  // QpAttrMask bits

namespace {

struct PerType {
  uint32_t ud, uc, rc;
  [[nodiscard]] uint32_t of(QpType t) const { return t == QpType::kUd ? ud : t == QpType::kUc ? uc : rc; }
};

constexpr uint32_t kUcRtrReq = kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn;
constexpr uint32_t kUcRtsOpt = kQpCurState | kQpAltPath | kQpAccessFlags | kQpPathMigState;

TransitionRule rule(bool valid, PerType req, PerType opt, QpType t) {
  return TransitionRule{valid, req.of(t), opt.of(t)};
}

// XRC's INI (a requester only) and TGT (a responder only) halves differ from RC where a
// transition sets up one direction: what Linux's qp_state_table lists for IB_QPT_XRC_INI and
// IB_QPT_XRC_TGT. Elsewhere they follow RC. Sets *rule and returns true for those transitions.
bool xrc_rule(QpType t, QpState from, QpState to, TransitionRule* rule) {
  const bool ini = t == QpType::kXrcIni;
  if (from == QpState::kInit && to == QpState::kRtr) {
    const uint32_t req = kUcRtrReq | (ini ? 0 : kQpMaxDestRdAtomic | kQpMinRnrTimer);
    *rule = TransitionRule{true, req, kQpAltPath | kQpAccessFlags | kQpPkeyIndex};
    return true;
  }
  if (from == QpState::kRtr && to == QpState::kRts) {
    const uint32_t req = ini ? kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpSqPsn | kQpMaxQpRdAtomic
                             : kQpTimeout | kQpSqPsn;
    *rule = TransitionRule{true, req, kUcRtsOpt | (ini ? 0u : static_cast<uint32_t>(kQpMinRnrTimer))};
    return true;
  }
  return false;
}

}  // namespace

TransitionRule transition_rule(QpType t, QpState from, QpState to) {
  constexpr PerType none{0, 0, 0};
  if (TransitionRule x; is_xrc(t) && xrc_rule(t, from, to, &x)) return x;
  // Any state may go to RESET or ERR (IBA 10.3.1); RESET->RESET is a no-op.
  if (to == QpState::kReset || to == QpState::kErr) return {true, 0, 0};
  switch (from) {
    case QpState::kReset:
      if (to == QpState::kInit)
        return rule(true,
                    {kQpPkeyIndex | kQpPort | kQpQkey, kQpPkeyIndex | kQpPort | kQpAccessFlags,
                     kQpPkeyIndex | kQpPort | kQpAccessFlags},
                    none, t);
      break;
    case QpState::kInit:
      if (to == QpState::kInit)
        return rule(true, none,
                    {kQpPkeyIndex | kQpPort | kQpQkey, kQpPkeyIndex | kQpPort | kQpAccessFlags,
                     kQpPkeyIndex | kQpPort | kQpAccessFlags},
                    t);
      if (to == QpState::kRtr)
        return rule(true, {0, kUcRtrReq, kUcRtrReq | kQpMaxDestRdAtomic | kQpMinRnrTimer},
                    {kQpPkeyIndex | kQpQkey, kQpAltPath | kQpAccessFlags | kQpPkeyIndex,
                     kQpAltPath | kQpAccessFlags | kQpPkeyIndex},
                    t);
      break;
    case QpState::kRtr:
      if (to == QpState::kRts)
        return rule(true,
                    {kQpSqPsn, kQpSqPsn,
                     kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpSqPsn | kQpMaxQpRdAtomic},
                    {kQpCurState | kQpQkey, kUcRtsOpt, kUcRtsOpt | kQpMinRnrTimer}, t);
      break;
    case QpState::kRts:
      if (to == QpState::kRts)
        return rule(true, none, {kQpCurState | kQpQkey, kUcRtsOpt, kUcRtsOpt | kQpMinRnrTimer}, t);
      if (to == QpState::kSqd) return {true, 0, kQpEnSqdAsyncNotify};
      break;
    case QpState::kSqd:
      if (to == QpState::kRts)
        return rule(true, none, {kQpCurState | kQpQkey, kUcRtsOpt, kUcRtsOpt | kQpMinRnrTimer}, t);
      if (to == QpState::kSqd)
        return rule(true, none,
                    {kQpPkeyIndex | kQpQkey,
                     kQpAv | kQpAltPath | kQpAccessFlags | kQpPkeyIndex | kQpPathMigState,
                     kQpPort | kQpAv | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic |
                         kQpMaxDestRdAtomic | kQpAltPath | kQpAccessFlags | kQpPkeyIndex |
                         kQpMinRnrTimer | kQpPathMigState},
                    t);
      break;
    case QpState::kSqe:
      if (to == QpState::kRts)
        return rule(true, none, {kQpCurState | kQpQkey, kQpCurState | kQpAccessFlags, 0}, t);
      break;
    case QpState::kErr:
      break;
  }
  return {};
}

bool modify_is_allowed(QpType type, QpState current, uint32_t mask, const QpAttributes& attr) {
  if (mask & kQpCurState) {
    const bool cur_ok = current == QpState::kRtr || current == QpState::kRts ||
                        current == QpState::kSqd || current == QpState::kSqe;
    if (!cur_ok || attr.cur_state != current) return false;
  }
  const QpState target = (mask & kQpState) ? attr.state : current;
  const TransitionRule r = transition_rule(type, current, target);
  if (!r.valid) return false;
  const uint32_t given = mask & ~static_cast<uint32_t>(kQpState);
  if ((given & r.required) != r.required) return false;
  return (given & ~(r.required | r.optional)) == 0;
}

}  // namespace softhca::hca
