// The QP state machine of IBA 10.3 / 11.2.5.2: which transitions exist and which attributes each
// transition requires and allows, per transport (the table Linux encodes as qp_state_table).
// Pure: no device state, only the rule.
#pragma once
#include <cstdint>

#include "hwif/cmd.h"

namespace softhca::hca {

struct TransitionRule {
  bool valid = false;
  uint32_t required = 0;  // hwif::QpAttrMask bits beyond kQpState
  uint32_t optional = 0;
};

TransitionRule transition_rule(hwif::QpType type, hwif::QpState from, hwif::QpState to);

// True when a modify with this mask from `current` is allowed (IBA rules only, not values):
// the transition exists, every required attribute is given, nothing outside required|optional,
// and kQpCurState (if given) names the current state and is allowed for it.
bool modify_is_allowed(hwif::QpType type, hwif::QpState current, uint32_t mask,
                       const hwif::QpAttributes& attr);

}  // namespace softhca::hca
