// Synchronous ids (rdmacm.md §3.4, §3.16, §5.5): rdma_create_ep, rdma_get_request, rdma_accept,
// rdma_connect and rdma_disconnect as rdma_server and rdma_client call them, each side in its own
// thread; every call returns with its event kept in id->event. The server's thread is bounded by a
// future's deadline; the client is the test's own thread.
#include <future>
#include <string>

#include "tests/unit/rdmacm/rdmacm_fixture.h"

namespace softhca::rdmacm_test {
namespace {

using SyncIds = RdmaCmTest;

// What the server thread saw, for the test thread to check.
struct ServerSide {
  std::string failure;  // empty: every step worked
  rdma_cm_event_type request_event{};
  rdma_cm_event_type accept_event{};
  rdma_cm_event_type disconnect_event{};
  std::vector<uint8_t> received;
};

ibv_qp_init_attr ep_attr() {
  ibv_qp_init_attr a = qp_init_attr(IBV_QPT_RC);
  a.qp_context = nullptr;
  return a;
}

TEST_F(SyncIds, RdmaServerAndRdmaClientConnectSendAndDisconnect) {
  // The server's listener first, on an ephemeral port, so that the client knows where to go.
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "0", &hints, &res), 0);
  rdma_cm_id* listen = nullptr;
  ibv_qp_init_attr la = ep_attr();
  ASSERT_EQ(rdma_create_ep(&listen, res, nullptr, &la), 0) << strerror(errno);
  rdma_freeaddrinfo(res);
  ASSERT_EQ(rdma_listen(listen, 1), 0);
  const uint16_t port = src_port(listen);
  EXPECT_NE(listen->channel, nullptr) << "a synchronous id has a private channel";

  const std::string reply = "accepted by the server";
  auto server = std::async(std::launch::async, [listen, &reply] {
    ServerSide s;
    rdma_cm_id* id = nullptr;
    if (!readable(listen->channel, kWaitMs)) {  // so that a client that failed leaves no thread blocked
      s.failure = "no CONNECT_REQUEST";
      return s;
    }
    if (rdma_get_request(listen, &id) != 0) {
      s.failure = std::string("rdma_get_request: ") + strerror(errno);
      return s;
    }
    s.request_event = id->event->event;
    if (id->qp == nullptr) s.failure = "rdma_get_request made no QP from the ep's attributes";
    std::vector<uint8_t> buf(32, 0);
    ibv_mr* mr = ibv_reg_mr(id->pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), static_cast<uint32_t>(buf.size()), mr ? mr->lkey : 0};
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (s.failure.empty() && (mr == nullptr || ibv_post_recv(id->qp, &wr, &bad) != 0)) s.failure = "post_recv";
    rdma_conn_param p{};
    p.private_data = reply.data();
    p.private_data_len = static_cast<uint8_t>(reply.size());
    if (s.failure.empty() && rdma_accept(id, &p) != 0) s.failure = std::string("rdma_accept: ") + strerror(errno);
    if (s.failure.empty()) s.accept_event = id->event->event;
    ibv_wc wc{};
    if (s.failure.empty() && !poll_one(id->recv_cq, &wc)) s.failure = "no receive";
    if (s.failure.empty()) s.received.assign(buf.begin(), buf.begin() + wc.byte_len);
    if (s.failure.empty() && rdma_disconnect(id) != 0) s.failure = std::string("rdma_disconnect: ") + strerror(errno);
    if (s.failure.empty()) s.disconnect_event = id->event->event;
    if (mr != nullptr) ibv_dereg_mr(mr);
    rdma_destroy_ep(id);
    return s;
  });

  hints = rdma_addrinfo{};
  hints.ai_port_space = RDMA_PS_TCP;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", std::to_string(port).c_str(), &hints, &res), 0);
  rdma_cm_id* id = nullptr;
  ibv_qp_init_attr ca = ep_attr();
  ASSERT_EQ(rdma_create_ep(&id, res, nullptr, &ca), 0) << strerror(errno);
  rdma_freeaddrinfo(res);
  ASSERT_NE(id->qp, nullptr) << "rdma_create_ep with QP attributes makes the QP";
  ASSERT_NE(id->event, nullptr);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ROUTE_RESOLVED) << "the last step of rdma_create_ep";
  EXPECT_NE(id->send_cq, nullptr);
  EXPECT_NE(id->recv_cq, nullptr);

  // Expect: rdma_connect returns once ESTABLISHED, the REP's data readable in id->event.
  ASSERT_EQ(rdma_connect(id, nullptr), 0) << strerror(errno);
  ASSERT_NE(id->event, nullptr);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_GE(id->event->param.conn.private_data_len, reply.size());
  EXPECT_EQ(std::memcmp(id->event->param.conn.private_data, reply.data(), reply.size()), 0);

  const std::string msg = "hello from rdma_client";
  ibv_mr* mr = reg(id->pd, const_cast<char*>(msg.data()), msg.size());
  ASSERT_NE(mr, nullptr);
  ibv_sge sge{reinterpret_cast<uintptr_t>(msg.data()), static_cast<uint32_t>(msg.size()), mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(id->qp, &wr, &bad), 0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(id->send_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);

  ASSERT_EQ(server.wait_for(std::chrono::milliseconds(kWaitMs)), std::future_status::ready)
      << "the server thread did not finish";
  const ServerSide s = server.get();
  EXPECT_EQ(s.failure, "");
  EXPECT_EQ(s.request_event, RDMA_CM_EVENT_CONNECT_REQUEST);
  EXPECT_EQ(s.accept_event, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(s.disconnect_event, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(std::string(s.received.begin(), s.received.end()), msg);

  // Expect: the server disconnected first; our rdma_disconnect returns with that DISCONNECTED.
  ASSERT_EQ(rdma_disconnect(id), 0) << strerror(errno);
  ASSERT_NE(id->event, nullptr);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_DISCONNECTED);
  rdma_destroy_ep(id);
  rdma_destroy_ep(listen);
}

TEST_F(SyncIds, ASynchronousConnectToNobodyIsEconnrefused) {
  rdma_cm_id* id = create_id(nullptr);
  sockaddr_in dst = ipv4(kLoopback, 9);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, sa(dst), 2000), 0) << strerror(errno);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ROUTE_RESOLVED);
  ASSERT_NO_FATAL_FAILURE(create_qp(id));
  rdma_conn_param p{};
  errno = 0;
  EXPECT_EQ(rdma_connect(id, &p), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
  ASSERT_NE(id->event, nullptr);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(id->event->status, 8);
}

TEST_F(SyncIds, GetRequestOnAListenerWithAChannelIsEinval) {
  uint16_t port = 0;
  rdma_cm_id* l = listen_any(&port);
  rdma_cm_id* got = nullptr;
  errno = 0;
  EXPECT_EQ(rdma_get_request(l, &got), -1);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softhca::rdmacm_test
