#include "cm/qp_attributes.h"

#include <gtest/gtest.h>

namespace softhca::cm {
namespace {

// A REQ and REP whose every relevant field differs, so a swapped row of rdmacm.md 4.12 shows.
Req example_req() {
  Req r;
  r.local_qpn = Qpn(0x111);
  r.starting_psn = Psn(0xa0a0a0);
  r.responder_resources = 3;
  r.initiator_depth = 4;
  r.retry_count = 6;
  r.rnr_retry_count = 5;
  r.path_mtu = 3;
  r.pkey = 0xffff;
  r.primary.local_gid.fill(0x11);
  r.primary.remote_gid.fill(0x22);
  r.primary.flow_label = 0x12345;
  r.primary.traffic_class = 0x60;
  r.primary.hop_limit = 64;
  r.primary.sl = 2;
  r.primary.local_ack_timeout = 17;
  return r;
}

Rep example_rep() {
  Rep r;
  r.local_qpn = Qpn(0x222);
  r.starting_psn = Psn(0xb0b0b0);
  r.responder_resources = 1;
  r.initiator_depth = 2;
  r.rnr_retry_count = 7;
  return r;
}

TEST(QpAttributes, TheActiveSideTakesThePeersQpnPsnAndResourcesFromTheRep) {
  const QpAttributes q = qp_attributes(Side::kActive, example_req(), example_rep());
  EXPECT_EQ(q.dest_qp_num, Qpn(0x222));
  EXPECT_EQ(q.rq_psn, Psn(0xa0a0a0));  // its own REQ starting PSN
  EXPECT_EQ(q.sq_psn, Psn(0xb0b0b0));
  EXPECT_EQ(q.path_mtu, 3);
  EXPECT_EQ(q.max_rd_atomic, 1);       // REP Responder Resources
  EXPECT_EQ(q.max_dest_rd_atomic, 2);  // REP Initiator Depth
  EXPECT_EQ(q.retry_cnt, 6);
  EXPECT_EQ(q.rnr_retry, 7);           // REP RNR retry count
  EXPECT_EQ(q.timeout, 17);
  EXPECT_EQ(q.dgid, example_req().primary.remote_gid);
  EXPECT_EQ(q.sgid, example_req().primary.local_gid);
  EXPECT_EQ(q.flow_label, 0x12345u);
  EXPECT_EQ(q.traffic_class, 0x60);
  EXPECT_EQ(q.hop_limit, 64);
  EXPECT_EQ(q.sl, 2);
  EXPECT_EQ(q.pkey, 0xffff);
}

TEST(QpAttributes, ThePassiveSideTakesThePeersQpnAndPsnFromTheReqAndItsOwnRepResources) {
  const QpAttributes q = qp_attributes(Side::kPassive, example_req(), example_rep());
  EXPECT_EQ(q.dest_qp_num, Qpn(0x111));
  EXPECT_EQ(q.rq_psn, Psn(0xb0b0b0));  // its own REP starting PSN
  EXPECT_EQ(q.sq_psn, Psn(0xa0a0a0));
  EXPECT_EQ(q.path_mtu, 3);
  EXPECT_EQ(q.max_rd_atomic, 2);       // its REP Initiator Depth
  EXPECT_EQ(q.max_dest_rd_atomic, 1);  // its REP Responder Resources
  EXPECT_EQ(q.retry_cnt, 6);           // the REQ's, for both QPs
  EXPECT_EQ(q.rnr_retry, 5);           // REQ RNR retry count
  EXPECT_EQ(q.timeout, 17);
  EXPECT_EQ(q.dgid, example_req().primary.local_gid);
  EXPECT_EQ(q.sgid, example_req().primary.remote_gid);
}

}  // namespace
}  // namespace softhca::cm
