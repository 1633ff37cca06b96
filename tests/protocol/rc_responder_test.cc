// RC responder ordering cases (IBA 9.7.5): past, in-order and future PSNs, RNR, NAKs, duplicates.
#include <gtest/gtest.h>

#include "device_harness.h"

namespace softhca::test {
namespace {

using fabric::BthOpcode;
using fabric::NakCode;
using hwif::CqeOpcode;

constexpr uint32_t kRqPsn = 100;

class RcResponder : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(h.connect(500, kRqPsn), 0); }

  fabric::PacketFields write_only(uint32_t psn, uint64_t offset, uint32_t len) {
    auto f = h.request(BthOpcode::kRcRdmaWriteOnly, psn);
    f.reth = fabric::RethFields{h.buf_addr() + offset, RKey(h.key()), len};
    return f;
  }
  static bool is_ack(const Captured& c, uint32_t psn) {
    return c.f.opcode == BthOpcode::kRcAcknowledge && c.f.psn.value() == psn && c.f.aeth &&
           fabric::is_ack(c.f.aeth->syndrome);
  }
  DeviceHarness h;
};

TEST_F(RcResponder, AnInOrderWriteLandsAndIsAcknowledged) {
  const std::array<uint8_t, 8> data = {1, 2, 3, 4, 5, 6, 7, 8};
  h.inject(write_only(kRqPsn, 0x100, 8), data);
  // Expect: the bytes at the target address, one ACK for PSN 100, no CQE (plain WRITE).
  EXPECT_EQ(std::memcmp(h.buf() + 0x100, data.data(), 8), 0);
  auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(is_ack(sent[0], kRqPsn));
  EXPECT_TRUE(h.take_cqes().empty());
}

TEST_F(RcResponder, ADuplicateWriteIsAcknowledgedAgainAndNotNaked) {
  const std::array<uint8_t, 4> data = {9, 9, 9, 9};
  h.inject(write_only(kRqPsn, 0, 4), data);
  h.take_sent();
  h.inject(write_only(kRqPsn, 0, 4), data);  // Expect: ACK of the last in-order PSN (100)
  auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(is_ack(sent[0], kRqPsn));
  EXPECT_EQ(h.device().stats().duplicates, 1u);
}

TEST_F(RcResponder, AFuturePsnDrawsOneSequenceNakWithTheExpectedPsn) {
  const std::array<uint8_t, 4> data = {1, 1, 1, 1};
  h.inject(write_only(kRqPsn + 2, 0, 4), data);
  // Expect: NAK (PSN sequence error) carrying PSN 100, the one the responder waits for.
  auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].f.psn.value(), kRqPsn);
  ASSERT_TRUE(sent[0].f.aeth);
  EXPECT_EQ(sent[0].f.aeth->syndrome, fabric::nak_syndrome(NakCode::kPsnSequenceError));
  EXPECT_EQ(h.buf()[0], 0);
  h.inject(write_only(kRqPsn + 3, 0, 4), data);  // Expect: silence, one NAK per gap
  EXPECT_TRUE(h.take_sent().empty());
  h.inject(write_only(kRqPsn, 0, 4), data);  // Expect: the gap closes, ACK 100
  auto after = h.take_sent();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_TRUE(is_ack(after[0], kRqPsn));
}

TEST_F(RcResponder, ASendWithNoReceivePostedDrawsAnRnrNakAndKeepsThePsn) {
  const std::array<uint8_t, 16> data{};
  h.inject(h.request(BthOpcode::kRcSendOnly, kRqPsn), data);
  auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_TRUE(sent[0].f.aeth);
  EXPECT_TRUE(fabric::is_rnr_nak(sent[0].f.aeth->syndrome));
  EXPECT_EQ(fabric::syndrome_value(sent[0].f.aeth->syndrome), 1);  // min_rnr_timer of the QP
  h.post_recv(64);
  h.inject(h.request(BthOpcode::kRcSendOnly, kRqPsn), data);  // Expect: same PSN now accepted
  sent = h.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(is_ack(sent[0], kRqPsn));
  auto cqes = h.take_cqes();
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].opcode, CqeOpcode::kRespSend);
  EXPECT_EQ(cqes[0].byte_cnt, 16u);
}

TEST_F(RcResponder, AWriteWithAWrongRkeyIsNakedAndTheQpGoesToError) {
  auto f = write_only(kRqPsn, 0, 4);
  f.reth->rkey = RKey(h.key() ^ 0x100);
  const std::array<uint8_t, 4> data = {7, 7, 7, 7};
  h.inject(f, data);
  auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].f.aeth->syndrome, fabric::nak_syndrome(NakCode::kRemoteAccessError));
  EXPECT_EQ(h.buf()[0], 0);
  hwif::QueryQpOut q{};
  ASSERT_EQ(hwif::exec_cmd(h.device(), hwif::QueryQpIn{h.qpn()}, q), 0);
  EXPECT_EQ(q.attr.state, hwif::QpState::kErr);
}

