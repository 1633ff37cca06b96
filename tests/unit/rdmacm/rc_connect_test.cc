// RC connections through rdma_cm on one host (rdmacm.md §3.7-§3.12, §3.14, §5.12): address and
// route resolution fill the id, REQ/REP/RTU carry the private data and the swapped depths, the
// library takes both QPs to RTS with each other's QPNs and PSNs, data moves, DREQ/DREP end it.
// Also the external QP flow (CONNECT_RESPONSE, rdma_init_qp_attr, rdma_establish).
#include <numeric>

#include "tests/unit/rdmacm/rdmacm_fixture.h"

namespace softhca::rdmacm_test {
namespace {

using RcConnect = RdmaCmTest;

TEST_F(RcConnect, ResolveConnectAcceptCarryPrivateDataAndTakeBothQpsToRts) {
  uint16_t port = 0;
  rdma_cm_id* listener = listen_any(&port, RDMA_PS_TCP, kLoopback);
  ASSERT_NE(listener, nullptr);
  EXPECT_GE(port, 32768);
  int ctx_tag = 0;
  listener->context = &ctx_tag;
  rdma_cm_id* active = create_id(active_ch_);
  ASSERT_NE(active, nullptr);

  // Expect: ADDR_RESOLVED binds the id to the device (verbs, default PD, port 1).
  sockaddr_in dst = ipv4(kLoopback, port);
  ASSERT_EQ(rdma_resolve_addr(active, nullptr, sa(dst), 2000), 0);
  {
    Event e = expect_event(active_ch_, RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->id, active);
    EXPECT_EQ(e->listen_id, nullptr);
  }
  ASSERT_NE(active->verbs, nullptr);
  ASSERT_NE(active->pd, nullptr);
  EXPECT_EQ(active->pd->context, active->verbs);
  EXPECT_EQ(active->port_num, 1);
  EXPECT_EQ(ntohs(rdma_get_dst_port(active)), port);
  EXPECT_NE(src_port(active), 0) << "resolve_addr binds an ephemeral port";

  // Expect: ROUTE_RESOLVED gives one path record toward our own port.
  ASSERT_EQ(rdma_resolve_route(active, 2000), 0);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ROUTE_RESOLVED); }
  ASSERT_NE(active->route.path_rec, nullptr);
  EXPECT_EQ(active->route.num_paths, 1);
  ibv_port_attr pa{};
  ASSERT_EQ(ibv_query_port(active->verbs, 1, &pa), 0);
  EXPECT_EQ(ntohs(active->route.path_rec->dlid), pa.lid);
  EXPECT_EQ(ntohs(active->route.path_rec->pkey), 0xffff);

  // Expect: rdma_create_qp leaves a connected QP in INIT.
  ASSERT_NO_FATAL_FAILURE(create_qp(active));
  EXPECT_EQ(qp_state(active->qp), IBV_QPS_INIT);

  ibv_device_attr da{};
  ASSERT_EQ(ibv_query_device(active->verbs, &da), 0);
  ASSERT_GE(da.max_qp_rd_atom, 1);
  const std::vector<uint8_t> req_data = pattern(56, 1);
  rdma_conn_param cp{};
  cp.private_data = req_data.data();
  cp.private_data_len = static_cast<uint8_t>(req_data.size());
  cp.responder_resources = static_cast<uint8_t>(std::min(da.max_qp_rd_atom, 4));
  cp.initiator_depth = 0;
  cp.retry_count = 5;
  cp.rnr_retry_count = 6;
  ASSERT_EQ(rdma_connect(active, &cp), 0) << strerror(errno);

