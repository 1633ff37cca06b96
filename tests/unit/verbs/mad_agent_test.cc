// QP1's MAD agents through the private channel softhca's librdmacm uses (verbs/softhca_ext.h,
// docs/cm.md "QP1 on a shared device"): a UD QP becomes its process's agent, binds service IDs,
// and CM MADs sent to QP1 of its port reach it — a REQ by its service ID, a reply by the agent bits
// of the id it names — as UD receives from QP1; everything else sent to QP1 is dropped.
// Two devices of one process (SOFTHCA_NUM_DEVICES=2): A sends from its agent, B's agents receive.
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "tests/conformance/verbs_pair.h"
#include "verbs/softhca_ext.h"

namespace softhca::conformance {
namespace {

constexpr uint32_t kGsiQkey = 0x80010000u;
constexpr uint32_t kMadBytes = 256;
constexpr uint64_t kTcpService = 0x0000000001060000ull;  // rdma_cm's RDMA_PS_TCP << 16

void put_be(uint8_t* p, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}

// A CM MAD of attribute `attr` (IBA 13.4.3 header, method SEND) with a service ID at byte 32 (REQ,
// SIDR_REQ) and a remote comm ID at byte 28 (the replies).
std::array<uint8_t, kMadBytes> cm_mad(uint16_t attr, uint64_t service_id, uint32_t remote_id, uint8_t mgmt_class = 7) {
  std::array<uint8_t, kMadBytes> m{};
  m[0] = 1;
  m[1] = mgmt_class;
  m[2] = 2;
  m[3] = 3;
  put_be(&m[16], attr, 2);
  put_be(&m[28], remote_id, 4);
  put_be(&m[32], service_id, 8);
  if (attr == 0x0018) put_be(&m[24], remote_id, 4);  // SIDR_REP: the request id
  return m;
}

class MadAgents : public VerbsPair {
 protected:
  void SetUp() override {
    open(Topology::kTwoDevices);
    ext_ = softhca_ext_of(a_.ctx);
    ASSERT_NE(ext_, nullptr) << "a context of softhca's libibverbs carries the extension table";
    o_.qkey = kGsiQkey;
    sender_ = agent_qp(a_);
    ASSERT_EQ(ext_->set_mad_agent(sender_, &sender_agent_), 0);
    ah_ = create_ah(a_, b_.lid);
    ASSERT_NE(ah_, nullptr);
  }

  // untracked: the test destroys it itself (the fixture destroys the others).
  ibv_qp* agent_qp(Endpoint& e, bool untracked = false) {
    ibv_qp* qp = nullptr;
    if (untracked) {
      ibv_qp_init_attr ia{};
      ia.qp_type = IBV_QPT_UD;
      ia.send_cq = ia.recv_cq = e.cq;
      ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
      ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
      qp = ibv_create_qp(e.pd, &ia);
    } else {
      qp = create_qp(e, IBV_QPT_UD, o_);
    }
    EXPECT_NE(qp, nullptr);
    if (qp == nullptr) return nullptr;
    EXPECT_EQ(modify_to_init(qp, o_), 0);
    EXPECT_EQ(modify_to_rtr(qp, 0, 0, 0, o_), 0);
    EXPECT_EQ(modify_to_rts(qp, 0, o_), 0);
    return qp;
  }

  // A receive for one MAD on `qp` at B's buffer offset `off`.
  void post_mad_recv(ibv_qp* qp, size_t off) {
    ibv_sge s = b_.sge(off, kGrhBytes + kMadBytes);
    ASSERT_EQ(post_recv(qp, off, std::span<ibv_sge>(&s, 1)), 0);
  }

  // Sends `mad` from A's agent to B's QP1 with `qkey`, and waits for its send completion.
  void send_to_qp1(const std::array<uint8_t, kMadBytes>& mad, uint32_t qkey = kGsiQkey) {
    std::memcpy(a_.buf, mad.data(), mad.size());
    ibv_sge s = a_.sge(0, kMadBytes);
    SendArgs args;
    args.ah = ah_;
    args.remote_qpn = 1;
    args.remote_qkey = qkey;
    ASSERT_EQ(post_send(sender_, args, std::span<ibv_sge>(&s, 1)), 0);
    const ibv_wc wc = poll_one(a_.cq);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(wc.opcode, IBV_WC_SEND);
  }

