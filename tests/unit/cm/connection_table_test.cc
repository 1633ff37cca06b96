// ConnectionTable: routing of incoming MADs between two tables (two ports), listeners, the answers
// it gives on its own (REJ 8, REJ 10, REJ 6, DREP), and ended connections going away.
#include "cm/connection_table.h"

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
constexpr ServiceId kService = service_id_of(PortSpace::kTcp, 7471);

Req rdma_req(Qpn qpn = Qpn(0x111)) {
  Req r;
  r.service_id = kService;
  r.local_qpn = qpn;
  r.remote_cm_response_timeout = 20;
  r.local_cm_response_timeout = 20;
  r.max_cm_retries = 15;
  r.primary.local_ack_timeout = 17;
  return r;
}

Rep rdma_rep() {
  Rep r;
  r.local_qpn = Qpn(0x222);
  return r;
}

std::vector<EventType> types(const Actions& a) {
  std::vector<EventType> t;
  for (const Event& e : a.events) t.push_back(e.type);
  return t;
}

class TableTest : public ::testing::Test {
 protected:
  ConnectionTable client_{ConnectionConfig{0xaa, 1, false}, 0x100};
  ConnectionTable server_{ConnectionConfig{0xbb, 2, false}, 0x900};
  Picoseconds now_{0};

  void SetUp() override { ASSERT_TRUE(server_.listen(kService).is_ok()); }

  // Delivers every MAD of a to the other table (a came from `from`); returns what that produced.
  Actions deliver(const Actions& a, ConnectionTable& to) {
    Actions last;
    for (const MadToSend& m : a.mads) last = to.receive(now_, m.mad);
    return last;
  }

  // A connection from client to server, established. Returns (client id, server id).
  std::pair<CommId, CommId> connect() {
    Connection& c = client_.create();
    const Actions req = c.connect(now_, rdma_req(), 16);
    const Actions s1 = deliver(req, server_);
    EXPECT_EQ(types(s1), std::vector{EventType::kReqReceived});
    const CommId sid = s1.events.at(0).comm_id;
    Connection* s = server_.find(sid);
    EXPECT_NE(s, nullptr);
    const Actions c1 = deliver(s->accept(now_, rdma_rep()), client_);
    EXPECT_EQ(types(c1), std::vector{EventType::kRepReceived});
    const Actions s2 = deliver(client_.find(c.local_id())->establish(now_), server_);
    EXPECT_EQ(types(s2), std::vector{EventType::kEstablished});
    return {c.local_id(), sid};
  }
};

TEST_F(TableTest, AReqNobodyListensForIsRejectedWithReason8AndNoConnection) {
  ConnectionTable lonely(ConnectionConfig{0xcc, 3, false});
  Connection& c = client_.create();
  const Actions req = c.connect(now_, rdma_req(), 16);
  CmMad req_mad;
  decoded_as<Req>(req.mads.at(0).mad, &req_mad);
  const Actions r = lonely.receive(now_, req.mads[0].mad);
  // Expect: REJ to the sender: reason 8, REQ rejected, local comm id 0, the REQ's TID.
  ASSERT_EQ(r.mads.size(), 1u);
  EXPECT_EQ(r.mads[0].to, Destination::kSender);
  CmMad rej_mad;
  const Rej rej = decoded_as<Rej>(r.mads[0].mad, &rej_mad);
  EXPECT_EQ(rej.reason, RejReason::kInvalidServiceId);
  EXPECT_EQ(rej.message_rejected, RejectedMessage::kReq);
  EXPECT_EQ(rej.local_comm_id, CommId(0));
  EXPECT_EQ(rej.remote_comm_id, c.local_id());
  EXPECT_EQ(rej_mad.transaction_id, req_mad.transaction_id);
  EXPECT_TRUE(r.events.empty());
  EXPECT_EQ(lonely.size(), 0u);
  // Expect: the client reports REJECTED 8 and forgets the connection.
  const Actions back = client_.receive(now_, r.mads[0].mad);
  ASSERT_EQ(types(back), std::vector{EventType::kRejected});
  EXPECT_EQ(std::get<Rej>(back.events[0].payload).reason, RejReason::kInvalidServiceId);
  EXPECT_EQ(client_.size(), 0u);
}

