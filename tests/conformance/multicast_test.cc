// Multicast through the public C API (ibv_attach_mcast(3), IBA 10.5): two devices of one process
// (SOFTHCA_NUM_DEVICES=2); UD QPs attached to a group on either device each receive one copy of a
// datagram sent to the group's LID and GID with DestQP 0xFFFFFF; a detached or never attached QP
// receives nothing; what cannot be attached is refused with the errno rdma-core's mlx5 gives.
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "verbs_pair.h"

namespace softhca::conformance {
namespace {

constexpr uint16_t kGroupLid = 0xc012;
constexpr uint32_t kMcastQpn = 0xffffff;

ibv_gid group_gid() {
  ibv_gid g{};
  g.raw[0] = 0xff;
  g.raw[1] = 0x12;
  g.raw[2] = 0x40;
  g.raw[3] = 0x1b;
  g.raw[15] = 0x42;
  return g;
}

class Multicast : public VerbsPair {
 protected:
  void SetUp() override { open(Topology::kTwoDevices); }

  ibv_qp* ud_qp(Endpoint& e) {
    ibv_qp* qp = create_qp(e, IBV_QPT_UD, o_);
    EXPECT_NE(qp, nullptr);
    if (qp == nullptr) return nullptr;
    EXPECT_EQ(modify_to_init(qp, o_), 0);
    EXPECT_EQ(modify_to_rtr(qp, 0, 0, 0, o_), 0);
    EXPECT_EQ(modify_to_rts(qp, 0, o_), 0);
    return qp;
  }

  void post_one_recv(Endpoint& e, ibv_qp* qp, size_t off) {
    ibv_sge s = e.sge(off, kGrhBytes + 64);
    ASSERT_EQ(post_recv(qp, off, std::span<ibv_sge>(&s, 1)), 0);
  }

  // Sends 64 bytes of `seed` from A's `from` to the group and waits for the send completion.
  void send_to_group(ibv_qp* from, uint64_t seed) {
    fill_pattern(a_.bytes().subspan(0, 64), seed);
    ibv_ah_attr attr{};
    attr.dlid = kGroupLid;
    attr.port_num = kPort;
    attr.is_global = 1;
    attr.grh.dgid = group_gid();
    attr.grh.hop_limit = 1;
    ibv_ah* ah = ibv_create_ah(a_.pd, &attr);
    ASSERT_NE(ah, nullptr);
    ibv_sge s = a_.sge(0, 64);
    SendArgs args;
    args.ah = ah;
    args.remote_qpn = kMcastQpn;
    ASSERT_EQ(post_send(from, args, std::span<ibv_sge>(&s, 1)), 0);
    const ibv_wc wc = poll_one(a_.cq);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(ibv_destroy_ah(ah), 0);
  }

  QpOptions o_;
};

TEST_F(Multicast, TheDeviceAdvertisesGroups) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(a_.ctx, &attr), 0);
  EXPECT_GT(attr.max_mcast_grp, 0);
  EXPECT_GT(attr.max_mcast_qp_attach, 0);
  EXPECT_EQ(attr.max_total_mcast_qp_attach, attr.max_mcast_grp * attr.max_mcast_qp_attach);
}

TEST_F(Multicast, EveryAttachedQpOnEveryDeviceGetsOneCopyAndOthersNone) {
  ibv_qp* sender = ud_qp(a_);
  ibv_qp* b1 = ud_qp(b_);
  ibv_qp* b2 = ud_qp(b_);
  ibv_qp* a1 = ud_qp(a_);
  ibv_qp* outsider = ud_qp(b_);
  const ibv_gid g = group_gid();
  for (ibv_qp* q : {b1, b2, a1}) ASSERT_EQ(ibv_attach_mcast(q, &g, kGroupLid), 0);
  ASSERT_EQ(ibv_attach_mcast(b1, &g, kGroupLid), 0) << "attached again: accepted, still one copy";
  post_one_recv(b_, b1, 4096);
  post_one_recv(b_, b2, 8192);
  post_one_recv(b_, outsider, 12288);
  post_one_recv(a_, a1, 16384);
  send_to_group(sender, 7);

  std::vector<ibv_wc> got;
  ASSERT_TRUE(poll_completions(b_.cq, 2, got));
  EXPECT_TRUE(cq_is_empty(b_.cq)) << "one copy per attached QP, none for the outsider";
  for (const ibv_wc& wc : got) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.byte_len, kGrhBytes + 64);
    EXPECT_EQ(wc.src_qp, sender->qp_num);
    EXPECT_TRUE(wc.qp_num == b1->qp_num || wc.qp_num == b2->qp_num);
    EXPECT_TRUE(same_bytes(b_.bytes().subspan(wc.wr_id + kGrhBytes, 64), a_.bytes().subspan(0, 64)));
  }
  EXPECT_NE(got[0].qp_num, got[1].qp_num);
  const ibv_wc own = poll_one(a_.cq);  // the sender's own device delivers to its attached QP too
  EXPECT_EQ(own.status, IBV_WC_SUCCESS);
  EXPECT_EQ(own.qp_num, a1->qp_num);

  // Detached: b2 takes no more; b1 still does.
  ASSERT_EQ(ibv_detach_mcast(b2, &g, kGroupLid), 0);
  post_one_recv(b_, b1, 4096);
  post_one_recv(a_, a1, 16384);
  send_to_group(sender, 8);
  const ibv_wc again = poll_one(b_.cq);
  EXPECT_EQ(again.qp_num, b1->qp_num);
  EXPECT_TRUE(cq_is_empty(b_.cq));
  EXPECT_EQ(poll_one(a_.cq).qp_num, a1->qp_num);
  EXPECT_EQ(ibv_detach_mcast(b2, &g, kGroupLid), EINVAL) << "not attached any more";
}

TEST_F(Multicast, WhatIsNotAUdQpOrAGroupIsRefused) {
  ibv_qp* ud = ud_qp(b_);
  ibv_qp* rc = create_qp(b_, IBV_QPT_RC, o_);
  ASSERT_NE(rc, nullptr);
  const ibv_gid g = group_gid();
  EXPECT_EQ(ibv_attach_mcast(rc, &g, kGroupLid), EINVAL) << "only UD QPs join groups";
  ibv_gid unicast{};
  unicast.raw[0] = 0xfe;
  unicast.raw[1] = 0x80;
  EXPECT_EQ(ibv_attach_mcast(ud, &unicast, kGroupLid), EINVAL) << "not a multicast GID";
  EXPECT_EQ(ibv_attach_mcast(ud, &g, 0x0042), EINVAL) << "not a multicast LID";
  EXPECT_EQ(ibv_attach_mcast(ud, nullptr, kGroupLid), EINVAL);
  EXPECT_EQ(ibv_detach_mcast(ud, &g, kGroupLid), EINVAL) << "never attached";
}

}  // namespace
}  // namespace softhca::conformance
