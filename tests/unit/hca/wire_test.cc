#include "hca/transport/wire.h"

#include <gtest/gtest.h>

namespace softhca::hca {
namespace {

using hwif::QpType;
using hwif::WqeOpcode;

TEST(Wire, RnrTimerCodesFollowIbaTable45) {
  EXPECT_EQ(rnr_delay(0), Picoseconds(655'360'000'000));  // 655.36 ms
  EXPECT_EQ(rnr_delay(1), Picoseconds(10'000'000));       // 0.01 ms
  EXPECT_EQ(rnr_delay(12), Picoseconds(640'000'000));     // 0.64 ms, the pingpong default
  EXPECT_EQ(rnr_delay(31), Picoseconds(491'520'000'000)); // 491.52 ms
}

TEST(Wire, LocalAckTimeoutIs4096NanosecondsTimesTwoToTheTimeout) {
  EXPECT_EQ(ack_timeout(0), Picoseconds(-1));
  EXPECT_EQ(ack_timeout(1), Picoseconds(8'192'000));
  EXPECT_EQ(ack_timeout(14), Picoseconds(4'096'000LL << 14));  // ~67 ms, perftest's default
}

TEST(Wire, RequestOpcodesFollowTheIbaTable) {
  using fabric::BthOpcode;
  EXPECT_EQ(request_opcode(QpType::kRc, WqeOpcode::kRdmaWrite, PacketPosition::kOnly), BthOpcode::kRcRdmaWriteOnly);
  EXPECT_EQ(request_opcode(QpType::kRc, WqeOpcode::kRdmaWriteImm, PacketPosition::kLast),
            BthOpcode::kRcRdmaWriteLastImm);
  EXPECT_EQ(request_opcode(QpType::kUc, WqeOpcode::kSend, PacketPosition::kFirst), BthOpcode::kUcSendFirst);
  EXPECT_EQ(request_opcode(QpType::kUd, WqeOpcode::kSendImm, PacketPosition::kOnly), BthOpcode::kUdSendOnlyImm);
  EXPECT_EQ(request_opcode(QpType::kRc, WqeOpcode::kAtomicFa, PacketPosition::kOnly), BthOpcode::kRcFetchAdd);
}

TEST(Wire, PacketPositionsOfAThreePacketMessage) {
  EXPECT_EQ(position_of(0, 3), PacketPosition::kFirst);
  EXPECT_EQ(position_of(1, 3), PacketPosition::kMiddle);
  EXPECT_EQ(position_of(2, 3), PacketPosition::kLast);
  EXPECT_EQ(position_of(0, 1), PacketPosition::kOnly);
}

TEST(Wire, ResponsesGoToTheRequesterAndTransportsDoNotMix) {
  EXPECT_TRUE(is_response(fabric::BthOpcode::kRcAcknowledge));
  EXPECT_TRUE(is_response(fabric::BthOpcode::kRcRdmaReadResponseMiddle));
  EXPECT_FALSE(is_response(fabric::BthOpcode::kRcRdmaReadRequest));
  EXPECT_TRUE(matches_transport(fabric::BthOpcode::kUcSendOnly, QpType::kUc));
  EXPECT_FALSE(matches_transport(fabric::BthOpcode::kUcSendOnly, QpType::kRc));
  EXPECT_FALSE(matches_transport(fabric::BthOpcode::kRcSendOnly, QpType::kUd));
}

}  // namespace
}  // namespace softhca::hca