  // Expect: CONNECT_REQUEST on a new id made from the listener, with the REQ's data (56 bytes).
  Event req = expect_event(passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_TRUE(req);
  rdma_cm_id* passive = req->id;
  track(passive);
  EXPECT_NE(passive, listener);
  EXPECT_EQ(req->listen_id, listener);
  EXPECT_EQ(passive->context, &ctx_tag);
  EXPECT_EQ(passive->channel, passive_ch_);
  EXPECT_EQ(passive->verbs, active->verbs);
  EXPECT_NE(passive->pd, nullptr);
  EXPECT_EQ(passive->port_num, 1);
  EXPECT_EQ(passive->ps, RDMA_PS_TCP);
  EXPECT_EQ(passive->qp_type, IBV_QPT_RC);
  EXPECT_EQ(src_port(passive), port);
  EXPECT_EQ(ntohs(rdma_get_dst_port(passive)), src_port(active));
  ASSERT_NE(passive->route.path_rec, nullptr);
  EXPECT_EQ(passive->route.num_paths, 1);
  ASSERT_EQ(req->param.conn.private_data_len, 56);
  ASSERT_NE(req->param.conn.private_data, nullptr);
  EXPECT_EQ(std::memcmp(req->param.conn.private_data, req_data.data(), 56), 0);
  // The depths in the passive side's view: ours are the peer's swapped.
  EXPECT_EQ(req->param.conn.responder_resources, cp.initiator_depth);
  EXPECT_EQ(req->param.conn.initiator_depth, cp.responder_resources);
  EXPECT_EQ(req->param.conn.retry_count, 5);
  EXPECT_EQ(req->param.conn.rnr_retry_count, 6);
  EXPECT_EQ(req->param.conn.qp_num, active->qp->qp_num);
  req.ack();

  ASSERT_NO_FATAL_FAILURE(create_qp(passive));
  const std::vector<uint8_t> rep_data = pattern(196, 100);
  rdma_conn_param ap{};
  ap.private_data = rep_data.data();
  ap.private_data_len = static_cast<uint8_t>(rep_data.size());
  ap.responder_resources = 0;
  ap.initiator_depth = cp.responder_resources;
  ap.rnr_retry_count = 7;
  ASSERT_EQ(rdma_accept(passive, &ap), 0) << strerror(errno);

  // Expect: the active side ESTABLISHED with the REP's data (196 bytes), then the passive side.
  {
    Event e = expect_event(active_ch_, RDMA_CM_EVENT_ESTABLISHED);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->id, active);
    ASSERT_EQ(e->param.conn.private_data_len, 196);
    EXPECT_EQ(std::memcmp(e->param.conn.private_data, rep_data.data(), 196), 0);
    EXPECT_EQ(e->param.conn.qp_num, passive->qp->qp_num);
  }
  {
    Event e = expect_event(passive_ch_, RDMA_CM_EVENT_ESTABLISHED);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->id, passive);
  }

  // Expect: both QPs in RTS, each aimed at the other, each sending with the PSN the other expects.
  ASSERT_NO_FATAL_FAILURE(expect_rts_pair(active->qp, passive->qp));
  ASSERT_NO_FATAL_FAILURE(expect_send_recv(active, passive));
  ASSERT_NO_FATAL_FAILURE(expect_rdma_write(passive, active));

  // Expect: DISCONNECTED on both sides, then TIMEWAIT_EXIT on both.
  ASSERT_EQ(rdma_disconnect(active), 0) << strerror(errno);
  EXPECT_EQ(qp_state(active->qp), IBV_QPS_ERR);
  { Event e = expect_event(passive_ch_, RDMA_CM_EVENT_DISCONNECTED); }
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_DISCONNECTED); }
  // The peer's DREQ leaves the passive QP as its application has it (librdmacm moves no QP on
  // DISCONNECTED); the application's own rdma_disconnect then takes it to ERR.
  EXPECT_EQ(qp_state(passive->qp), IBV_QPS_RTS);
  ASSERT_EQ(rdma_disconnect(passive), 0) << strerror(errno);
  EXPECT_EQ(qp_state(passive->qp), IBV_QPS_ERR);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_TIMEWAIT_EXIT); }
  { Event e = expect_event(passive_ch_, RDMA_CM_EVENT_TIMEWAIT_EXIT); }
}

TEST_F(RcConnect, AListenerOnTheWildcardAcceptsAConnectionTo127001) {
  Connected c;
  ASSERT_NO_FATAL_FAILURE(connect_rc(&c));
  EXPECT_EQ(c.listener->verbs, nullptr) << "a wildcard listener is bound to no device";
  ASSERT_NO_FATAL_FAILURE(expect_rts_pair(c.active->qp, c.passive->qp));
  ASSERT_NO_FATAL_FAILURE(expect_send_recv(c.passive, c.active));
  // Expect: the passive side may disconnect first; the active side answers by its own call.
  ASSERT_EQ(rdma_disconnect(c.passive), 0);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_DISCONNECTED); }
  ASSERT_EQ(rdma_disconnect(c.active), 0) << "disconnecting after DISCONNECTED is allowed";
  { Event e = expect_event(passive_ch_, RDMA_CM_EVENT_DISCONNECTED); }
}