  const softhca_ext_ops* ext_ = nullptr;
  QpOptions o_;
  ibv_qp* sender_ = nullptr;
  uint32_t sender_agent_ = 0;
  ibv_ah* ah_ = nullptr;
};

TEST_F(MadAgents, AReqReachesTheAgentThatBoundItsServiceAsAUdReceiveFromQp1) {
  ibv_qp* listener = agent_qp(b_);
  uint32_t agent = 0;
  ASSERT_EQ(ext_->set_mad_agent(listener, &agent), 0);
  EXPECT_GE(agent, 1u);
  uint64_t sid = kTcpService | 7471;
  ASSERT_EQ(ext_->bind_service(listener, &sid, false), 0);
  EXPECT_EQ(sid, kTcpService | 7471);
  post_mad_recv(listener, 0);

  const auto req = cm_mad(0x0010, kTcpService | 7471, 0);
  send_to_qp1(req);
  const ibv_wc wc = poll_one(b_.cq);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.qp_num, listener->qp_num);
  EXPECT_EQ(wc.src_qp, 1u) << "an agent sends as QP1";
  EXPECT_EQ(wc.slid, a_.lid);
  EXPECT_EQ(wc.byte_len, kGrhBytes + kMadBytes);
  EXPECT_TRUE(same_bytes(b_.bytes().subspan(kGrhBytes, kMadBytes), req));
}

TEST_F(MadAgents, RepliesGoToTheAgentWhoseNumberTheirRemoteCommIdCarries) {
  ibv_qp* first = agent_qp(b_);
  ibv_qp* second = agent_qp(b_);
  uint32_t agent1 = 0, agent2 = 0;
  ASSERT_EQ(ext_->set_mad_agent(first, &agent1), 0);
  ASSERT_EQ(ext_->set_mad_agent(second, &agent2), 0);
  ASSERT_NE(agent1, agent2);
  uint32_t again = 0;
  ASSERT_EQ(ext_->set_mad_agent(second, &again), 0);
  EXPECT_EQ(again, agent2) << "a QP keeps its agent number";
  post_mad_recv(first, 0);
  post_mad_recv(second, 512);
  // REP (0x13), RTU, DREQ, DREP, REJ, MRA name the receiver's comm id at byte 28; SIDR_REP its
  // request id at byte 24.
  for (uint16_t attr : {0x0013, 0x0014, 0x0015, 0x0016, 0x0012, 0x0011, 0x0018}) {
    SCOPED_TRACE(attr);
    send_to_qp1(cm_mad(attr, 0, agent2 << 22 | 0x1234));
    const ibv_wc wc = poll_one(b_.cq);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.qp_num, second->qp_num);
    EXPECT_EQ(wc.wr_id, 512u);
    post_mad_recv(second, 512);
  }
  EXPECT_TRUE(cq_is_empty(b_.cq)) << "nothing reached the first agent";
}

TEST_F(MadAgents, WhatNoAgentTakesIsDroppedAndReceivesNothing) {
  ibv_qp* listener = agent_qp(b_);
  uint32_t agent = 0;
  ASSERT_EQ(ext_->set_mad_agent(listener, &agent), 0);
  uint64_t sid = kTcpService | 7471;
  ASSERT_EQ(ext_->bind_service(listener, &sid, false), 0);
  post_mad_recv(listener, 0);
  send_to_qp1(cm_mad(0x0010, kTcpService | 7472, 0));                // a REQ for an unbound port
  send_to_qp1(cm_mad(0x0013, 0, (agent + 1) << 22 | 5));            // a REP for an agent that is not there
  send_to_qp1(cm_mad(0x0010, kTcpService | 7471, 0, 0x04));         // not the CM class (performance)
  send_to_qp1(cm_mad(0x0010, kTcpService | 7471, 0), 0x11111111);   // not the GSI's Q_Key
  send_to_qp1(cm_mad(0x0001, kTcpService | 7471, 0));               // ClassPortInfo: no CM agent answers
  EXPECT_TRUE(cq_is_empty(b_.cq));
  // A non-agent UD QP cannot bind.
  ibv_qp* plain = create_qp(b_, IBV_QPT_UD, o_);
  ASSERT_NE(plain, nullptr);
  uint64_t other = kTcpService | 9000;
  EXPECT_EQ(ext_->bind_service(plain, &other, false), EINVAL);
}

