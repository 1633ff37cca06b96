// What the transports do with what a faulty link leaves (docs/reliability.md): RC answers a
// repeated atomic from its replay ring without executing it again, and takes an ACK past a READ
// whose response was lost as an implied NAK; UC drops a message that lost a
// packet, whole, with no completion, and the next message uses the receive WQE; UD drops what
// finds no receive WQE.
#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "device_harness.h"

namespace softhca::test {
namespace {

using fabric::BthOpcode;
using hwif::CqeOpcode;

constexpr uint32_t kRqPsn = 100;
constexpr uint32_t kMtu = 1024;  // the harness connects with path MTU 1024

TEST(RcAtomicReplay, EachOfTheLastMaxDestRdAtomicAtomicsIsAnsweredAgainWithItsOwnResult) {
  DeviceHarness h;
  ASSERT_EQ(h.connect(500, kRqPsn), 0);  // max_dest_rd_atomic 4
  const std::array<uint64_t, 4> adds = {1, 2, 4, 8};
  auto fetch_add = [&](uint32_t psn, uint64_t add) {
    auto f = h.request(BthOpcode::kRcFetchAdd, psn);
    f.atomic_eth = fabric::AtomicEthFields{h.buf_addr() + 64, RKey(h.key()), add, 0};
    return f;
  };
  for (uint32_t i = 0; i < 4; ++i) h.inject(fetch_add(kRqPsn + i, adds[i]));  // Expect: origs 0, 1, 3, 7
  ASSERT_EQ(h.take_sent().size(), 4u);
  // Expect: PSN 101 and 100 repeated (their responses lost) get 1 and 0 again, nothing executes.
  h.inject(fetch_add(kRqPsn + 1, adds[1]));
  h.inject(fetch_add(kRqPsn, adds[0]));
  const auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 2u);
  for (const auto& c : sent) {
    EXPECT_EQ(c.f.opcode, BthOpcode::kRcAtomicAcknowledge);
    ASSERT_TRUE(c.f.atomic_ack);
  }
  EXPECT_EQ(sent[0].f.psn.value(), kRqPsn + 1);
  EXPECT_EQ(sent[0].f.atomic_ack->orig, 1u);
  EXPECT_EQ(sent[1].f.psn.value(), kRqPsn);
  EXPECT_EQ(sent[1].f.atomic_ack->orig, 0u);
  uint64_t v = 0;
  std::memcpy(&v, h.buf() + 64, 8);
  EXPECT_EQ(v, 15u);  // the sum of the adds, once
  EXPECT_TRUE(h.take_cqes().empty());
}

// The requester side of a lost READ response: the ACK of a later WRITE is an implied NAK.
TEST(RcImpliedNak, AnAckPastAReadWhoseResponseWasLostSendsTheReadAgainAndCompletesNothing) {
  constexpr uint32_t kSqPsn = 500;
  const uint8_t kAck = fabric::ack_syndrome(fabric::kAethCreditInvalid);
  DeviceHarness h;
  ASSERT_EQ(h.connect(kSqPsn, 0), 0);
  h.post(hwif::WqeOpcode::kRdmaRead, 8, 0x9000, 0x42);   // PSN 500
  h.post(hwif::WqeOpcode::kRdmaWrite, 8, 0xa000, 0x42);  // PSN 501
  ASSERT_EQ(h.take_sent().size(), 2u);
  auto ack = h.request(BthOpcode::kRcAcknowledge, kSqPsn + 1);
  ack.ack_req = false;
  ack.aeth = fabric::AethFields{kAck, 0};
  h.inject(ack);  // Expect: the READ's response (PSN 500) was lost: READ and WRITE sent again
  auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].f.opcode, BthOpcode::kRcRdmaReadRequest);
  EXPECT_EQ(sent[0].f.psn.value(), kSqPsn);
  EXPECT_EQ(sent[1].f.psn.value(), kSqPsn + 1);
  EXPECT_TRUE(h.take_cqes().empty());
  h.inject(ack);  // Expect: the same implied NAK again sends nothing more (the timer covers it)
  EXPECT_TRUE(h.take_sent().empty());
  auto resp = h.request(BthOpcode::kRcRdmaReadResponseOnly, kSqPsn);
  resp.ack_req = false;
  resp.aeth = fabric::AethFields{kAck, 0};
  const std::vector<uint8_t> data(8, 0x5e);
  h.inject(resp, data);  // Expect: the READ completes; the WRITE waits for the ACK of its resend
  auto cqes = h.take_cqes();
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].wqe_counter, 0u);
  EXPECT_EQ(std::memcmp(h.buf(), data.data(), data.size()), 0);
  h.inject(ack);  // the responder's answer to the repeated WRITE
  cqes = h.take_cqes();
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].wqe_counter, 1u);
}

