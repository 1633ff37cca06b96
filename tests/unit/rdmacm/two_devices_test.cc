// rdma_cm between two hosts (SOFTHCA_NUM_DEVICES=2: two in-process devices, LIDs 1 and 2, each
// with its own MAD agent): an address of the other host resolves to its LID, the REQ crosses the
// fabric to QP1 of the other port, each id is bound to its own device, and data moves between
// them (docs/addresses.md, docs/cm.md). On InfiniBand a host's address is 127.F.(lid >> 8).(lid & 0xff).
#include "tests/unit/rdmacm/rdmacm_fixture.h"

namespace softhca::rdmacm_test {
namespace {

class TwoDevices : public RdmaCmTest {
 protected:
  void SetUp() override {
    RdmaCmTest::SetUp();
    int n = 0;
    ibv_context** list = rdma_get_devices(&n);
    ASSERT_NE(list, nullptr);
    ASSERT_EQ(n, 2) << "SOFTHCA_NUM_DEVICES=2";
    for (int i = 0; i < 2; ++i) {
      ibv_port_attr pa{};
      ASSERT_EQ(ibv_query_port(list[i], 1, &pa), 0);
      ctx_[i] = list[i];
      lid_[i] = pa.lid;
    }
    rdma_free_devices(list);
    // The first host's own address: the source an unbound id gets toward 0.0.0.0 ("the caller's
    // own host", docs/addresses.md); the other host's shares its 127.F prefix.
    rdma_cm_id* probe = create_id(active_ch_);
    sockaddr_in self = ipv4(0u, 9);
    ASSERT_EQ(rdma_resolve_addr(probe, nullptr, sa(self), 2000), 0);
    { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ADDR_RESOLVED); }
    ASSERT_EQ(probe->verbs, ctx_[0]);
    const uint32_t own = src_ip(probe);
    ASSERT_EQ(own >> 24, 127u);
    ASSERT_EQ(own & 0xffff, lid_[0]);
    other_ip_ = (own & 0xffff0000u) | lid_[1];
  }

  ibv_context* ctx_[2] = {};
  uint16_t lid_[2] = {};
  uint32_t other_ip_ = 0;
};

TEST_F(TwoDevices, AConnectionToTheOtherHostsAddressJoinsTheTwoDevices) {
  Connected c;
  ASSERT_NO_FATAL_FAILURE(connect_rc(&c, other_ip_));
  EXPECT_EQ(c.active->verbs, ctx_[0]);
  EXPECT_EQ(c.passive->verbs, ctx_[1]) << "the REQ reached the second host's port";
  ASSERT_NE(c.active->route.path_rec, nullptr);
  EXPECT_EQ(ntohs(c.active->route.path_rec->dlid), lid_[1]);
  EXPECT_EQ(ntohs(c.active->route.path_rec->slid), lid_[0]);
  ASSERT_NE(c.passive->route.path_rec, nullptr);
  EXPECT_EQ(ntohs(c.passive->route.path_rec->dlid), lid_[0]);
  EXPECT_EQ(ntohl(c.active->route.addr.dst_sin.sin_addr.s_addr), other_ip_);
  EXPECT_EQ(ntohl(c.passive->route.addr.src_sin.sin_addr.s_addr), other_ip_)
      << "the passive id's source is the address the REQ was for";
  ASSERT_NO_FATAL_FAILURE(expect_rts_pair(c.active->qp, c.passive->qp));
  ASSERT_NO_FATAL_FAILURE(expect_send_recv(c.active, c.passive));
  ASSERT_NO_FATAL_FAILURE(expect_send_recv(c.passive, c.active));
  ASSERT_NO_FATAL_FAILURE(expect_rdma_write(c.active, c.passive));
  ASSERT_EQ(rdma_disconnect(c.active), 0);
  { Event e = expect_event(passive_ch_, RDMA_CM_EVENT_DISCONNECTED); }
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_DISCONNECTED); }
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_TIMEWAIT_EXIT); }
  { Event e = expect_event(passive_ch_, RDMA_CM_EVENT_TIMEWAIT_EXIT); }
}

TEST_F(TwoDevices, AnAddressOfNoHostOfTheFabricIsAnAddrError) {
  rdma_cm_id* id = create_id(active_ch_);
  sockaddr_in nobody = ipv4((other_ip_ & 0xffff0000u) | 0x0999, 9);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, sa(nobody), 2000), 0);
  Event e = next_event(active_ch_);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->event, RDMA_CM_EVENT_ADDR_ERROR);
  EXPECT_LT(e->status, 0);
}

TEST_F(TwoDevices, ANumberOfTheOtherHostNobodyListensOnIsRejected8ByItsDevice) {
  rdma_cm_id* id = create_id(active_ch_);
  ASSERT_NO_FATAL_FAILURE(resolve(id, ipv4(other_ip_, 9)));
  ASSERT_NO_FATAL_FAILURE(create_qp(id));
  rdma_conn_param p{};
  ASSERT_EQ(rdma_connect(id, &p), 0);
  Event e = expect_event(active_ch_, RDMA_CM_EVENT_REJECTED, 8);
}

}  // namespace
}  // namespace softhca::rdmacm_test
