// Refusals and misuse (rdmacm.md §3.1, §3.8, §3.12, §5.12): rdma_reject reaches the active side
// as REJECTED 28 with the 148-byte REJ data; a port nobody listens on is REJECTED 8 by the device;
// calls in the wrong state and private data over the message's room are EINVAL.
#include <numeric>

#include "tests/unit/rdmacm/rdmacm_fixture.h"

namespace softhca::rdmacm_test {
namespace {

// A port of RDMA_PS_TCP no test binds (the tests' listeners take ephemeral ports, 32768 and up).
constexpr uint16_t kUnlistenedPort = 9;

class Rejections : public RdmaCmTest {
 protected:
  // An active id with a QP, resolved toward a fresh listener, its REQ sent; the passive id of the
  // CONNECT_REQUEST in *passive.
  void request(rdma_cm_id** active, rdma_cm_id** passive) {
    uint16_t port = 0;
    ASSERT_NE(listen_any(&port), nullptr);
    *active = create_id(active_ch_);
    ASSERT_NO_FATAL_FAILURE(resolve(*active, ipv4(kLoopback, port)));
    ASSERT_NO_FATAL_FAILURE(create_qp(*active));
    rdma_conn_param p{};
    p.responder_resources = 1;
    p.initiator_depth = 1;
    ASSERT_EQ(rdma_connect(*active, &p), 0) << strerror(errno);
    Event req = expect_event(passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_TRUE(req);
    *passive = req->id;
    track(*passive);
  }
};

TEST_F(Rejections, RejectWithPrivateDataIsRejected28WithAll148BytesAndTheQpInError) {
  rdma_cm_id* active = nullptr;
  rdma_cm_id* passive = nullptr;
  ASSERT_NO_FATAL_FAILURE(request(&active, &passive));
  std::vector<uint8_t> data(148);
  std::iota(data.begin(), data.end(), uint8_t{7});
  ASSERT_EQ(rdma_reject(passive, data.data(), static_cast<uint8_t>(data.size())), 0) << strerror(errno);
  Event e = expect_event(active_ch_, RDMA_CM_EVENT_REJECTED, 28);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, active);
  ASSERT_EQ(e->param.conn.private_data_len, 148);
  EXPECT_EQ(std::memcmp(e->param.conn.private_data, data.data(), 148), 0);
  EXPECT_EQ(qp_state(active->qp), IBV_QPS_ERR);
  EXPECT_FALSE(readable(passive_ch_, 0)) << "nothing follows a reject on the passive side";
}

TEST_F(Rejections, ShortRejectDataArrivesZeroPaddedTo148Bytes) {
  rdma_cm_id* active = nullptr;
  rdma_cm_id* passive = nullptr;
  ASSERT_NO_FATAL_FAILURE(request(&active, &passive));
  const char text[] = "no thanks";
  ASSERT_EQ(rdma_reject(passive, text, sizeof text), 0);
  Event e = expect_event(active_ch_, RDMA_CM_EVENT_REJECTED, 28);
  ASSERT_TRUE(e);
  ASSERT_EQ(e->param.conn.private_data_len, 148);
  const auto* got = static_cast<const uint8_t*>(e->param.conn.private_data);
  EXPECT_EQ(std::memcmp(got, text, sizeof text), 0);
  for (size_t i = sizeof text; i < 148; ++i) EXPECT_EQ(got[i], 0) << i;
}

TEST_F(Rejections, AConnectToAPortNobodyListensOnIsRejected8) {
  rdma_cm_id* active = create_id(active_ch_);
  ASSERT_NO_FATAL_FAILURE(resolve(active, ipv4(kLoopback, kUnlistenedPort)));
  ASSERT_NO_FATAL_FAILURE(create_qp(active));
  rdma_conn_param p{};
  ASSERT_EQ(rdma_connect(active, &p), 0);
  Event e = expect_event(active_ch_, RDMA_CM_EVENT_REJECTED, 8);
  ASSERT_TRUE(e);
  EXPECT_EQ(qp_state(active->qp), IBV_QPS_ERR);
}

TEST_F(Rejections, AcceptAndRejectOnAnActiveIdAreEinval) {
  uint16_t port = 0;
  ASSERT_NE(listen_any(&port), nullptr);
  rdma_cm_id* active = create_id(active_ch_);
  ASSERT_NO_FATAL_FAILURE(resolve(active, ipv4(kLoopback, port)));
  ASSERT_NO_FATAL_FAILURE(create_qp(active));
  rdma_conn_param p{};
  errno = 0;
  EXPECT_EQ(rdma_accept(active, &p), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(rdma_reject(active, nullptr, 0), -1) << "no request to reject";
  EXPECT_EQ(errno, EINVAL);
  ASSERT_EQ(rdma_connect(active, &p), 0);
  errno = 0;
  EXPECT_EQ(rdma_accept(active, &p), -1) << "an active id accepts nothing, even while connecting";
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Rejections, ConnectOutsideRouteResolvedIsEinval) {
  uint16_t port = 0;
  rdma_cm_id* listener = listen_any(&port);
  rdma_conn_param p{};
  rdma_cm_id* fresh = create_id(active_ch_);
  errno = 0;
  EXPECT_EQ(rdma_connect(fresh, &p), -1) << "idle";
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(rdma_connect(listener, &p), -1) << "listening";
  EXPECT_EQ(errno, EINVAL);
  rdma_cm_id* half = create_id(active_ch_);
  sockaddr_in dst = ipv4(kLoopback, port);
  ASSERT_EQ(rdma_resolve_addr(half, nullptr, sa(dst), 2000), 0);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ADDR_RESOLVED); }
  errno = 0;
  EXPECT_EQ(rdma_connect(half, &p), -1) << "address resolved, route not";
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(rdma_resolve_route(fresh, 2000), -1) << "route before address";
  EXPECT_EQ(errno, EINVAL);
  // Expect: a resolved id without a QP and without conn_param has nothing to connect (PS_TCP).
  ASSERT_EQ(rdma_resolve_route(half, 2000), 0);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ROUTE_RESOLVED); }
  errno = 0;
  EXPECT_EQ(rdma_connect(half, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  // Expect: a second connect of a connecting id is EINVAL.
  ASSERT_NO_FATAL_FAILURE(create_qp(half));
  ASSERT_EQ(rdma_connect(half, &p), 0);
  errno = 0;
  EXPECT_EQ(rdma_connect(half, &p), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Rejections, DisconnectingANeverConnectedIdIsEinval) {
  rdma_cm_id* fresh = create_id(active_ch_);
  errno = 0;
  EXPECT_EQ(rdma_disconnect(fresh), -1);
  EXPECT_EQ(errno, EINVAL);
  rdma_cm_id* resolved = create_id(active_ch_);
  ASSERT_NO_FATAL_FAILURE(resolve(resolved, ipv4(kLoopback, 9)));
  errno = 0;
  EXPECT_EQ(rdma_disconnect(resolved), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Rejections, PrivateDataOverTheRoomOfEachMessageIsEinval) {
  uint8_t big[200] = {};
  rdma_cm_id* active = nullptr;
  rdma_cm_id* passive = nullptr;
  uint16_t port = 0;
  ASSERT_NE(listen_any(&port), nullptr);
  active = create_id(active_ch_);
  ASSERT_NO_FATAL_FAILURE(resolve(active, ipv4(kLoopback, port)));
  ASSERT_NO_FATAL_FAILURE(create_qp(active));
  rdma_conn_param p{};
  p.private_data = big;
  p.private_data_len = 57;  // REQ: 92 bytes less the 36-byte CMA header
  errno = 0;
  EXPECT_EQ(rdma_connect(active, &p), -1);
  EXPECT_EQ(errno, EINVAL);
  p.private_data_len = 56;
  ASSERT_EQ(rdma_connect(active, &p), 0) << "56 bytes fit; the failed call changed nothing";
  Event req = expect_event(passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_TRUE(req);
  passive = req->id;
  track(passive);
  req.ack();
  ASSERT_NO_FATAL_FAILURE(create_qp(passive));
  rdma_conn_param a{};
  a.private_data = big;
  a.private_data_len = 197;  // REP: 196
  errno = 0;
  EXPECT_EQ(rdma_accept(passive, &a), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(rdma_reject(passive, big, 149), -1);  // REJ: 148
  EXPECT_EQ(errno, EINVAL);
  ASSERT_EQ(rdma_reject(passive, big, 148), 0) << strerror(errno);
  Event e = expect_event(active_ch_, RDMA_CM_EVENT_REJECTED, 28);
}

}  // namespace
}  // namespace softhca::rdmacm_test