TEST_F(TableTest, AListenedReqMakesOneConnectionEvenWhenRepeated) {
  Connection& c = client_.create();
  const Actions req = c.connect(now_, rdma_req(), 16);
  const Actions s = deliver(req, server_);
  ASSERT_EQ(types(s), std::vector{EventType::kReqReceived});
  EXPECT_EQ(s.events[0].comm_id, CommId(0x900));  // the first id handed out
  EXPECT_EQ(server_.size(), 1u);
  // Expect: the repeat goes to that connection (REQ received: dropped), no second connection.
  const Actions dup = deliver(req, server_);
  EXPECT_TRUE(dup.mads.empty() && dup.events.empty());
  EXPECT_EQ(server_.size(), 1u);
}

TEST_F(TableTest, ConnectAndDisconnectThroughTablesThenTimewaitForgetsBoth) {
  const auto [cid, sid] = connect();
  EXPECT_EQ(client_.find(cid)->state(), State::kEstablished);
  EXPECT_EQ(server_.find(sid)->state(), State::kEstablished);
  const Actions s = deliver(client_.find(cid)->disconnect(now_), server_);
  EXPECT_EQ(types(s), std::vector{EventType::kDisconnectRequested});
  EXPECT_EQ(types(deliver(s, client_)), std::vector{EventType::kDisconnected});
  ASSERT_TRUE(client_.next_deadline().has_value());
  // Expect: the timers end timewait on both and the tables forget the connections.
  const Picoseconds t = *client_.next_deadline();
  const std::vector<Actions> c_out = client_.on_timer(t);
  ASSERT_EQ(c_out.size(), 1u);
  EXPECT_EQ(types(c_out[0]), std::vector{EventType::kTimewaitExit});
  EXPECT_EQ(server_.on_timer(t).size(), 1u);
  EXPECT_EQ(client_.size(), 0u);
  EXPECT_EQ(server_.size(), 0u);
  EXPECT_FALSE(client_.next_deadline().has_value());
}

TEST_F(TableTest, TheTableRetransmitsALostReqOnItsTimer) {
  Connection& c = client_.create();
  c.connect(now_, rdma_req(), 16);  // lost
  EXPECT_EQ(client_.next_deadline(), ms(4608));
  EXPECT_TRUE(client_.on_timer(ms(4607)).empty());
  const std::vector<Actions> out = client_.on_timer(ms(4608));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(attribute_in(out[0].mads.at(0).mad), AttributeId::kReq);
  EXPECT_EQ(out[0].next_deadline, ms(2 * 4608));
}

TEST_F(TableTest, ANewReqFromAConnectedQpIsStaleRejectedAndTheOldConnectionGetsADreq) {
  const auto [cid, sid] = connect();
  // The client's QP 0x111 asks again under a new comm id (its end was lost, say).
  Connection& again = client_.create();
  const Actions req = again.connect(now_, rdma_req(Qpn(0x111)), 16);
  const Actions r = server_.receive(now_, req.mads.at(0).mad);
  // Expect: REJ 10 to the sender, and a DREQ on the old server connection to its peer.
  ASSERT_EQ(r.mads.size(), 2u);
  EXPECT_EQ(r.mads[0].to, Destination::kSender);
  const Rej rej = decoded_as<Rej>(r.mads[0].mad);
  EXPECT_EQ(rej.reason, RejReason::kStaleConnection);
  EXPECT_EQ(rej.remote_comm_id, again.local_id());
  EXPECT_EQ(r.mads[1].to, Destination::kPeer);
  EXPECT_EQ(r.mads[1].comm_id, sid);
  const Dreq dreq = decoded_as<Dreq>(r.mads[1].mad);
  EXPECT_EQ(dreq.remote_comm_id, cid);
  EXPECT_EQ(server_.find(sid)->state(), State::kDreqSent);
  EXPECT_EQ(server_.size(), 1u);
  // Expect: a REQ from another QP of the same CA is a new connection.
  Connection& other = client_.create();
  EXPECT_EQ(types(deliver(other.connect(now_, rdma_req(Qpn(0x112)), 16), server_)),
            std::vector{EventType::kReqReceived});
}

TEST_F(TableTest, AReqFromAQpInTimewaitIsStaleRejected) {
  const auto [cid, sid] = connect();
  deliver(deliver(client_.find(cid)->disconnect(now_), server_), client_);
  ASSERT_EQ(server_.find(sid)->state(), State::kTimewait);
  Connection& again = client_.create();
  const Actions r = deliver(again.connect(now_, rdma_req(Qpn(0x111)), 16), server_);
  ASSERT_EQ(r.mads.size(), 1u);
  EXPECT_EQ(decoded_as<Rej>(r.mads[0].mad).reason, RejReason::kStaleConnection);
}