TEST(UcUnderLoss, AMessageThatLostItsMiddlePacketIsDroppedWholeWithNoCompletion) {
  DeviceHarness h(hwif::QpType::kUc);
  ASSERT_EQ(h.connect(500, kRqPsn), 0);
  h.post_recv(4 * kMtu);
  std::vector<uint8_t> first(kMtu, 0xa1), last(100, 0xa3), next(50, 0xb0);
  h.inject(h.request(BthOpcode::kUcSendFirst, kRqPsn), first);  // Expect: placed, no CQE yet
  // PSN 101, the middle packet, is lost.
  h.inject(h.request(BthOpcode::kUcSendLast, kRqPsn + 2), last);  // Expect: dropped, the message too
  EXPECT_TRUE(h.take_cqes().empty());
  EXPECT_EQ(h.device().stats().dropped[static_cast<size_t>(hca::DropReason::kPsnOutOfWindow)], 1u);
  // Expect: the next message completes alone, in the same receive WQE, from its start.
  h.inject(h.request(BthOpcode::kUcSendOnly, kRqPsn + 3), next);
  const auto cqes = h.take_cqes();
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].opcode, CqeOpcode::kRespSend);
  EXPECT_EQ(cqes[0].byte_cnt, next.size());
  EXPECT_EQ(cqes[0].wqe_counter, 0u);
  EXPECT_EQ(std::memcmp(h.buf(), next.data(), next.size()), 0);
  EXPECT_TRUE(h.take_sent().empty());  // UC never answers
}

TEST(UcUnderLoss, AWriteThatLostItsFirstPacketWritesNothing) {
  DeviceHarness h(hwif::QpType::kUc);
  ASSERT_EQ(h.connect(500, kRqPsn), 0);
  std::memset(h.buf(), 0, 3 * kMtu);
  std::vector<uint8_t> middle(kMtu, 0xc2), last(10, 0xc3);
  // PSN 100, the WRITE First with the RETH, is lost.
  h.inject(h.request(BthOpcode::kUcRdmaWriteMiddle, kRqPsn + 1), middle);  // Expect: dropped
  h.inject(h.request(BthOpcode::kUcRdmaWriteLast, kRqPsn + 2), last);      // Expect: dropped
  for (size_t i = 0; i < 3 * kMtu; ++i) ASSERT_EQ(h.buf()[i], 0) << i;
  EXPECT_TRUE(h.take_cqes().empty());
}

TEST(UdUnderLoss, ADatagramWithNoReceivePostedIsDroppedAndCounted) {
  DeviceHarness h(hwif::QpType::kUd);
  ASSERT_EQ(h.connect(500, kRqPsn), 0);
  auto f = h.request(BthOpcode::kUdSendOnly, 7);
  f.deth = fabric::DethFields{0x11111111, Qpn(0x99)};
  std::vector<uint8_t> payload(64, 0xd0);
  h.inject(f, payload);  // Expect: no receive WQE, dropped
  EXPECT_TRUE(h.take_cqes().empty());
  EXPECT_EQ(h.device().stats().dropped[static_cast<size_t>(hca::DropReason::kNoReceiveWqe)], 1u);
}

}  // namespace
}  // namespace softhca::test
