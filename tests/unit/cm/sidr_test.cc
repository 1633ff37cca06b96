// SIDR (UD service ID resolution) between two ConnectionTables: success, no listener, timeout.
#include "cm/sidr.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "cm/cma_header.h"
#include "cm/connection_table.h"
#include "cm_test_util.h"

namespace softhca::cm {
namespace {

using test::decoded_as;

constexpr Picoseconds ms(int64_t v) { return Picoseconds(v * 1'000'000'000); }
constexpr ServiceId kUdpService = service_id_of(PortSpace::kUdp, 7174);
constexpr uint32_t kRdmaUdpQkey = 0x01234567;  // RDMA_UDP_QKEY (rdmacm.md 4.7)
constexpr uint64_t kSenderKey = 0x5e5e;

SidrReq udp_req() {
  SidrReq r;
  r.service_id = kUdpService;
  EXPECT_TRUE(set_sidr_req_private_data(r, CmaHeader::ipv4(0x0a000001, 5000, 0x0a000002), {}));
  return r;
}

class SidrTest : public ::testing::Test {
 protected:
  ConnectionTable client_{ConnectionConfig{0xaa, 4, false}, 0x40};
  ConnectionTable server_{ConnectionConfig{0xbb, 5, false}, 0x80};
};

TEST_F(SidrTest, AListenedSidrReqIsReportedOnceAndItsReplyResolvesTheService) {
  ASSERT_TRUE(server_.listen(kUdpService).is_ok());
  SidrRequest& s = client_.create_sidr();
  const Actions a = s.start(Picoseconds(0), udp_req());
  ASSERT_EQ(a.mads.size(), 1u);
  CmMad req_mad;
  const SidrReq sent = decoded_as<SidrReq>(a.mads[0].mad, &req_mad);
  EXPECT_EQ(sent.request_id, 0x40u);
  EXPECT_EQ(req_mad.transaction_id, 0x0000000400000040u);
  EXPECT_EQ(a.next_deadline, ms(4096));

  // Expect: the server reports the request; a repeat while pending is dropped.
  const Actions r1 = server_.receive(Picoseconds(0), a.mads[0].mad, kSenderKey);
  ASSERT_EQ(r1.events.size(), 1u);
  EXPECT_EQ(r1.events[0].type, EventType::kSidrReqReceived);
  EXPECT_EQ(std::get<SidrReq>(r1.events[0].payload).service_id, kUdpService);
  const Actions dup = server_.receive(Picoseconds(0), a.mads[0].mad, kSenderKey);
  EXPECT_TRUE(dup.events.empty() && dup.mads.empty());

  // Expect: the reply echoes request id, service ID and TID, carries QPN and Q_Key.
  const Actions rep = server_.sidr_reply(Picoseconds(0), 0x40, kSenderKey,
                                         make_sidr_rep(sent, SidrStatus::kSuccess, Qpn(0x456), kRdmaUdpQkey));
  ASSERT_EQ(rep.mads.size(), 1u);
  EXPECT_EQ(rep.mads[0].to, Destination::kSender);
  CmMad rep_mad;
  const SidrRep got = decoded_as<SidrRep>(rep.mads[0].mad, &rep_mad);
  EXPECT_EQ(got.request_id, 0x40u);
  EXPECT_EQ(got.service_id, kUdpService);
  EXPECT_EQ(got.qpn, Qpn(0x456));
  EXPECT_EQ(got.qkey, kRdmaUdpQkey);
  EXPECT_EQ(rep_mad.transaction_id, req_mad.transaction_id);
  // Expect: answered once: a second reply has nothing pending.
  EXPECT_EQ(server_.sidr_reply(Picoseconds(0), 0x40, kSenderKey, got).status, Status(EINVAL));

  // Expect: the client reports success and stops its timer.
  const Actions c = client_.receive(ms(1), rep.mads[0].mad);
  ASSERT_EQ(c.events.size(), 1u);
  EXPECT_EQ(c.events[0].type, EventType::kSidrRepReceived);
  EXPECT_EQ(std::get<SidrRep>(c.events[0].payload).status, SidrStatus::kSuccess);
  EXPECT_EQ(s.state(), SidrRequest::State::kDone);
  EXPECT_FALSE(client_.next_deadline().has_value());
}

TEST_F(SidrTest, ASidrReqNobodyListensForGetsStatus1) {
  SidrRequest& s = client_.create_sidr();
  const Actions a = s.start(Picoseconds(0), udp_req());
  const Actions r = server_.receive(Picoseconds(0), a.mads.at(0).mad, kSenderKey);
  ASSERT_EQ(r.mads.size(), 1u);
  EXPECT_EQ(r.mads[0].to, Destination::kSender);
  const SidrRep rep = decoded_as<SidrRep>(r.mads[0].mad);
  EXPECT_EQ(rep.status, SidrStatus::kServiceIdNotSupported);
  EXPECT_EQ(rep.request_id, s.request_id());
  EXPECT_EQ(rep.service_id, kUdpService);
  // Expect: the client gets the SIDR_REP with status 1 (rdma_cm: UNREACHABLE, status 1).
  const Actions c = client_.receive(ms(1), r.mads[0].mad);
  ASSERT_EQ(c.events.size(), 1u);
  EXPECT_EQ(std::get<SidrRep>(c.events[0].payload).status, SidrStatus::kServiceIdNotSupported);
}

TEST_F(SidrTest, AnUnansweredSidrReqIsResentThenUnreachable) {
  SidrRequest s(7, 0);
  const MadBytes first = s.start(Picoseconds(0), udp_req()).mads.at(0).mad;
  EXPECT_TRUE(s.on_timer(ms(4095)).mads.empty());
  for (int i = 1; i <= 15; ++i) {
    const Actions r = s.on_timer(ms(4096) * i);
    ASSERT_EQ(r.mads.size(), 1u);
    EXPECT_EQ(r.mads[0].mad, first);
  }
  const Actions last = s.on_timer(ms(4096) * 16);
  ASSERT_EQ(last.events.size(), 1u);
  EXPECT_EQ(last.events[0].type, EventType::kUnreachable);
  EXPECT_EQ(last.events[0].status, ETIMEDOUT);
  EXPECT_EQ(s.state(), SidrRequest::State::kDone);
  EXPECT_FALSE(last.next_deadline.has_value());
}

TEST_F(SidrTest, ASidrRepForAnotherRequestIsIgnored) {
  SidrRequest s(7, 0);
  s.start(Picoseconds(0), udp_req());
  SidrRep rep;
  rep.request_id = 8;
  EXPECT_TRUE(s.receive(Picoseconds(0), CmMad{0, 0, 0, 0, rep}).events.empty());
  EXPECT_EQ(s.state(), SidrRequest::State::kReqSent);
  EXPECT_EQ(s.start(Picoseconds(0), udp_req()).status, Status(EINVAL));
}

}  // namespace
}  // namespace softhca::cm