TEST_F(TableTest, ADreqOrRepNamingNoConnectionIsAnsweredForTheSender) {
  Dreq dreq;
  dreq.local_comm_id = CommId(0x77);
  dreq.remote_comm_id = CommId(0x5555);
  Actions r = server_.receive(now_, CmMad{0x42, 0, 0, 0, dreq});
  ASSERT_EQ(r.mads.size(), 1u);
  EXPECT_EQ(r.mads[0].to, Destination::kSender);
  CmMad drep_mad;
  const Drep drep = decoded_as<Drep>(r.mads[0].mad, &drep_mad);
  EXPECT_EQ(drep.local_comm_id, CommId(0x5555));
  EXPECT_EQ(drep.remote_comm_id, CommId(0x77));
  EXPECT_EQ(drep_mad.transaction_id, 0x42u);

  Rep rep;
  rep.local_comm_id = CommId(0x88);
  rep.remote_comm_id = CommId(0x6666);
  r = server_.receive(now_, CmMad{0x43, 0, 0, 0, rep});
  const Rej rej = decoded_as<Rej>(r.mads.at(0).mad);
  EXPECT_EQ(rej.reason, RejReason::kInvalidCommId);
  EXPECT_EQ(rej.message_rejected, RejectedMessage::kRep);
  EXPECT_EQ(rej.remote_comm_id, CommId(0x88));

  // Expect: an RTU or DREP for nobody is dropped.
  EXPECT_TRUE(server_.receive(now_, CmMad{0, 0, 0, 0, Rtu{CommId(1), CommId(0x6666), {}}}).mads.empty());
  EXPECT_TRUE(server_.receive(now_, CmMad{0, 0, 0, 0, Drep{CommId(1), CommId(0x6666), {}}}).mads.empty());
}

TEST_F(TableTest, ARequesterGivingUpReachesThePassiveConnectionByItsIdAndGuid) {
  Connection& c = client_.create();
  const Actions s = deliver(c.connect(now_, rdma_req(), 16), server_);
  ASSERT_EQ(types(s), std::vector{EventType::kReqReceived});
  // Expect: the REJ 4 names no server comm id, only (client comm id, client CA GUID in the ARI).
  const CommId cid = c.local_id();
  const Actions r = deliver(client_.close(now_, cid), server_);
  ASSERT_EQ(types(r), std::vector{EventType::kRejected});
  EXPECT_EQ(r.events[0].comm_id, s.events[0].comm_id);
  EXPECT_EQ(server_.find(s.events[0].comm_id)->state(), State::kTimewait);
  EXPECT_EQ(client_.find(cid), nullptr);  // closing ended it: the table forgot it
  EXPECT_EQ(client_.close(now_, cid).status, Status(ENOENT));
}

TEST_F(TableTest, BytesThatAreNotACmMadAreRefusedWithEbadmsg) {
  MadBytes b = encode(CmMad{1, 0, 0, 0, rdma_req()});
  b[1] = 0x81;  // not the CM class
  const Actions r = server_.receive(now_, b);
  EXPECT_EQ(r.status, Status(EBADMSG));
  EXPECT_TRUE(r.mads.empty());
  EXPECT_EQ(server_.size(), 0u);
}

TEST_F(TableTest, ListenersAreUniqueAndCanBeRemoved) {
  EXPECT_EQ(server_.listen(kService), Status(EADDRINUSE));
  EXPECT_TRUE(server_.listening(kService));
  EXPECT_TRUE(server_.unlisten(kService).is_ok());
  EXPECT_FALSE(server_.listening(kService));
  EXPECT_EQ(server_.unlisten(kService), Status(ENOENT));
}

TEST_F(TableTest, CommIdsSkipZeroAndIdsInUse) {
  ConnectionTable t(ConnectionConfig{}, 0xffffffff);
  EXPECT_EQ(t.create().local_id(), CommId(0xffffffff));
  EXPECT_EQ(t.create().local_id(), CommId(1));  // wrapped past 0
  EXPECT_EQ(t.create_sidr().request_id(), 2u);
}

}  // namespace
}  // namespace softhca::cm