TEST_F(RcResponder, AWriteBeyondTheRegionIsNakedRemoteAccess) {
  const std::array<uint8_t, 8> data{};
  h.inject(write_only(kRqPsn, DeviceHarness::kBufBytes - 4, 8), data);
  auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].f.aeth->syndrome, fabric::nak_syndrome(NakCode::kRemoteAccessError));
}

TEST_F(RcResponder, ADuplicatedAtomicIsAnsweredFromTheCacheAndExecutedOnce) {
  auto f = h.request(BthOpcode::kRcFetchAdd, kRqPsn);
  f.atomic_eth = fabric::AtomicEthFields{h.buf_addr() + 64, RKey(h.key()), 5, 0};
  h.inject(f);
  h.inject(f);  // Expect: same answer (orig 0), memory incremented once
  auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 2u);
  for (const auto& c : sent) {
    EXPECT_EQ(c.f.opcode, BthOpcode::kRcAtomicAcknowledge);
    ASSERT_TRUE(c.f.atomic_ack);
    EXPECT_EQ(c.f.atomic_ack->orig, 0u);
  }
  uint64_t v = 0;
  std::memcpy(&v, h.buf() + 64, 8);
  EXPECT_EQ(v, 5u);
}

TEST_F(RcResponder, AReadIsAnsweredWithMtuSizedResponsesThatConsumeItsPsns) {
  for (int i = 0; i < 2500; ++i) h.buf()[i] = static_cast<uint8_t>(i * 7);
  auto f = h.request(BthOpcode::kRcRdmaReadRequest, kRqPsn);
  f.reth = fabric::RethFields{h.buf_addr(), RKey(h.key()), 2500};
  h.inject(f);
  auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].f.opcode, BthOpcode::kRcRdmaReadResponseFirst);
  EXPECT_EQ(sent[1].f.opcode, BthOpcode::kRcRdmaReadResponseMiddle);
  EXPECT_EQ(sent[2].f.opcode, BthOpcode::kRcRdmaReadResponseLast);
  EXPECT_EQ(sent[0].payload.size(), 1024u);
  EXPECT_EQ(sent[2].payload.size(), 452u);
  EXPECT_EQ(sent[2].f.psn.value(), kRqPsn + 2);
  EXPECT_EQ(std::memcmp(sent[1].payload.data(), h.buf() + 1024, 1024), 0);
  // Expect: the next request is PSN 103.
  const std::array<uint8_t, 4> data = {1, 2, 3, 4};
  h.inject(write_only(kRqPsn + 3, 0, 4), data);
  sent = h.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(is_ack(sent[0], kRqPsn + 3));
}

}  // namespace
}  // namespace softhca::test

namespace softhca::test {
namespace {

TEST(RcResponderRnr, PacketsBehindAnRnrNakedSendAreDroppedSilently) {
  DeviceHarness h;
  ASSERT_EQ(h.connect(500, kRqPsn), 0);
  std::vector<uint8_t> mtu_bytes(1024, 5);
  h.inject(h.request(BthOpcode::kRcSendFirst, kRqPsn), mtu_bytes);  // Expect: RNR NAK
  h.inject(h.request(BthOpcode::kRcSendMiddle, kRqPsn + 1), mtu_bytes);  // Expect: silence
  h.inject(h.request(BthOpcode::kRcSendLast, kRqPsn + 2), mtu_bytes);     // Expect: silence
  auto sent = h.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(fabric::is_rnr_nak(sent[0].f.aeth->syndrome));
  h.post_recv(4096);
  auto first = h.request(BthOpcode::kRcSendFirst, kRqPsn);
  auto middle = h.request(BthOpcode::kRcSendMiddle, kRqPsn + 1);
  first.ack_req = middle.ack_req = false;  // as a requester sends them: AckReq on the last only
  h.inject(first, mtu_bytes);
  h.inject(middle, mtu_bytes);
  h.inject(h.request(BthOpcode::kRcSendLast, kRqPsn + 2), mtu_bytes);
  sent = h.take_sent();
  ASSERT_EQ(sent.size(), 1u);  // Expect: one ACK for the last packet
  EXPECT_EQ(sent[0].f.psn.value(), kRqPsn + 2);
  auto cqes = h.take_cqes();
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].byte_cnt, 3072u);
}

}  // namespace
}  // namespace softhca::test
