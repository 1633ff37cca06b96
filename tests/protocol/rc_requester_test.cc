// RC requester cases: completion on ACK, stale ACKs, sequence NAK resend, RNR waits and retry
// exhaustion, ACK timeouts, segmentation by path MTU.
#include <gtest/gtest.h>

#include "device_harness.h"
#include "hca/transport/wire.h"

namespace softhca::test {
namespace {

using fabric::BthOpcode;
using hwif::CqeOpcode;
using hwif::CqeSyndrome;
using hwif::WqeOpcode;

constexpr uint32_t kSqPsn = 500;

fabric::PacketFields ack(const DeviceHarness& h, uint32_t psn, uint8_t syndrome) {
  auto f = h.request(BthOpcode::kRcAcknowledge, psn);
  f.ack_req = false;
  f.aeth = fabric::AethFields{syndrome, 0};
  return f;
}
const uint8_t kAck = fabric::ack_syndrome(fabric::kAethCreditInvalid);

TEST(RcRequester, AWriteCompletesOnlyWhenItsAckArrives) {
  DeviceHarness h;
  ASSERT_EQ(h.connect(kSqPsn, 0), 0);
  h.post(WqeOpcode::kRdmaWrite, 8, 0x9000, 0x42);
  auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].f.opcode, BthOpcode::kRcRdmaWriteOnly);
  EXPECT_EQ(sent[0].f.psn.value(), kSqPsn);
  EXPECT_TRUE(sent[0].f.ack_req);
  EXPECT_EQ(sent[0].f.reth->va, 0x9000u);
  EXPECT_TRUE(h.take_cqes().empty());  // Expect: nothing before the ACK
  h.inject(ack(h, kSqPsn - 1, kAck));  // Expect: a stale ACK changes nothing
  EXPECT_TRUE(h.take_cqes().empty());
  h.inject(ack(h, kSqPsn, kAck));
  auto cqes = h.take_cqes();
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].opcode, CqeOpcode::kReq);
  EXPECT_EQ(cqes[0].wqe_counter, 0u);
}

TEST(RcRequester, ASequenceNakMakesTheRequesterResendFromTheNakedPsn) {
  DeviceHarness h;
  ASSERT_EQ(h.connect(kSqPsn, 0), 0);
  for (int i = 0; i < 3; ++i) h.post(WqeOpcode::kRdmaWrite, 8, 0x9000, 0x42);
  EXPECT_EQ(h.take_sent().size(), 3u);
  h.inject(ack(h, kSqPsn + 1, fabric::nak_syndrome(fabric::NakCode::kPsnSequenceError)));
  // Expect: 500 implicitly acknowledged (1 CQE), 501 and 502 sent again.
  auto resent = h.take_sent();
  ASSERT_EQ(resent.size(), 2u);
  EXPECT_EQ(resent[0].f.psn.value(), kSqPsn + 1);
  EXPECT_EQ(resent[1].f.psn.value(), kSqPsn + 2);
  EXPECT_EQ(h.take_cqes().size(), 1u);
  h.inject(ack(h, kSqPsn + 2, kAck));
  auto cqes = h.take_cqes();
  ASSERT_EQ(cqes.size(), 2u);
  EXPECT_EQ(cqes[1].wqe_counter, 2u);
}

TEST(RcRequester, AnRnrNakWithRnrRetryZeroFailsTheWqe) {
  DeviceHarness h;
  ASSERT_EQ(h.connect(kSqPsn, 0, /*rnr_retry=*/0), 0);
  h.post(WqeOpcode::kSend, 8, 0, 0);
  h.post(WqeOpcode::kSend, 8, 0, 0);
  h.take_sent();
  h.inject(ack(h, kSqPsn, fabric::rnr_nak_syndrome(1)));
  // Expect: RNR_RETRY_EXC_ERR for the first, a flush error for the second.
  auto cqes = h.take_cqes();
  ASSERT_EQ(cqes.size(), 2u);
  EXPECT_EQ(cqes[0].opcode, CqeOpcode::kReqErr);
  EXPECT_EQ(cqes[0].syndrome, static_cast<uint8_t>(CqeSyndrome::kRnrRetryExcErr));
  EXPECT_EQ(cqes[1].syndrome, static_cast<uint8_t>(CqeSyndrome::kWrFlushErr));
}

TEST(RcRequester, AnRnrNakWaitsTheTimerThenSendsAgain) {
  DeviceHarness h;
  ASSERT_EQ(h.connect(kSqPsn, 0, /*rnr_retry=*/7), 0);
  h.post(WqeOpcode::kSend, 8, 0, 0);
  h.take_sent();
  h.inject(ack(h, kSqPsn, fabric::rnr_nak_syndrome(1)));  // 0.01 ms
  h.advance(5_us);
  EXPECT_TRUE(h.take_sent().empty());  // Expect: still waiting
  h.advance(6_us);
  auto sent = h.take_sent();  // Expect: the SEND again, same PSN
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].f.psn.value(), kSqPsn);
  EXPECT_EQ(sent[0].f.opcode, BthOpcode::kRcSendOnly);
}