TEST_F(MadAgents, AServiceIsOneAgentsUntilItUnbindsOrItsQpIsDestroyed) {
  ibv_qp* first = agent_qp(b_);
  ibv_qp* second = agent_qp(b_, true);
  uint32_t n1 = 0, n2 = 0;
  ASSERT_EQ(ext_->set_mad_agent(first, &n1), 0);
  ASSERT_EQ(ext_->set_mad_agent(second, &n2), 0);
  uint64_t sid = kTcpService | 7471;
  ASSERT_EQ(ext_->bind_service(first, &sid, false), 0);
  ASSERT_EQ(ext_->bind_service(first, &sid, false), 0) << "the same agent may bind it again";
  EXPECT_EQ(ext_->bind_service(second, &sid, false), EADDRINUSE);
  ASSERT_EQ(ext_->unbind_service(first, sid), 0);
  EXPECT_EQ(ext_->bind_service(second, &sid, false), EADDRINUSE) << "bound twice, unbound once";
  ASSERT_EQ(ext_->unbind_service(first, sid), 0);
  EXPECT_EQ(ext_->unbind_service(first, sid), EINVAL);
  ASSERT_EQ(ext_->bind_service(second, &sid, false), 0);
  // Picked ports: distinct, in Linux's ephemeral range, in the port space asked for.
  uint64_t p1 = kTcpService, p2 = kTcpService;
  ASSERT_EQ(ext_->bind_service(first, &p1, true), 0);
  ASSERT_EQ(ext_->bind_service(first, &p2, true), 0);
  EXPECT_NE(p1, p2);
  for (uint64_t p : {p1, p2}) {
    EXPECT_EQ(p & ~0xffffull, kTcpService);
    EXPECT_GE(p & 0xffff, 32768u);
    EXPECT_LE(p & 0xffff, 60999u);
  }
  // Destroying the agent's QP frees what it bound.
  ASSERT_EQ(ibv_destroy_qp(second), 0);
  uint64_t again = kTcpService | 7471;
  EXPECT_EQ(ext_->bind_service(first, &again, false), 0);
}

TEST_F(MadAgents, AnAgentThatGoesEndsItsTrackedConnectionsWithADreqFromQp1) {
  // B listens for replies as agent `peer`; A's second agent tracks one connection to B and goes.
  ibv_qp* peer = agent_qp(b_);
  uint32_t peer_agent = 0;
  ASSERT_EQ(ext_->set_mad_agent(peer, &peer_agent), 0);
  post_mad_recv(peer, 0);
  ibv_qp* dying = agent_qp(a_, true);
  uint32_t dying_agent = 0;
  ASSERT_EQ(ext_->set_mad_agent(dying, &dying_agent), 0);
  const uint32_t local = dying_agent << 22 | 0x77;
  const uint32_t remote = peer_agent << 22 | 0x55;
  ASSERT_EQ(ext_->track_connection(dying, local, remote, 0xabcdef, b_.lid, false, nullptr), 0);
  ASSERT_EQ(ext_->track_connection(dying, dying_agent << 22 | 0x78, remote + 1, 0x123, b_.lid, false, nullptr), 0);
  ASSERT_EQ(ext_->untrack_connection(dying, dying_agent << 22 | 0x78), 0) << "ended by the library: no DREQ";
  ASSERT_EQ(ibv_destroy_qp(dying), 0);
  const ibv_wc wc = poll_one(b_.cq);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.qp_num, peer->qp_num);
  EXPECT_EQ(wc.src_qp, 1u);
  const uint8_t* m = b_.buf + kGrhBytes;
  EXPECT_EQ(m[1], 0x07);
  EXPECT_EQ(m[17], 0x15) << "DREQ";
  const auto be32 = [](const uint8_t* p) { return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]; };
  EXPECT_EQ(be32(m + 24), local);
  EXPECT_EQ(be32(m + 28), remote);
  EXPECT_EQ(be32(m + 32) >> 8, 0xabcdefu) << "the peer's QPN";
  EXPECT_TRUE(cq_is_empty(b_.cq)) << "one DREQ: the untracked connection got none";
}

}  // namespace
}  // namespace softhca::conformance
