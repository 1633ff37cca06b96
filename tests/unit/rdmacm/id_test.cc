// Identifiers (rdmacm.md §3.3, §3.13): rdma_destroy_id waits for the acks of the id's events and
// drops the ones nobody read; rdma_migrate_id moves queued events to another channel or makes
// the id synchronous; rdma_set_option's types, lengths and errors, and ACK_TIMEOUT on the QPs.
#include <future>

#include "tests/unit/rdmacm/rdmacm_fixture.h"

namespace softhca::rdmacm_test {
namespace {

using Ids = RdmaCmTest;

void start_resolve(rdma_cm_id* id) {
  sockaddr_in dst = ipv4(kLoopback, 9);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, sa(dst), 2000), 0) << strerror(errno);
}

TEST_F(Ids, DestroyWaitsUntilTheIdsEventIsAcked) {
  rdma_cm_id* id = create_id(active_ch_);
  forget(id);  // destroyed below
  start_resolve(id);
  rdma_cm_event* ev = nullptr;
  ASSERT_TRUE(readable(active_ch_, kWaitMs));
  ASSERT_EQ(rdma_get_cm_event(active_ch_, &ev), 0);
  auto destroyer = std::async(std::launch::async, [id] { return rdma_destroy_id(id); });
  // Expect: still waiting while the event is held (checked once; no timing is asserted).
  EXPECT_EQ(destroyer.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "rdma_destroy_id returned before its event was acked";
  EXPECT_EQ(ev->id, id) << "the event is still readable while destroy waits";
  ASSERT_EQ(rdma_ack_cm_event(ev), 0);
  ASSERT_EQ(destroyer.wait_for(std::chrono::milliseconds(kWaitMs)), std::future_status::ready);
  EXPECT_EQ(destroyer.get(), 0);
}

TEST_F(Ids, DestroyDropsTheEventsNobodyHasReadYet) {
  rdma_cm_id* id = create_id(active_ch_);
  forget(id);
  start_resolve(id);
  ASSERT_TRUE(readable(active_ch_, kWaitMs));
  auto destroyer = std::async(std::launch::async, [id] { return rdma_destroy_id(id); });
  if (destroyer.wait_for(std::chrono::milliseconds(kWaitMs)) != std::future_status::ready) {
    ADD_FAILURE() << "rdma_destroy_id waits for an event still queued on the channel";
    rdma_cm_event* ev = nullptr;  // unblock it, so that the test ends
    if (rdma_get_cm_event(active_ch_, &ev) == 0) rdma_ack_cm_event(ev);
    destroyer.wait();
    return;
  }
  EXPECT_EQ(destroyer.get(), 0);
  EXPECT_FALSE(readable(active_ch_, 0)) << "the destroyed id's event is not delivered";
}

TEST_F(Ids, MigrateMovesTheQueuedEventsToTheNewChannel) {
  rdma_cm_id* id = create_id(active_ch_);
  rdma_cm_id* other = create_id(active_ch_);
  start_resolve(id);
  start_resolve(other);
  ASSERT_TRUE(readable(active_ch_, kWaitMs));
  ASSERT_EQ(rdma_migrate_id(id, passive_ch_), 0) << strerror(errno);
  EXPECT_EQ(id->channel, passive_ch_);
  Event moved = expect_event(passive_ch_, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->id, id);
  Event stayed = expect_event(active_ch_, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_TRUE(stayed);
  EXPECT_EQ(stayed->id, other);
  EXPECT_FALSE(readable(active_ch_, 0));
  // Expect: later events of the id go to the new channel.
  moved.ack();
  ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
  Event r = expect_event(passive_ch_, RDMA_CM_EVENT_ROUTE_RESOLVED);
  EXPECT_FALSE(readable(active_ch_, 0));
}

TEST_F(Ids, MigrateToNoChannelMakesTheIdSynchronous) {
  rdma_cm_id* id = create_id(active_ch_);
  start_resolve(id);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ADDR_RESOLVED); }
  ASSERT_EQ(rdma_migrate_id(id, nullptr), 0) << strerror(errno);
  EXPECT_NE(id->channel, active_ch_);
  ASSERT_NE(id->channel, nullptr);
  // Expect: a synchronous call returns with its event in id->event.
  ASSERT_EQ(rdma_resolve_route(id, 2000), 0) << strerror(errno);
  ASSERT_NE(id->event, nullptr);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ROUTE_RESOLVED);
  EXPECT_EQ(id->event->id, id);
  errno = 0;
  EXPECT_EQ(rdma_migrate_id(id, nullptr), -1) << "already synchronous";
  EXPECT_EQ(errno, EINVAL);
  // Expect: and back to a channel of the application.
  ASSERT_EQ(rdma_migrate_id(id, passive_ch_), 0);
  EXPECT_EQ(id->channel, passive_ch_);
  EXPECT_EQ(id->event, nullptr) << "the kept event was acked";
}