TEST_F(RcConnect, WithoutAQpTheActiveSideGetsConnectResponseAndEstablishesItself) {
  uint16_t port = 0;
  rdma_cm_id* listener = listen_any(&port);
  ASSERT_NE(listener, nullptr);
  rdma_cm_id* active = create_id(active_ch_);
  ASSERT_NO_FATAL_FAILURE(resolve(active, ipv4(kLoopback, port)));

  // Before any exchange, INIT is what rdma_create_qp would use: no remote access.
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = IBV_QPS_INIT;
  ASSERT_EQ(rdma_init_qp_attr(active, &a, &mask), 0);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  EXPECT_EQ(a.qp_access_flags, 0u);
  EXPECT_EQ(a.port_num, 1);
  EXPECT_EQ(a.pkey_index, 0);

  // The application's own QP, on its own CQ, reached through conn_param.qp_num.
  ibv_cq* cq = ibv_create_cq(active->verbs, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr qa = qp_init_attr(IBV_QPT_RC);
  qa.send_cq = qa.recv_cq = cq;
  ibv_qp* qp = ibv_create_qp(active->pd, &qa);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(ibv_modify_qp(qp, &a, mask), 0);

  rdma_conn_param cp{};
  cp.qp_num = qp->qp_num;
  cp.responder_resources = 1;
  cp.initiator_depth = 1;
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  ASSERT_EQ(rdma_connect(active, &cp), 0) << strerror(errno);
  Event req = expect_event(passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_TRUE(req);
  rdma_cm_id* passive = req->id;
  track(passive);
  EXPECT_EQ(req->param.conn.qp_num, qp->qp_num);
  req.ack();
  ASSERT_NO_FATAL_FAILURE(create_qp(passive));
  rdma_conn_param ap{};
  ap.responder_resources = 1;
  ap.initiator_depth = 1;
  ap.rnr_retry_count = 7;
  ASSERT_EQ(rdma_accept(passive, &ap), 0);

  // Expect: CONNECT_RESPONSE (not ESTABLISHED) with the REP's 196 bytes and the peer's QPN.
  Event resp = expect_event(active_ch_, RDMA_CM_EVENT_CONNECT_RESPONSE);
  ASSERT_TRUE(resp);
  EXPECT_EQ(resp->param.conn.private_data_len, 196);
  EXPECT_EQ(resp->param.conn.qp_num, passive->qp->qp_num);
  resp.ack();

  ibv_qp_attr pq{};
  ibv_qp_init_attr pqi{};
  ASSERT_EQ(ibv_query_qp(passive->qp, &pq, IBV_QP_SQ_PSN | IBV_QP_RQ_PSN | IBV_QP_DEST_QPN, &pqi), 0);

  // Expect: INIT, RTR and RTS attributes of rdmacm.md §3.10 for the exchange that happened.
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_INIT;
  ASSERT_EQ(rdma_init_qp_attr(active, &a, &mask), 0);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  EXPECT_EQ(a.qp_access_flags,
            static_cast<unsigned>(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
  ASSERT_EQ(ibv_modify_qp(qp, &a, mask), 0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(rdma_init_qp_attr(active, &a, &mask), 0);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  EXPECT_EQ(a.dest_qp_num, passive->qp->qp_num);
  EXPECT_EQ(a.rq_psn, pq.sq_psn) << "we expect the PSN the peer sends with";
  EXPECT_EQ(a.max_dest_rd_atomic, 1);
  EXPECT_EQ(a.min_rnr_timer, 0);
  EXPECT_EQ(a.path_mtu, active->route.path_rec->mtu);
  ASSERT_EQ(ibv_modify_qp(qp, &a, mask), 0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(rdma_init_qp_attr(active, &a, &mask), 0);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                      IBV_QP_MAX_QP_RD_ATOMIC);
  EXPECT_EQ(a.sq_psn, pq.rq_psn) << "we send with the PSN the peer expects";
  EXPECT_EQ(a.retry_cnt, 7);
  EXPECT_EQ(a.rnr_retry, 7);
  EXPECT_EQ(a.max_rd_atomic, 1);
  EXPECT_GT(a.timeout, 0);
  ASSERT_EQ(ibv_modify_qp(qp, &a, mask), 0);

  // Expect: rdma_establish sends the RTU: the passive side is ESTABLISHED, and no event here.
  ASSERT_EQ(rdma_establish(active), 0) << strerror(errno);
  { Event e = expect_event(passive_ch_, RDMA_CM_EVENT_ESTABLISHED); }
  EXPECT_FALSE(readable(active_ch_, 0));
  ASSERT_NO_FATAL_FAILURE(expect_rts_pair(qp, passive->qp));
  EXPECT_EQ(rdma_establish(active), -1) << "the RTU was sent already";

  ASSERT_EQ(rdma_disconnect(passive), 0);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_DISCONNECTED); }
  { Event e = expect_event(passive_ch_, RDMA_CM_EVENT_DISCONNECTED); }
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(RcConnect, AUdIdAsksForAQKeyInInit) {
  rdma_cm_id* id = create_id(active_ch_, RDMA_PS_UDP);
  ASSERT_NO_FATAL_FAILURE(resolve(id, ipv4(kLoopback, 9)));
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = IBV_QPS_INIT;
  ASSERT_EQ(rdma_init_qp_attr(id, &a, &mask), 0);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  EXPECT_EQ(a.qkey, RDMA_UDP_QKEY);
}

TEST_F(RcConnect, DestroyingBothSidesOfAConnectionNeedsNoDisconnect) {
  Connected c;
  ASSERT_NO_FATAL_FAILURE(connect_rc(&c));
  // Expect: destroying the active side sends a DREQ: the passive side sees DISCONNECTED.
  destroy(c.active);
  forget(c.active);
  { Event e = expect_event(passive_ch_, RDMA_CM_EVENT_DISCONNECTED); }
}

}  // namespace
}  // namespace softhca::rdmacm_test
