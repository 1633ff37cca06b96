#include "hca/qp_state_machine.h"

#include <gtest/gtest.h>

namespace softhca::hca {
namespace {

using hwif::QpAttributes;
using hwif::QpState;
using hwif::QpType;

QpAttributes to(QpState s) {
  QpAttributes a;
  a.state = s;
  return a;
}

// The masks the ibverbs pingpong programs use (verbs-abi.md §4).
TEST(QpStateMachine, RcPingpongMasksWalkResetToRts) {
  EXPECT_TRUE(modify_is_allowed(QpType::kRc, QpState::kReset, 0x39, to(QpState::kInit)));
  EXPECT_TRUE(modify_is_allowed(QpType::kRc, QpState::kInit, 0x129181, to(QpState::kRtr)));
  EXPECT_TRUE(modify_is_allowed(QpType::kRc, QpState::kRtr, 0x12e01, to(QpState::kRts)));
}

TEST(QpStateMachine, UcAndUdPingpongMasksAreAccepted) {
  EXPECT_TRUE(modify_is_allowed(QpType::kUc, QpState::kReset, 0x39, to(QpState::kInit)));
  EXPECT_TRUE(modify_is_allowed(QpType::kUc, QpState::kInit, 0x101181, to(QpState::kRtr)));
  EXPECT_TRUE(modify_is_allowed(QpType::kUc, QpState::kRtr, 0x10001, to(QpState::kRts)));
  EXPECT_TRUE(modify_is_allowed(QpType::kUd, QpState::kReset, 0x71, to(QpState::kInit)));
  EXPECT_TRUE(modify_is_allowed(QpType::kUd, QpState::kInit, 0x1, to(QpState::kRtr)));
  EXPECT_TRUE(modify_is_allowed(QpType::kUd, QpState::kRtr, 0x10001, to(QpState::kRts)));
}

TEST(QpStateMachine, AMissingRequiredAttributeIsRefused) {
  // RESET->INIT without IBV_QP_PORT (0x20).
  EXPECT_FALSE(modify_is_allowed(QpType::kRc, QpState::kReset, 0x19, to(QpState::kInit)));
  // RC INIT->RTR without MIN_RNR_TIMER (0x8000).
  EXPECT_FALSE(modify_is_allowed(QpType::kRc, QpState::kInit, 0x121181, to(QpState::kRtr)));
}

TEST(QpStateMachine, AnAttributeNotAllowedForTheTransitionIsRefused) {
  // UD RESET->INIT with ACCESS_FLAGS (0x8), which UD does not have.
  EXPECT_FALSE(modify_is_allowed(QpType::kUd, QpState::kReset, 0x79, to(QpState::kInit)));
  // UC RTR->RTS with RC-only TIMEOUT (0x200).
  EXPECT_FALSE(modify_is_allowed(QpType::kUc, QpState::kRtr, 0x10201, to(QpState::kRts)));
}

TEST(QpStateMachine, TransitionsThatDoNotExistAreRefused) {
  EXPECT_FALSE(modify_is_allowed(QpType::kRc, QpState::kReset, 0x1, to(QpState::kRts)));
  EXPECT_FALSE(modify_is_allowed(QpType::kRc, QpState::kInit, 0x10001, to(QpState::kRts)));
  EXPECT_FALSE(modify_is_allowed(QpType::kRc, QpState::kErr, 0x39, to(QpState::kInit)));
}

TEST(QpStateMachine, AnyStateMayGoToResetOrErrorWithStateOnly) {
  for (QpState s : {QpState::kReset, QpState::kInit, QpState::kRtr, QpState::kRts, QpState::kSqd,
                    QpState::kSqe, QpState::kErr}) {
    EXPECT_TRUE(modify_is_allowed(QpType::kRc, s, 0x1, to(QpState::kReset)));
    EXPECT_TRUE(modify_is_allowed(QpType::kRc, s, 0x1, to(QpState::kErr)));
    EXPECT_FALSE(modify_is_allowed(QpType::kRc, s, 0x21, to(QpState::kErr)));
  }
}

TEST(QpStateMachine, CurrentStateIsOnlyAcceptedWhenItIsTrue) {
  QpAttributes a = to(QpState::kRts);
  a.cur_state = QpState::kRtr;
  EXPECT_TRUE(modify_is_allowed(QpType::kUd, QpState::kRtr, 0x10003, a));
  a.cur_state = QpState::kInit;
  EXPECT_FALSE(modify_is_allowed(QpType::kUd, QpState::kRtr, 0x10003, a));
  // CUR_STATE is never allowed from RESET or INIT.
  QpAttributes b = to(QpState::kInit);
  b.cur_state = QpState::kReset;
  EXPECT_FALSE(modify_is_allowed(QpType::kUd, QpState::kReset, 0x73, b));
}

}  // namespace
}  // namespace softhca::hca