TEST(RcRequester, AnAckTimeoutRetransmitsAndRetryExhaustionFails) {
  DeviceHarness h;
  ASSERT_EQ(h.connect(kSqPsn, 0, 7, /*retry_cnt=*/1, /*timeout=*/1), 0);  // 8.192 us
  h.post(WqeOpcode::kRdmaWrite, 8, 0x9000, 0x42);
  h.take_sent();
  h.advance(9_us);
  auto sent = h.take_sent();  // Expect: one retransmission
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].f.psn.value(), kSqPsn);
  h.advance(9_us);  // Expect: retries exhausted
  auto cqes = h.take_cqes();
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].syndrome, static_cast<uint8_t>(CqeSyndrome::kRetryExcErr));
  EXPECT_EQ(h.device().stats().timeouts, 2u);
}

TEST(RcRequester, AWriteLongerThanThePathMtuIsCutIntoFirstMiddleLast) {
  DeviceHarness h;
  ASSERT_EQ(h.connect(kSqPsn, 0), 0);
  for (int i = 0; i < 2500; ++i) h.buf()[i] = static_cast<uint8_t>(i);
  h.post(WqeOpcode::kRdmaWrite, 2500, 0x9000, 0x42);
  auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].f.opcode, BthOpcode::kRcRdmaWriteFirst);
  EXPECT_EQ(sent[1].f.opcode, BthOpcode::kRcRdmaWriteMiddle);
  EXPECT_EQ(sent[2].f.opcode, BthOpcode::kRcRdmaWriteLast);
  EXPECT_TRUE(sent[0].f.reth.has_value());
  EXPECT_FALSE(sent[1].f.reth.has_value());
  EXPECT_EQ(sent[0].f.reth->dma_len, 2500u);
  EXPECT_EQ(sent[2].payload.size(), 452u);
  EXPECT_FALSE(sent[0].f.ack_req);
  EXPECT_TRUE(sent[2].f.ack_req);
  EXPECT_EQ(std::memcmp(sent[1].payload.data(), h.buf() + 1024, 1024), 0);
}

}  // namespace
}  // namespace softhca::test

namespace softhca::test {
namespace {

TEST(RcRequesterWindow, AMessageLongerThanTheWindowSends128PsnsThenMoreAsAcksArrive) {
  DeviceHarness h;
  ASSERT_EQ(h.connect(kSqPsn, 0), 0);
  h.post(WqeOpcode::kRdmaWrite, 200 * 1024, 0x9000, 0x42);  // 200 packets at MTU 1024
  auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 128u);  // Expect: the window, no more
  EXPECT_TRUE(sent[63].f.ack_req);  // Expect: an ACK asked for every 64 packets
  EXPECT_FALSE(sent[64].f.ack_req);
  h.inject(ack(h, kSqPsn + 63, kAck));  // Expect: 64 more may go
  sent = h.take_sent();
  ASSERT_EQ(sent.size(), 64u);
  EXPECT_EQ(sent[0].f.psn.value(), kSqPsn + 128);
  h.inject(ack(h, kSqPsn + 191, kAck));  // Expect: the last 8, the final one asking for an ACK
  sent = h.take_sent();
  ASSERT_EQ(sent.size(), 8u);
  EXPECT_EQ(sent.back().f.opcode, BthOpcode::kRcRdmaWriteLast);
  EXPECT_TRUE(h.take_cqes().empty());
  h.inject(ack(h, kSqPsn + 199, kAck));
  EXPECT_EQ(h.take_cqes().size(), 1u);
  EXPECT_EQ(h.device().stats().retransmitted_packets, 0u);
}

TEST(RcRequesterWindow, AfterAnRnrNakTheSequenceNaksOfLaterPacketsAreIgnoredUntilTheTimer) {
  DeviceHarness h;
  ASSERT_EQ(h.connect(kSqPsn, 0, /*rnr_retry=*/7), 0);
  h.post(WqeOpcode::kSend, 3000, 0, 0);  // 3 packets
  h.post(WqeOpcode::kSend, 8, 0, 0);     // 1 packet
  EXPECT_EQ(h.take_sent().size(), 4u);
  h.inject(ack(h, kSqPsn, fabric::rnr_nak_syndrome(1)));
  h.inject(ack(h, kSqPsn, fabric::nak_syndrome(fabric::NakCode::kPsnSequenceError)));
  EXPECT_TRUE(h.take_sent().empty());  // Expect: nothing until the RNR timer (10 us)
  h.post(WqeOpcode::kSend, 8, 0, 0);
  EXPECT_TRUE(h.take_sent().empty());  // Expect: a new WQE waits too
  h.advance(11_us);
  auto sent = h.take_sent();  // Expect: all five packets from PSN 500, in order
  ASSERT_EQ(sent.size(), 5u);
  for (uint32_t i = 0; i < 5; ++i) EXPECT_EQ(sent[i].f.psn.value(), kSqPsn + i);
}

}  // namespace
}  // namespace softhca::test
