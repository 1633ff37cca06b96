// Event channels (rdmacm.md §3.2, §3.3, §2.10), devices (§3.18) and the rsocket stubs (§6.2):
// the channel fd polls readable exactly while events are queued, honours O_NONBLOCK, delivers in
// order; bad arguments are EINVAL; rdma_get_devices gives the contexts ids get.
#include <fcntl.h>
#include <rdma/rsocket.h>
#include <unistd.h>

#include <future>
#include <string>

#include "tests/unit/rdmacm/rdmacm_fixture.h"

namespace softhca::rdmacm_test {
namespace {

using Channels = RdmaCmTest;

// Starts an address resolution whose ADDR_RESOLVED event is queued on id's channel at once.
void queue_addr_resolved(rdma_cm_id* id) {
  sockaddr_in dst = ipv4(kLoopback, 9);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, sa(dst), 2000), 0) << strerror(errno);
}

TEST_F(Channels, TheFdIsReadableExactlyWhileAnEventIsQueued) {
  rdma_cm_id* a = create_id(active_ch_);
  rdma_cm_id* b = create_id(active_ch_);
  EXPECT_FALSE(readable(active_ch_, 0)) << "nothing queued yet";
  queue_addr_resolved(a);
  queue_addr_resolved(b);
  ASSERT_TRUE(readable(active_ch_, kWaitMs));
  rdma_cm_event* e1 = nullptr;
  ASSERT_EQ(rdma_get_cm_event(active_ch_, &e1), 0);
  Event first(e1);
  // Expect: one event still queued, the fd still readable; then nothing, whatever is unacked.
  EXPECT_TRUE(readable(active_ch_, kWaitMs));
  rdma_cm_event* e2 = nullptr;
  ASSERT_EQ(rdma_get_cm_event(active_ch_, &e2), 0);
  Event second(e2);
  EXPECT_FALSE(readable(active_ch_, 0));
  EXPECT_NE(first.get(), second.get()) << "each event is its own object";
}

TEST_F(Channels, ANonBlockingChannelWithNothingQueuedGivesEagain) {
  const int flags = fcntl(active_ch_->fd, F_GETFL);
  ASSERT_EQ(fcntl(active_ch_->fd, F_SETFL, flags | O_NONBLOCK), 0);
  rdma_cm_event* ev = nullptr;
  errno = 0;
  EXPECT_EQ(rdma_get_cm_event(active_ch_, &ev), -1);
  EXPECT_EQ(errno, EAGAIN);
  // Expect: once an event is queued the same call returns it.
  rdma_cm_id* id = create_id(active_ch_);
  queue_addr_resolved(id);
  ASSERT_TRUE(readable(active_ch_, kWaitMs));
  ASSERT_EQ(rdma_get_cm_event(active_ch_, &ev), 0);
  Event e(ev);
  EXPECT_EQ(e->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_EQ(rdma_get_cm_event(active_ch_, &ev), -1);
  EXPECT_EQ(errno, EAGAIN);
}

TEST_F(Channels, ABlockingReadWaitsForTheNextEvent) {
  rdma_cm_id* id = create_id(active_ch_);
  auto reader = std::async(std::launch::async, [ch = active_ch_] {
    rdma_cm_event* ev = nullptr;
    const int rc = rdma_get_cm_event(ch, &ev);
    return rc == 0 ? ev : nullptr;
  });
  EXPECT_EQ(reader.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout)
      << "rdma_get_cm_event returned with nothing queued";
  queue_addr_resolved(id);
  ASSERT_EQ(reader.wait_for(std::chrono::milliseconds(kWaitMs)), std::future_status::ready);
  Event e(reader.get());
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, id);
  EXPECT_EQ(e->event, RDMA_CM_EVENT_ADDR_RESOLVED);
}

TEST_F(Channels, EventsComeInTheOrderTheyWereQueued) {
  std::vector<rdma_cm_id*> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(create_id(active_ch_));
  for (rdma_cm_id* id : ids) queue_addr_resolved(id);
  for (rdma_cm_id* id : ids) {
    Event e = expect_event(active_ch_, RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->id, id);
  }
  // The same id's events keep their order too.
  ASSERT_EQ(rdma_resolve_route(ids[0], 2000), 0);
  ASSERT_EQ(rdma_resolve_route(ids[1], 2000), 0);
  Event r0 = expect_event(active_ch_, RDMA_CM_EVENT_ROUTE_RESOLVED);
  Event r1 = expect_event(active_ch_, RDMA_CM_EVENT_ROUTE_RESOLVED);
  ASSERT_TRUE(r0 && r1);
  EXPECT_EQ(r0->id, ids[0]);
  EXPECT_EQ(r1->id, ids[1]);
}