TEST_F(Ids, SetOptionChecksEachOptionsLength) {
  rdma_cm_id* id = create_id(active_ch_);
  uint8_t tos = 32;
  int on = 1;
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos), 0);
  errno = 0;
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &on, sizeof on), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof on), 0);
  errno = 0;
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &tos, sizeof tos), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &on, sizeof on), 0);
  errno = 0;
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &tos, sizeof tos), -1);
  EXPECT_EQ(errno, EINVAL);
  uint8_t timeout = 18;
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout), 0);
  errno = 0;
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &on, sizeof on), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, 99, &on, sizeof on), -1);
  EXPECT_EQ(errno, ENOSYS) << "an unknown option";
  errno = 0;
  EXPECT_EQ(rdma_set_option(id, 7, RDMA_OPTION_ID_TOS, &tos, sizeof tos), -1);
  EXPECT_EQ(errno, ENOSYS) << "an unknown level";
}

TEST_F(Ids, ReuseAddrAndAfOnlyAreRefusedOnceListening) {
  uint16_t port = 0;
  rdma_cm_id* l = listen_any(&port);
  int on = 1;
  int off = 0;
  errno = 0;
  EXPECT_EQ(rdma_set_option(l, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof on), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(rdma_set_option(l, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &off, sizeof off), -1);
  EXPECT_EQ(errno, EINVAL) << "REUSEADDR goes off only on an idle id";
  errno = 0;
  EXPECT_EQ(rdma_set_option(l, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &on, sizeof on), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Ids, TosSetBeforeTheRouteIsThePathsTrafficClass) {
  rdma_cm_id* id = create_id(active_ch_);
  start_resolve(id);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ADDR_RESOLVED); }
  uint8_t tos = 0x68;
  ASSERT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos), 0);
  ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ROUTE_RESOLVED); }
  ASSERT_NE(id->route.path_rec, nullptr);
  EXPECT_EQ(id->route.path_rec->traffic_class, tos);
}

TEST_F(Ids, AckTimeoutIsTheLocalAckTimeoutOfBothQps) {
  uint16_t port = 0;
  ASSERT_NE(listen_any(&port), nullptr);
  rdma_cm_id* active = create_id(active_ch_);
  uint8_t timeout = 21;  // as pyverbs' test_rdmacm_async_traffic
  ASSERT_EQ(rdma_set_option(active, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout), 0);
  ASSERT_NO_FATAL_FAILURE(resolve(active, ipv4(kLoopback, port)));
  ASSERT_NO_FATAL_FAILURE(create_qp(active));
  rdma_conn_param p{};
  p.retry_count = 7;
  ASSERT_EQ(rdma_connect(active, &p), 0);
  Event req = expect_event(passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_TRUE(req);
  rdma_cm_id* passive = req->id;
  track(passive);
  req.ack();
  ASSERT_NO_FATAL_FAILURE(create_qp(passive));
  ASSERT_EQ(rdma_set_option(passive, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout), 0);
  ASSERT_EQ(rdma_accept(passive, &p), 0);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ESTABLISHED); }
  { Event e = expect_event(passive_ch_, RDMA_CM_EVENT_ESTABLISHED); }
  for (rdma_cm_id* id : {active, passive}) {
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    ASSERT_EQ(ibv_query_qp(id->qp, &a, IBV_QP_TIMEOUT, &ia), 0);
    EXPECT_EQ(a.timeout, 21) << (id == active ? "active" : "passive");
  }
}

TEST_F(Ids, AckTimeoutOnAUdIdIsEinval) {
  rdma_cm_id* id = create_id(active_ch_, RDMA_PS_UDP);
  uint8_t timeout = 14;
  errno = 0;
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout), -1);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softhca::rdmacm_test
