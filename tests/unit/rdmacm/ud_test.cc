// UD ids of RDMA_PS_UDP (rdmacm.md §3.5, §3.8, §3.10, §4.7): the library's UD QP is RTS at once
// with Q_Key 0x01234567; rdma_connect is a SIDR_REQ whose 180 bytes reach the listener; the
// SIDR_REP of rdma_accept gives the active side a QPN, Q_Key and an address vector a datagram
// reaches the peer with; a port nobody listens on and rdma_reject are UNREACHABLE 1 and 2.
#include <numeric>

#include "tests/unit/rdmacm/rdmacm_fixture.h"

namespace softhca::rdmacm_test {
namespace {

constexpr uint32_t kGrhBytes = 40;

class UdIds : public RdmaCmTest {
 protected:
  // A UD active id with its QP, resolved toward 127.0.0.1:port.
  rdma_cm_id* active_toward(uint16_t port) {
    rdma_cm_id* a = create_id(active_ch_, RDMA_PS_UDP);
    resolve(a, ipv4(kLoopback, port));
    create_qp(a, IBV_QPT_UD);
    return a;
  }
};

TEST_F(UdIds, TheLibrarysUdQpIsReadyToSendWithTheRdmaCmQKey) {
  rdma_cm_id* a = active_toward(9);
  ASSERT_NE(a->qp, nullptr);
  ibv_qp_attr attr{};
  ibv_qp_init_attr ia{};
  ASSERT_EQ(ibv_query_qp(a->qp, &attr, IBV_QP_STATE | IBV_QP_QKEY, &ia), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(attr.qkey, RDMA_UDP_QKEY);
  EXPECT_EQ(RDMA_UDP_QKEY, 0x01234567u);
}

TEST_F(UdIds, SidrResolvesThePeersQpAndADatagramReachesIt) {
  uint16_t port = 0;
  rdma_cm_id* listener = listen_any(&port, RDMA_PS_UDP);
  ASSERT_NE(listener, nullptr);
  rdma_cm_id* active = active_toward(port);
  ASSERT_NE(active->qp, nullptr);
  std::vector<uint8_t> data(180);
  std::iota(data.begin(), data.end(), uint8_t{3});
  rdma_conn_param cp{};
  cp.private_data = data.data();
  cp.private_data_len = 180;
  ASSERT_EQ(rdma_connect(active, &cp), 0) << strerror(errno);

  // Expect: CONNECT_REQUEST with param.ud: the SIDR_REQ's 180 bytes, no address yet.
  Event req = expect_event(passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_TRUE(req);
  rdma_cm_id* passive = req->id;
  track(passive);
  EXPECT_EQ(req->listen_id, listener);
  EXPECT_EQ(passive->qp_type, IBV_QPT_UD);
  ASSERT_EQ(req->param.ud.private_data_len, 180);
  EXPECT_EQ(std::memcmp(req->param.ud.private_data, data.data(), 180), 0);
  EXPECT_EQ(req->param.ud.qp_num, 0u);
  req.ack();

  // The application's own UD QP, named by qp_num (no QP on the passive id).
  ibv_cq* cq = ibv_create_cq(passive->verbs, 8, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr qa = qp_init_attr(IBV_QPT_UD);
  qa.send_cq = qa.recv_cq = cq;
  ibv_qp* qp = ibv_create_qp(passive->pd, &qa);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = IBV_QPS_INIT;
  ASSERT_EQ(rdma_init_qp_attr(passive, &a, &mask), 0);
  ASSERT_EQ(ibv_modify_qp(qp, &a, mask), 0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  a.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
  std::vector<uint8_t> in(kGrhBytes + 64, 0);
  ibv_mr* rmr = reg(passive->pd, in.data(), in.size());
  ASSERT_NE(rmr, nullptr);
  ibv_sge rs{reinterpret_cast<uintptr_t>(in.data()), static_cast<uint32_t>(in.size()), rmr->lkey};
  ibv_recv_wr rwr{};
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(ibv_post_recv(qp, &rwr, &rbad), 0);

  rdma_conn_param ap{};
  ap.qp_num = qp->qp_num;
  const char reply[] = "sidr reply";
  ap.private_data = reply;
  ap.private_data_len = sizeof reply;
  ASSERT_EQ(rdma_accept(passive, &ap), 0) << strerror(errno);
  EXPECT_FALSE(readable(passive_ch_, 0)) << "a UD accept has no event on the passive side";

  // Expect: ESTABLISHED with the peer's QPN, the Q_Key, and the SIDR_REP's 136 bytes.
  Event est = expect_event(active_ch_, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_TRUE(est);
  EXPECT_EQ(est->param.ud.qp_num, qp->qp_num);
  EXPECT_EQ(est->param.ud.qkey, RDMA_UDP_QKEY);
  ASSERT_EQ(est->param.ud.private_data_len, 136);
  EXPECT_EQ(std::memcmp(est->param.ud.private_data, reply, sizeof reply), 0);
  EXPECT_EQ(est->param.ud.ah_attr.port_num, 1);

  ibv_ah* ah = ibv_create_ah(active->pd, &est->param.ud.ah_attr);
  ASSERT_NE(ah, nullptr) << strerror(errno);
  std::vector<uint8_t> out(64);
  std::iota(out.begin(), out.end(), uint8_t{0x40});
  ibv_mr* smr = reg(active->pd, out.data(), out.size());
  ASSERT_NE(smr, nullptr);
  ibv_sge ss{reinterpret_cast<uintptr_t>(out.data()), static_cast<uint32_t>(out.size()), smr->lkey};
  ibv_send_wr swr{};
  swr.sg_list = &ss;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  swr.wr.ud.ah = ah;
  swr.wr.ud.remote_qpn = est->param.ud.qp_num;
  swr.wr.ud.remote_qkey = est->param.ud.qkey;
  ibv_send_wr* sbad = nullptr;
  ASSERT_EQ(ibv_post_send(active->qp, &swr, &sbad), 0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(active->send_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  ASSERT_TRUE(poll_one(cq, &wc)) << "the datagram did not arrive";
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(wc.byte_len, kGrhBytes + out.size());
  EXPECT_EQ(wc.src_qp, active->qp->qp_num);
  EXPECT_EQ(std::memcmp(in.data() + kGrhBytes, out.data(), out.size()), 0);

  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(UdIds, AcceptingWithTheIdsQpGivesThatQpsNumber) {
  uint16_t port = 0;
  ASSERT_NE(listen_any(&port, RDMA_PS_UDP), nullptr);
  rdma_cm_id* active = active_toward(port);
  ASSERT_EQ(rdma_connect(active, nullptr), 0) << "a UD connect needs no conn_param";
  Event req = expect_event(passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_TRUE(req);
  rdma_cm_id* passive = req->id;
  track(passive);
  req.ack();
  ASSERT_NO_FATAL_FAILURE(create_qp(passive, IBV_QPT_UD));
  ASSERT_EQ(rdma_accept(passive, nullptr), 0);
  Event est = expect_event(active_ch_, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_TRUE(est);
  EXPECT_EQ(est->param.ud.qp_num, passive->qp->qp_num);
  EXPECT_EQ(est->param.ud.qkey, RDMA_UDP_QKEY);
}

TEST_F(UdIds, SidrToAPortNobodyListensOnIsUnreachable1) {
  rdma_cm_id* active = active_toward(9);
  ASSERT_EQ(rdma_connect(active, nullptr), 0);
  Event e = expect_event(active_ch_, RDMA_CM_EVENT_UNREACHABLE, 1);
}

TEST_F(UdIds, ARejectedSidrIsUnreachable2) {
  uint16_t port = 0;
  ASSERT_NE(listen_any(&port, RDMA_PS_UDP), nullptr);
  rdma_cm_id* active = active_toward(port);
  ASSERT_EQ(rdma_connect(active, nullptr), 0);
  Event req = expect_event(passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_TRUE(req);
  rdma_cm_id* passive = req->id;
  track(passive);
  req.ack();
  ASSERT_EQ(rdma_reject(passive, nullptr, 0), 0) << strerror(errno);
  Event e = expect_event(active_ch_, RDMA_CM_EVENT_UNREACHABLE, 2);
}

TEST_F(UdIds, SidrPrivateDataOver180BytesIsEinval) {
  uint16_t port = 0;
  ASSERT_NE(listen_any(&port, RDMA_PS_UDP), nullptr);
  rdma_cm_id* active = active_toward(port);
  uint8_t big[181] = {};
  rdma_conn_param cp{};
  cp.private_data = big;
  cp.private_data_len = 181;
  errno = 0;
  EXPECT_EQ(rdma_connect(active, &cp), -1);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softhca::rdmacm_test