TEST_F(Channels, NullArgumentsAreEinval) {
  rdma_cm_event* ev = nullptr;
  errno = 0;
  EXPECT_EQ(rdma_get_cm_event(nullptr, &ev), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(rdma_get_cm_event(active_ch_, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(rdma_ack_cm_event(nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(rdma_create_id(active_ch_, nullptr, nullptr, RDMA_PS_TCP), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(rdma_destroy_id(nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Channels, AnEventAcknowledgedTwiceIsEinvalTheSecondTime) {
  rdma_cm_id* id = create_id(active_ch_);
  queue_addr_resolved(id);
  rdma_cm_event* ev = nullptr;
  ASSERT_EQ(rdma_get_cm_event(active_ch_, &ev), 0);
  ASSERT_EQ(rdma_ack_cm_event(ev), 0);
  errno = 0;
  EXPECT_EQ(rdma_ack_cm_event(ev), -1) << "refused, not freed again (ASan would see a double free)";
  EXPECT_EQ(errno, EINVAL);
  rdma_cm_event never_handed_out{};
  errno = 0;
  EXPECT_EQ(rdma_ack_cm_event(&never_handed_out), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Channels, EventStrNamesEveryTypeAndUnknownOnes) {
  const char* names[] = {"RDMA_CM_EVENT_ADDR_RESOLVED",    "RDMA_CM_EVENT_ADDR_ERROR",
                         "RDMA_CM_EVENT_ROUTE_RESOLVED",   "RDMA_CM_EVENT_ROUTE_ERROR",
                         "RDMA_CM_EVENT_CONNECT_REQUEST",  "RDMA_CM_EVENT_CONNECT_RESPONSE",
                         "RDMA_CM_EVENT_CONNECT_ERROR",    "RDMA_CM_EVENT_UNREACHABLE",
                         "RDMA_CM_EVENT_REJECTED",         "RDMA_CM_EVENT_ESTABLISHED",
                         "RDMA_CM_EVENT_DISCONNECTED",     "RDMA_CM_EVENT_DEVICE_REMOVAL",
                         "RDMA_CM_EVENT_MULTICAST_JOIN",   "RDMA_CM_EVENT_MULTICAST_ERROR",
                         "RDMA_CM_EVENT_ADDR_CHANGE",      "RDMA_CM_EVENT_TIMEWAIT_EXIT"};
  for (int i = 0; i < 16; ++i) {
    EXPECT_STREQ(rdma_event_str(static_cast<rdma_cm_event_type>(i)), names[i]) << i;
  }
  EXPECT_STREQ(rdma_event_str(static_cast<rdma_cm_event_type>(16)), "UNKNOWN EVENT");
  EXPECT_STREQ(rdma_event_str(static_cast<rdma_cm_event_type>(-1)), "UNKNOWN EVENT");
}

TEST_F(Channels, AnUnknownPortSpaceIsEinval) {
  rdma_cm_id* id = nullptr;
  errno = 0;
  EXPECT_EQ(rdma_create_id(active_ch_, &id, nullptr, static_cast<rdma_port_space>(0x0999)), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Channels, ANewIdHasItsChannelContextPortSpaceAndQpTypeAndNothingElse) {
  int tag = 0;
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(active_ch_, &id, &tag, RDMA_PS_UDP), 0);
  track(id);
  EXPECT_EQ(id->channel, active_ch_);
  EXPECT_EQ(id->context, &tag);
  EXPECT_EQ(id->ps, RDMA_PS_UDP);
  EXPECT_EQ(id->qp_type, IBV_QPT_UD);
  EXPECT_EQ(id->verbs, nullptr);
  EXPECT_EQ(id->pd, nullptr);
  EXPECT_EQ(id->qp, nullptr);
  EXPECT_EQ(id->route.path_rec, nullptr);
  EXPECT_EQ(id->route.num_paths, 0);
  rdma_cm_id* tcp = create_id(active_ch_, RDMA_PS_TCP);
  EXPECT_EQ(tcp->qp_type, IBV_QPT_RC);
}

TEST_F(Channels, GetDevicesListsTheContextsIdsAreBoundTo) {
  int n = -1;
  ibv_context** list = rdma_get_devices(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_GE(n, 1);
  EXPECT_EQ(list[n], nullptr) << "the list is NULL-terminated";
  rdma_cm_id* id = create_id(active_ch_);
  queue_addr_resolved(id);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ADDR_RESOLVED); }
  bool found = false;
  for (int i = 0; i < n; ++i) found = found || list[i] == id->verbs;
  EXPECT_TRUE(found) << "id->verbs is one of rdma_get_devices' contexts";
  // Expect: a second call gives the same contexts (devices are opened once per process).
  int n2 = 0;
  ibv_context** again = rdma_get_devices(&n2);
  ASSERT_NE(again, nullptr);
  ASSERT_EQ(n2, n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(again[i], list[i]);
  rdma_free_devices(again);
  rdma_free_devices(list);
  // Expect: the contexts stay open after rdma_free_devices.
  ibv_device_attr da{};
  EXPECT_EQ(ibv_query_device(id->verbs, &da), 0);
  ibv_context** nocount = rdma_get_devices(nullptr);
  ASSERT_NE(nocount, nullptr);
  rdma_free_devices(nocount);
}

TEST(Rsockets, RsocketIsNotImplemented) {
  errno = 0;
  EXPECT_EQ(rsocket(AF_INET, SOCK_STREAM, 0), -1);
  EXPECT_EQ(errno, ENOSYS);
}

TEST(Rsockets, RpollOnAPipeIsPoll) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pollfd p{fds[0], POLLIN, 0};
  EXPECT_EQ(rpoll(&p, 1, 0), 0) << "an empty pipe is not readable";
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  p.revents = 0;
  EXPECT_EQ(rpoll(&p, 1, kWaitMs), 1);
  EXPECT_TRUE(p.revents & POLLIN);
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace softhca::rdmacm_test
