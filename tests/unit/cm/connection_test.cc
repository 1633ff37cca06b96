// The CM connection state machine between an active and a passive Connection, with the test as the
// wire: each MAD is delivered, dropped or repeated by hand, and time is the injected clock.
#include "cm/connection.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

#include "cm/cma_header.h"
#include "cm/timers.h"
#include "cm_test_util.h"

namespace softhca::cm {
namespace {

using State = Connection::State;
using test::attribute_in;
using test::decoded_as;

constexpr Picoseconds ms(int64_t v) { return Picoseconds(v * 1'000'000'000); }

constexpr uint64_t kActiveGuid = 0x0002c903000000aa;
constexpr uint64_t kPassiveGuid = 0x0002c903000000bb;
constexpr uint8_t kPlt = 16;                       // packet life time of the path
constexpr Picoseconds kReqTimeout = ms(4608);      // 2 * 256 + 4096 (rdmacm.md 4.8)
constexpr Picoseconds kRepTimeout = ms(4096);      // ms(REQ Local CM Response Timeout 20)
constexpr Picoseconds kTimewait = ms(512);         // ms(17): PLT 16 + 1, and ACK timeout 17 - 1 + 1

Req rdma_req() {
  Req r;
  r.service_id = service_id_of(PortSpace::kTcp, 7471);
  r.local_qpn = Qpn(0x111);
  r.starting_psn = Psn(0x1000);
  r.responder_resources = 1;
  r.initiator_depth = 1;
  r.remote_cm_response_timeout = kCmaCmResponseTimeout;
  r.local_cm_response_timeout = kCmaCmResponseTimeout;
  r.retry_count = 7;
  r.rnr_retry_count = 7;
  r.max_cm_retries = kCmaMaxCmRetries;
  r.path_mtu = 3;
  r.primary.local_ack_timeout = local_ack_timeout(15, kPlt);  // 17
  EXPECT_TRUE(set_req_private_data(r, CmaHeader::ipv4(0xc0a8010a, 40000, 0xc0a80114), {}));
  return r;
}

Rep rdma_rep() {
  Rep r;
  r.local_qpn = Qpn(0x222);
  r.starting_psn = Psn(0x2000);
  r.responder_resources = 1;
  r.initiator_depth = 1;
  r.target_ack_delay = 15;
  r.rnr_retry_count = 7;
  return r;
}

CmMad mad_of(const MadToSend& m) {
  CmMad x;
  EXPECT_EQ(decode(m.mad, x), DecodeStatus::kOk);
  return x;
}

// The one MAD of a, decoded.
CmMad only_mad(const Actions& a) {
  EXPECT_EQ(a.mads.size(), 1u);
  return a.mads.empty() ? CmMad{} : mad_of(a.mads[0]);
}

std::vector<EventType> types(const Actions& a) {
  std::vector<EventType> t;
  for (const Event& e : a.events) t.push_back(e.type);
  return t;
}

bool nothing(const Actions& a) { return a.status.is_ok() && a.mads.empty() && a.events.empty(); }

class ConnectionTest : public ::testing::Test {
 protected:
  Connection active_{CommId(0x1001), ConnectionConfig{kActiveGuid, 0x7, false}};
  Connection passive_{CommId(0x2002), ConnectionConfig{kPassiveGuid, 0x9, false}};
  Picoseconds now_{0};

  // Active sends REQ; it reaches the passive side. Returns the REQ MAD.
  CmMad req_delivered() {
    const Actions a = active_.connect(now_, rdma_req(), kPlt);
    const CmMad req = only_mad(a);
    const Actions p = passive_.receive(now_, req);
    EXPECT_EQ(types(p), std::vector{EventType::kReqReceived});
    return req;
  }
  // ... and the passive side accepts; the REP reaches the active side. Returns the REP MAD.
  CmMad rep_delivered() {
    req_delivered();
    const CmMad rep = only_mad(passive_.accept(now_, rdma_rep()));
    EXPECT_EQ(types(active_.receive(now_, rep)), std::vector{EventType::kRepReceived});
    return rep;
  }
  void connected() {
    rep_delivered();
    const CmMad rtu = only_mad(active_.establish(now_));
    EXPECT_EQ(types(passive_.receive(now_, rtu)), std::vector{EventType::kEstablished});
  }
};

// ---- connection establishment -------------------------------------------------------------------

TEST_F(ConnectionTest, ReqRepRtuConnectsBothSides) {
  // Expect: REQ with our comm id, CA GUID and TID (tid_high << 32 | comm id), the REQ's timer armed.
  const Actions a1 = active_.connect(now_, rdma_req(), kPlt);
  ASSERT_TRUE(a1.status.is_ok());
  ASSERT_EQ(a1.mads.size(), 1u);
  EXPECT_EQ(a1.mads[0].to, Destination::kPeer);
  EXPECT_EQ(a1.mads[0].comm_id, CommId(0x1001));
  CmMad req_mad;
  const Req req = decoded_as<Req>(a1.mads[0].mad, &req_mad);
  EXPECT_EQ(attribute_in(a1.mads[0].mad), AttributeId::kReq);
  EXPECT_EQ(req.local_comm_id, CommId(0x1001));
  EXPECT_EQ(req.local_ca_guid, kActiveGuid);
  EXPECT_EQ(req.local_qpn, Qpn(0x111));
  EXPECT_EQ(req_mad.transaction_id, 0x0000000700001001u);
  EXPECT_EQ(active_.state(), State::kReqSent);
  EXPECT_EQ(a1.next_deadline, kReqTimeout);

  // Expect: the passive side reports the REQ, unchanged, and waits for the user (no timer).
  const Actions p1 = passive_.receive(now_, req_mad);
  ASSERT_EQ(types(p1), std::vector{EventType::kReqReceived});
  EXPECT_EQ(std::get<Req>(p1.events[0].payload), req);
  EXPECT_EQ(passive_.state(), State::kReqRcvd);
  EXPECT_EQ(passive_.remote_id(), CommId(0x1001));
  EXPECT_FALSE(p1.next_deadline.has_value());

  // Expect: REP names both ids, carries the passive CA GUID and the REQ's TID; REP timer armed.
  now_ = ms(10);
  const Actions p2 = passive_.accept(now_, rdma_rep());
  CmMad rep_mad;
  const Rep rep = decoded_as<Rep>(p2.mads.at(0).mad, &rep_mad);
  EXPECT_EQ(rep.local_comm_id, CommId(0x2002));
  EXPECT_EQ(rep.remote_comm_id, CommId(0x1001));
  EXPECT_EQ(rep.local_ca_guid, kPassiveGuid);
  EXPECT_EQ(rep.local_qpn, Qpn(0x222));
  EXPECT_EQ(rep_mad.transaction_id, req_mad.transaction_id);
  EXPECT_EQ(passive_.state(), State::kRepSent);
  EXPECT_EQ(p2.next_deadline, now_ + kRepTimeout);

  // Expect: the active side reports the REP and stops the REQ timer.
  const Actions a2 = active_.receive(now_, rep_mad);
  ASSERT_EQ(types(a2), std::vector{EventType::kRepReceived});
  EXPECT_EQ(std::get<Rep>(a2.events[0].payload), rep);
  EXPECT_EQ(active_.state(), State::kRepRcvd);
  EXPECT_EQ(active_.remote_qpn(), Qpn(0x222));
  EXPECT_FALSE(a2.next_deadline.has_value());

  // Expect: RTU (REQ's TID) and established on both sides, no timers left.
  const Actions a3 = active_.establish(now_);
  CmMad rtu_mad;
  const Rtu rtu = decoded_as<Rtu>(a3.mads.at(0).mad, &rtu_mad);
  EXPECT_EQ(rtu.local_comm_id, CommId(0x1001));
  EXPECT_EQ(rtu.remote_comm_id, CommId(0x2002));
  EXPECT_EQ(rtu_mad.transaction_id, req_mad.transaction_id);
  EXPECT_EQ(types(a3), std::vector{EventType::kEstablished});
  const Actions p3 = passive_.receive(now_, rtu_mad);
  EXPECT_EQ(types(p3), std::vector{EventType::kEstablished});
  EXPECT_EQ(active_.state(), State::kEstablished);
  EXPECT_EQ(passive_.state(), State::kEstablished);
  EXPECT_FALSE(active_.deadline().has_value());
  EXPECT_FALSE(passive_.deadline().has_value());
}

TEST_F(ConnectionTest, ALostReqIsResentFifteenTimesThenTheActiveSideIsUnreachable) {
  const Actions a = active_.connect(now_, rdma_req(), kPlt);
  const MadBytes first = a.mads.at(0).mad;
  // Expect: nothing before the deadline.
  EXPECT_TRUE(nothing(active_.on_timer(kReqTimeout - Picoseconds(1))));
  for (int i = 1; i <= kCmaMaxCmRetries; ++i) {
    // Expect: try i+1 at i * 4608 ms, the same bytes.
    const Actions r = active_.on_timer(kReqTimeout * i);
    ASSERT_EQ(r.mads.size(), 1u) << "resend " << i;
    EXPECT_EQ(r.mads[0].mad, first);
    EXPECT_TRUE(r.events.empty());
    EXPECT_EQ(r.next_deadline, kReqTimeout * (i + 1));
  }
  // Expect: after the 16th send times out, UNREACHABLE with ETIMEDOUT and the connection ends.
  const Actions last = active_.on_timer(kReqTimeout * 16);
  EXPECT_TRUE(last.mads.empty());
  ASSERT_EQ(types(last), std::vector{EventType::kUnreachable});
  EXPECT_EQ(last.events[0].status, ETIMEDOUT);
  EXPECT_EQ(active_.state(), State::kIdle);
  EXPECT_TRUE(active_.ended());
  EXPECT_FALSE(last.next_deadline.has_value());
}

TEST_F(ConnectionTest, AReqResentAfterALossStillConnects) {
  active_.connect(now_, rdma_req(), kPlt);  // lost
  const CmMad again = only_mad(active_.on_timer(kReqTimeout));
  EXPECT_EQ(types(passive_.receive(kReqTimeout, again)), std::vector{EventType::kReqReceived});
  EXPECT_EQ(active_.retries_left(), kCmaMaxCmRetries - 1);
}

TEST_F(ConnectionTest, ALostRepIsResentAndTheSecondCopyConnects) {
  req_delivered();
  const Actions p = passive_.accept(now_, rdma_rep());  // lost
  const MadBytes first = p.mads.at(0).mad;
  EXPECT_TRUE(nothing(passive_.on_timer(kRepTimeout - Picoseconds(1))));
  const Actions resend = passive_.on_timer(kRepTimeout);
  ASSERT_EQ(resend.mads.size(), 1u);
  EXPECT_EQ(resend.mads[0].mad, first);
  // Expect: the resent REP connects as the first would have.
  EXPECT_EQ(types(active_.receive(kRepTimeout, mad_of(resend.mads[0]))), std::vector{EventType::kRepReceived});
}

TEST_F(ConnectionTest, RepRetriesExhaustedMakeThePassiveSideUnreachable) {
  req_delivered();
  passive_.accept(now_, rdma_rep());
  for (int i = 1; i <= kCmaMaxCmRetries; ++i) ASSERT_EQ(passive_.on_timer(kRepTimeout * i).mads.size(), 1u);
  const Actions last = passive_.on_timer(kRepTimeout * 16);
  ASSERT_EQ(types(last), std::vector{EventType::kUnreachable});
  EXPECT_EQ(last.events[0].status, ETIMEDOUT);
  EXPECT_TRUE(passive_.ended());
}

TEST_F(ConnectionTest, ALostRtuIsResentWhenTheRepComesAgain) {
  rep_delivered();
  const MadBytes rtu = active_.establish(now_).mads.at(0).mad;  // lost
  // Expect: the passive side, still in REP sent, resends its REP; the active side answers with the
  // same RTU; that one establishes the passive side.
  const CmMad rep_again = only_mad(passive_.on_timer(kRepTimeout));
  const Actions a = active_.receive(kRepTimeout, rep_again);
  ASSERT_EQ(a.mads.size(), 1u);
  EXPECT_EQ(a.mads[0].mad, rtu);
  EXPECT_TRUE(a.events.empty());
  EXPECT_EQ(types(passive_.receive(kRepTimeout, mad_of(a.mads[0]))), std::vector{EventType::kEstablished});
}

TEST_F(ConnectionTest, DataBeforeTheRtuEstablishesThePassiveSide) {
  rep_delivered();
  const Actions p = passive_.notify_established(now_);
  EXPECT_EQ(types(p), std::vector{EventType::kEstablished});
  EXPECT_EQ(passive_.state(), State::kEstablished);
  EXPECT_FALSE(p.next_deadline.has_value());
  // Expect: the late RTU changes nothing.
  EXPECT_TRUE(nothing(passive_.receive(now_, only_mad(active_.establish(now_)))));
}

// ---- duplicates and MRA -------------------------------------------------------------------------

TEST_F(ConnectionTest, ADuplicateReqIsDroppedUntilAnMraWasSentThenTheMraIsResent) {
  const CmMad req = req_delivered();
  // Expect: REQ received, no MRA: dropped.
  EXPECT_TRUE(nothing(passive_.receive(now_, req)));
  // Expect: an MRA(REQ) with the service timeout; the duplicate then gets the same MRA again.
  const Actions m = passive_.send_mra(now_, kCmaMraServiceTimeout);
  CmMad mra_mad;
  const Mra mra = decoded_as<Mra>(m.mads.at(0).mad, &mra_mad);
  EXPECT_EQ(mra.message_mraed, MraedMessage::kReq);
  EXPECT_EQ(mra.service_timeout, 24);
  EXPECT_EQ(mra.local_comm_id, CommId(0x2002));
  EXPECT_EQ(mra.remote_comm_id, CommId(0x1001));
  EXPECT_EQ(mra_mad.transaction_id, req.transaction_id);
  EXPECT_EQ(passive_.state(), State::kMraReqSent);
  const Actions dup = passive_.receive(now_, req);
  ASSERT_EQ(dup.mads.size(), 1u);
  EXPECT_EQ(dup.mads[0].mad, m.mads[0].mad);
}

TEST_F(ConnectionTest, ADelayedMraGoesOutOnlyWhenTheReqComesAgain) {
  const CmMad req = req_delivered();
  // Expect: armed, nothing sent (rdma_cm's MRA with the DELAY flag).
  EXPECT_TRUE(nothing(passive_.send_mra(now_, kCmaMraServiceTimeout, MraMode::kOnDuplicate)));
  EXPECT_EQ(passive_.state(), State::kReqRcvd);
  // Expect: the repeated REQ draws the MRA.
  const Actions dup = passive_.receive(now_, req);
  EXPECT_EQ(decoded_as<Mra>(dup.mads.at(0).mad).service_timeout, 24);
  EXPECT_EQ(passive_.state(), State::kMraReqSent);
  // Expect: accept still works from MRA sent.
  EXPECT_EQ(attribute_in(passive_.accept(now_, rdma_rep()).mads.at(0).mad), AttributeId::kRep);
}

TEST_F(ConnectionTest, AnMraExtendsTheReqWaitToServiceTimeoutPlusPacketLifetime) {
  req_delivered();
  now_ = ms(1000);
  const CmMad mra = only_mad(passive_.send_mra(now_, kCmaMraServiceTimeout));
  const Actions a = active_.receive(now_, mra);
  ASSERT_EQ(types(a), std::vector{EventType::kMraReceived});
  EXPECT_EQ(active_.state(), State::kMraReqRcvd);
  const Picoseconds extended = now_ + mra_wait(24, kPlt);  // 65536 + 256 ms
  EXPECT_EQ(a.next_deadline, extended);
  // Expect: no resend at the old deadline; a resend at the new one.
  EXPECT_TRUE(nothing(active_.on_timer(kReqTimeout)));
  EXPECT_EQ(attribute_in(active_.on_timer(extended).mads.at(0).mad), AttributeId::kReq);
  // Expect: the REP still completes the exchange from MRA(REQ) received.
  EXPECT_EQ(types(active_.receive(extended, only_mad(passive_.accept(extended, rdma_rep())))),
            std::vector{EventType::kRepReceived});
}

TEST_F(ConnectionTest, AnMraOfTheRepExtendsThePassiveWaitAndARepeatedRepDrawsItAgain) {
  const CmMad rep = rep_delivered();
  const Actions m = active_.send_mra(now_, 20);
  const CmMad mra = only_mad(m);
  EXPECT_EQ(std::get<Mra>(mra.message).message_mraed, MraedMessage::kRep);
  EXPECT_EQ(active_.state(), State::kMraRepSent);
  const Actions p = passive_.receive(now_, mra);
  EXPECT_EQ(types(p), std::vector{EventType::kMraReceived});
  EXPECT_EQ(passive_.state(), State::kMraRepRcvd);
  EXPECT_EQ(p.next_deadline, now_ + kernel_time(20) + kernel_time(kPlt));
  // Expect: the REP again -> the MRA again.
  const Actions dup = active_.receive(now_, rep);
  ASSERT_EQ(dup.mads.size(), 1u);
  EXPECT_EQ(dup.mads[0].mad, m.mads[0].mad);
  // Expect: RTU from MRA(REP) sent establishes both.
  EXPECT_EQ(types(passive_.receive(now_, only_mad(active_.establish(now_)))), std::vector{EventType::kEstablished});
}

TEST_F(ConnectionTest, ADuplicateRepWhileWaitingForTheUserIsDropped) {
  const CmMad rep = rep_delivered();
  EXPECT_TRUE(nothing(active_.receive(now_, rep)));
  EXPECT_EQ(active_.state(), State::kRepRcvd);
}

// ---- REJ ----------------------------------------------------------------------------------------

TEST_F(ConnectionTest, ARejectedReqReachesTheActiveSideWithReasonAndPrivateData) {
  const CmMad req = req_delivered();
  const std::array<uint8_t, 3> why = {7, 8, 9};
  const Actions p = passive_.reject(now_, RejReason::kConsumerDefined, why);
  CmMad rej_mad;
  const Rej rej = decoded_as<Rej>(p.mads.at(0).mad, &rej_mad);
  // Expect: local comm id 0 from REQ received (cm.c), the REQ's sender as remote, the REQ's TID.
  EXPECT_EQ(rej.local_comm_id, CommId(0));
  EXPECT_EQ(rej.remote_comm_id, CommId(0x1001));
  EXPECT_EQ(rej.message_rejected, RejectedMessage::kReq);
  EXPECT_EQ(rej.reason, RejReason::kConsumerDefined);
  EXPECT_EQ(rej.private_data.bytes[2], 9);
  EXPECT_EQ(rej_mad.transaction_id, req.transaction_id);
  EXPECT_TRUE(passive_.ended());

  const Actions a = active_.receive(now_, rej_mad);
  ASSERT_EQ(types(a), std::vector{EventType::kRejected});
  EXPECT_EQ(std::get<Rej>(a.events[0].payload).reason, RejReason::kConsumerDefined);
  EXPECT_EQ(std::get<Rej>(a.events[0].payload).private_data.bytes[0], 7);
  EXPECT_TRUE(active_.ended());
  EXPECT_FALSE(a.next_deadline.has_value());
}

TEST_F(ConnectionTest, ARejectAfterAnMraCarriesThePassiveCommId) {
  req_delivered();
  passive_.send_mra(now_, 24);
  const Rej rej = decoded_as<Rej>(passive_.reject(now_, RejReason::kNoResources).mads.at(0).mad);
  EXPECT_EQ(rej.local_comm_id, CommId(0x2002));
  EXPECT_EQ(rej.message_rejected, RejectedMessage::kReq);
}

TEST_F(ConnectionTest, ARejectedRepReachesThePassiveSide) {
  rep_delivered();
  const Actions a = active_.reject(now_, RejReason::kInvalidMtu);
  const Rej rej = decoded_as<Rej>(a.mads.at(0).mad);
  EXPECT_EQ(rej.local_comm_id, CommId(0x1001));
  EXPECT_EQ(rej.remote_comm_id, CommId(0x2002));
  EXPECT_EQ(rej.message_rejected, RejectedMessage::kRep);
  EXPECT_TRUE(active_.ended());
  const Actions p = passive_.receive(now_, mad_of(a.mads[0]));
  ASSERT_EQ(types(p), std::vector{EventType::kRejected});
  EXPECT_EQ(std::get<Rej>(p.events[0].payload).reason, RejReason::kInvalidMtu);
  EXPECT_TRUE(passive_.ended());
}

TEST_F(ConnectionTest, AStaleRejectionKeepsTheActiveSideInTimewait) {
  active_.connect(now_, rdma_req(), kPlt);
  Rej rej;
  rej.remote_comm_id = CommId(0x1001);
  rej.reason = RejReason::kStaleConnection;
  const Actions a = active_.receive(now_, CmMad{0, 0, 0, 0, rej});
  EXPECT_EQ(types(a), std::vector{EventType::kRejected});
  EXPECT_EQ(active_.state(), State::kTimewait);
  EXPECT_EQ(a.next_deadline, now_ + kTimewait);
  EXPECT_EQ(types(active_.on_timer(now_ + kTimewait)), std::vector{EventType::kTimewaitExit});
}

TEST_F(ConnectionTest, ARejForAnotherConnectionIsDropped) {
  active_.connect(now_, rdma_req(), kPlt);
  Rej rej;
  rej.remote_comm_id = CommId(0x9999);
  EXPECT_TRUE(nothing(active_.receive(now_, CmMad{0, 0, 0, 0, rej})));
  EXPECT_EQ(active_.state(), State::kReqSent);
}

// ---- disconnect and timewait --------------------------------------------------------------------

TEST_F(ConnectionTest, DreqDrepDisconnectBothSidesThroughTimewait) {
  connected();
  now_ = ms(100);
  const Actions a1 = active_.disconnect(now_);
  CmMad dreq_mad;
  const Dreq dreq = decoded_as<Dreq>(a1.mads.at(0).mad, &dreq_mad);
  EXPECT_EQ(dreq.local_comm_id, CommId(0x1001));
  EXPECT_EQ(dreq.remote_comm_id, CommId(0x2002));
  EXPECT_EQ(dreq.remote_qpn, Qpn(0x222));  // the peer's QPN
  EXPECT_EQ(dreq_mad.transaction_id, 0x0000000700001001u);
  EXPECT_EQ(active_.state(), State::kDreqSent);
  EXPECT_EQ(a1.next_deadline, now_ + kReqTimeout);

  // Expect: the passive side reports it, answers DREP (DREQ's TID) and enters timewait.
  const Actions p1 = passive_.receive(now_, dreq_mad);
  ASSERT_EQ(types(p1), std::vector{EventType::kDisconnectRequested});
  CmMad drep_mad;
  const Drep drep = decoded_as<Drep>(p1.mads.at(0).mad, &drep_mad);
  EXPECT_EQ(drep.local_comm_id, CommId(0x2002));
  EXPECT_EQ(drep.remote_comm_id, CommId(0x1001));
  EXPECT_EQ(drep_mad.transaction_id, dreq_mad.transaction_id);
  EXPECT_EQ(passive_.state(), State::kTimewait);
  EXPECT_EQ(p1.next_deadline, now_ + kTimewait);

  // Expect: DREP -> disconnected (status 0), timewait.
  const Actions a2 = active_.receive(now_, drep_mad);
  ASSERT_EQ(types(a2), std::vector{EventType::kDisconnected});
  EXPECT_EQ(a2.events[0].status, 0);
  EXPECT_EQ(active_.state(), State::kTimewait);

  // Expect: timewait ends after ms(PLT + 1) on both sides.
  EXPECT_TRUE(nothing(active_.on_timer(now_ + kTimewait - Picoseconds(1))));
  EXPECT_EQ(types(active_.on_timer(now_ + kTimewait)), std::vector{EventType::kTimewaitExit});
  EXPECT_EQ(types(passive_.on_timer(now_ + kTimewait)), std::vector{EventType::kTimewaitExit});
  EXPECT_TRUE(active_.ended());
  EXPECT_TRUE(passive_.ended());
}

TEST_F(ConnectionTest, ALostDreqIsResentThenTimesOutAsDisconnected) {
  connected();
  const MadBytes dreq = active_.disconnect(now_).mads.at(0).mad;
  for (int i = 1; i <= kCmaMaxCmRetries; ++i) {
    const Actions r = active_.on_timer(kReqTimeout * i);
    ASSERT_EQ(r.mads.size(), 1u);
    EXPECT_EQ(r.mads[0].mad, dreq);
  }
  const Actions last = active_.on_timer(kReqTimeout * 16);
  ASSERT_EQ(types(last), std::vector{EventType::kDisconnected});
  EXPECT_EQ(last.events[0].status, ETIMEDOUT);
  EXPECT_EQ(active_.state(), State::kTimewait);
  EXPECT_EQ(types(active_.on_timer(kReqTimeout * 16 + kTimewait)), std::vector{EventType::kTimewaitExit});
}

TEST_F(ConnectionTest, ALostDrepIsResentWhenTheDreqComesAgain) {
  connected();
  const CmMad dreq = only_mad(active_.disconnect(now_));
  const MadBytes drep = passive_.receive(now_, dreq).mads.at(0).mad;  // lost
  const Actions again = passive_.receive(now_, only_mad(active_.on_timer(kReqTimeout)));
  ASSERT_EQ(again.mads.size(), 1u);
  EXPECT_EQ(again.mads[0].mad, drep);
  EXPECT_TRUE(again.events.empty());
  EXPECT_EQ(types(active_.receive(kReqTimeout, mad_of(again.mads[0]))), std::vector{EventType::kDisconnected});
}

TEST_F(ConnectionTest, BothSidesDisconnectingAtOnceEndInTimewait) {
  connected();
  const CmMad dreq_a = only_mad(active_.disconnect(now_));
  const CmMad dreq_p = only_mad(passive_.disconnect(now_));
  const Actions a = active_.receive(now_, dreq_p);
  EXPECT_EQ(types(a), std::vector{EventType::kDisconnectRequested});
  EXPECT_EQ(attribute_in(a.mads.at(0).mad), AttributeId::kDrep);
  EXPECT_EQ(types(passive_.receive(now_, dreq_a)), std::vector{EventType::kDisconnectRequested});
  EXPECT_EQ(active_.state(), State::kTimewait);
  EXPECT_EQ(passive_.state(), State::kTimewait);
}

TEST_F(ConnectionTest, ADeferredDrepWaitsForDisconnect) {
  Connection passive(CommId(0x3003), ConnectionConfig{kPassiveGuid, 0, true});
  const CmMad req = only_mad(active_.connect(now_, rdma_req(), kPlt));
  passive.receive(now_, req);
  active_.receive(now_, only_mad(passive.accept(now_, rdma_rep())));
  passive.receive(now_, only_mad(active_.establish(now_)));
  const CmMad dreq = only_mad(active_.disconnect(now_));
  // Expect: reported, nothing sent, DREQ received; a repeat is dropped.
  const Actions p = passive.receive(now_, dreq);
  EXPECT_EQ(types(p), std::vector{EventType::kDisconnectRequested});
  EXPECT_TRUE(p.mads.empty());
  EXPECT_EQ(passive.state(), State::kDreqRcvd);
  EXPECT_TRUE(nothing(passive.receive(now_, dreq)));
  // Expect: disconnect() sends the DREP and enters timewait.
  const Actions d = passive.disconnect(now_);
  EXPECT_EQ(attribute_in(d.mads.at(0).mad), AttributeId::kDrep);
  EXPECT_EQ(passive.state(), State::kTimewait);
  EXPECT_EQ(types(active_.receive(now_, mad_of(d.mads[0]))), std::vector{EventType::kDisconnected});
}

TEST_F(ConnectionTest, ClosingWithADeferredDrepSendsIt) {
  Connection passive(CommId(0x3003), ConnectionConfig{kPassiveGuid, 0, true});
  passive.receive(now_, only_mad(active_.connect(now_, rdma_req(), kPlt)));
  active_.receive(now_, only_mad(passive.accept(now_, rdma_rep())));
  passive.receive(now_, only_mad(active_.establish(now_)));
  passive.receive(now_, only_mad(active_.disconnect(now_)));
  ASSERT_EQ(passive.state(), State::kDreqRcvd);
  EXPECT_EQ(attribute_in(passive.close(now_).mads.at(0).mad), AttributeId::kDrep);
  EXPECT_EQ(passive.state(), State::kTimewait);
}

TEST_F(ConnectionTest, ADreqBeforeTheRtuDisconnectsThePassiveSide) {
  rep_delivered();  // the passive side is still in REP sent
  active_.establish(now_);  // RTU lost
  const Actions p = passive_.receive(now_, only_mad(active_.disconnect(now_)));
  EXPECT_EQ(types(p), std::vector{EventType::kDisconnectRequested});
  EXPECT_EQ(passive_.state(), State::kTimewait);
}

TEST_F(ConnectionTest, ADreqNamingAnotherQpIsDropped) {
  connected();
  Dreq dreq = std::get<Dreq>(only_mad(active_.disconnect(now_)).message);
  dreq.remote_qpn = Qpn(0x333);
  EXPECT_TRUE(nothing(passive_.receive(now_, CmMad{1, 0, 0, 0, dreq})));
  EXPECT_EQ(passive_.state(), State::kEstablished);
}

TEST_F(ConnectionTest, AReqRepeatedInTimewaitIsRejectedAsStale) {
  const CmMad req = req_delivered();
  active_.receive(now_, only_mad(passive_.accept(now_, rdma_rep())));
  passive_.receive(now_, only_mad(active_.establish(now_)));
  passive_.receive(now_, only_mad(active_.disconnect(now_)));
  ASSERT_EQ(passive_.state(), State::kTimewait);
  const Actions p = passive_.receive(now_, req);
  const Rej rej = decoded_as<Rej>(p.mads.at(0).mad);
  EXPECT_EQ(rej.reason, RejReason::kStaleConnection);
  EXPECT_EQ(rej.remote_comm_id, CommId(0x1001));
  EXPECT_EQ(rej.message_rejected, RejectedMessage::kReq);
}

// ---- close (rdma_destroy_id) --------------------------------------------------------------------

TEST_F(ConnectionTest, ClosingWhileTheReqIsOutRejectsWithTimeoutAndOurGuid) {
  req_delivered();
  const Actions a = active_.close(now_);
  const Rej rej = decoded_as<Rej>(a.mads.at(0).mad);
  EXPECT_EQ(rej.reason, RejReason::kTimeout);
  EXPECT_EQ(rej.local_comm_id, CommId(0x1001));
  EXPECT_EQ(rej.remote_comm_id, CommId(0));  // the passive id is not known yet
  EXPECT_EQ(rej.ari_length, 8);
  EXPECT_EQ(rej.ari[0], 0x00);
  EXPECT_EQ(rej.ari[1], 0x02);
  EXPECT_EQ(rej.ari[2], 0xc9);
  EXPECT_EQ(rej.ari[7], 0xaa);
  EXPECT_TRUE(active_.ended());
  EXPECT_TRUE(a.events.empty());
  // Expect: the passive side, waiting for its user, takes it as a rejection.
  const Actions p = passive_.receive(now_, mad_of(a.mads[0]));
  EXPECT_EQ(types(p), std::vector{EventType::kRejected});
  EXPECT_EQ(passive_.state(), State::kTimewait);  // reason 4 keeps the ids in timewait (cm.c)
}

TEST_F(ConnectionTest, ClosingAnEstablishedConnectionSendsOneDreqAndWaitsOutTimewait) {
  connected();
  const Actions a = active_.close(now_);
  EXPECT_EQ(attribute_in(a.mads.at(0).mad), AttributeId::kDreq);
  EXPECT_EQ(active_.state(), State::kTimewait);
  EXPECT_EQ(a.next_deadline, now_ + kTimewait);
  // Expect: no DREQ resend; the DREP that comes is dropped; then timewait exit.
  EXPECT_TRUE(nothing(active_.receive(now_, only_mad(passive_.receive(now_, mad_of(a.mads[0]))))));
  EXPECT_EQ(types(active_.on_timer(now_ + kTimewait)), std::vector{EventType::kTimewaitExit});
}

TEST_F(ConnectionTest, ClosingInOtherStatesSendsWhatTheStateCallsFor) {
  rep_delivered();
  // Passive in REP sent: REJ 28, message "other", timewait.
  const Rej rej = decoded_as<Rej>(passive_.close(now_).mads.at(0).mad);
  EXPECT_EQ(rej.reason, RejReason::kConsumerDefined);
  EXPECT_EQ(rej.message_rejected, RejectedMessage::kOther);
  EXPECT_EQ(rej.local_comm_id, CommId(0x2002));
  EXPECT_EQ(passive_.state(), State::kTimewait);
  // Active in REP received: REJ of the REP, ended.
  const Rej rej_rep = decoded_as<Rej>(active_.close(now_).mads.at(0).mad);
  EXPECT_EQ(rej_rep.message_rejected, RejectedMessage::kRep);
  EXPECT_TRUE(active_.ended());
  // An unused connection just ends; a timewait one stays.
  Connection idle(CommId(5), ConnectionConfig{});
  EXPECT_TRUE(nothing(idle.close(now_)));
  EXPECT_TRUE(idle.ended());
  EXPECT_TRUE(nothing(passive_.close(now_)));
  EXPECT_EQ(passive_.state(), State::kTimewait);
}

// ---- calls that do not fit ----------------------------------------------------------------------

TEST_F(ConnectionTest, CallsThatDoNotFitTheStateFailWithEinvalAndChangeNothing) {
  EXPECT_EQ(active_.accept(now_, rdma_rep()).status, Status(EINVAL));
  EXPECT_EQ(active_.establish(now_).status, Status(EINVAL));
  EXPECT_EQ(active_.disconnect(now_).status, Status(EINVAL));
  EXPECT_EQ(active_.reject(now_, RejReason::kConsumerDefined).status, Status(EINVAL));
  EXPECT_EQ(active_.send_mra(now_, 24).status, Status(EINVAL));
  EXPECT_EQ(active_.notify_established(now_).status, Status(EINVAL));
  active_.connect(now_, rdma_req(), kPlt);
  const Actions twice = active_.connect(now_, rdma_req(), kPlt);
  EXPECT_EQ(twice.status, Status(EINVAL));
  EXPECT_TRUE(twice.mads.empty());
  EXPECT_EQ(active_.establish(now_).status, Status(EINVAL));  // no REP yet
  EXPECT_EQ(active_.state(), State::kReqSent);
}

TEST_F(ConnectionTest, ARepForAnotherCommIdIsDropped) {
  req_delivered();
  Rep rep = std::get<Rep>(only_mad(passive_.accept(now_, rdma_rep())).message);
  rep.remote_comm_id = CommId(0x1002);
  EXPECT_TRUE(nothing(active_.receive(now_, CmMad{0, 0, 0, 0, rep})));
  EXPECT_EQ(active_.state(), State::kReqSent);
}

TEST_F(ConnectionTest, StatesAndEventsHaveNames) {
  EXPECT_EQ(to_string(State::kMraRepRcvd), "MRA(REP) received");
  EXPECT_EQ(to_string(EventType::kTimewaitExit), "timewait exit");
}

}  // namespace
}  // namespace softhca::cm
