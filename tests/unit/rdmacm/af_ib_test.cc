// AF_IB addresses (docs/rdma-cm.md, "Addresses"): an id bound, listening and connecting by GID and
// service ID, as libfabric's verbs provider uses them on InfiniBand, and rdma_getaddrinfo's
// AF_IB and "nothing to look up" forms.
#include <endian.h>
#include <infiniband/ib.h>

#include "tests/unit/rdmacm/rdmacm_fixture.h"

namespace softhca::rdmacm_test {
namespace {

sockaddr_ib ib_addr(const ibv_gid* gid, uint64_t sid, uint64_t mask = ~uint64_t{0}) {
  sockaddr_ib s{};
  s.sib_family = AF_IB;
  s.sib_pkey = htobe16(0xffff);
  if (gid != nullptr) std::memcpy(&s.sib_addr, gid->raw, 16);
  s.sib_sid = htobe64(sid);
  s.sib_sid_mask = htobe64(mask);
  return s;
}
sockaddr* sa(sockaddr_ib& s) { return reinterpret_cast<sockaddr*>(&s); }
uint64_t sid_of(const sockaddr* a) { return be64toh(reinterpret_cast<const sockaddr_ib*>(a)->sib_sid); }

constexpr uint64_t kPsIbSid = uint64_t{RDMA_PS_IB} << 16;

class AfIb : public RdmaCmTest {
 protected:
  // GID 0 of the host's device, through the verbs API.
  ibv_gid device_gid() {
    ibv_gid g{};
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    EXPECT_GT(n, 0);
    if (list == nullptr || n == 0) return g;
    ibv_context* ctx = ibv_open_device(list[0]);
    EXPECT_NE(ctx, nullptr);
    if (ctx != nullptr) {
      EXPECT_EQ(ibv_query_gid(ctx, 1, 0, &g), 0);
      ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    return g;
  }
};

TEST_F(AfIb, ABindWithTheWildcardGidAndPortZeroPicksAPortInTheServiceId) {
  rdma_cm_id* id = create_id(passive_ch_, RDMA_PS_IB);
  ASSERT_NE(id, nullptr);
  sockaddr_ib any = ib_addr(nullptr, kPsIbSid);
  ASSERT_EQ(rdma_bind_addr(id, sa(any)), 0) << strerror(errno);
  EXPECT_EQ(id->route.addr.src_addr.sa_family, AF_IB);
  const uint64_t sid = sid_of(&id->route.addr.src_addr);
  EXPECT_EQ(sid & ~uint64_t{0xffff}, kPsIbSid);
  EXPECT_NE(sid & 0xffff, 0u);
  EXPECT_EQ(ntohs(rdma_get_src_port(id)), sid & 0xffff);
  EXPECT_EQ(id->verbs, nullptr) << "the wildcard binds no device";
}

TEST_F(AfIb, TheServiceIdChoosesThePortSpaceAndAMismatchIsEprotonosupport) {
  // A TCP id may bind a TCP service ID given as AF_IB; a PS_IB service ID is not its to take.
  rdma_cm_id* tcp = create_id(passive_ch_, RDMA_PS_TCP);
  ASSERT_NE(tcp, nullptr);
  sockaddr_ib ib_sid = ib_addr(nullptr, kPsIbSid);
  errno = 0;
  EXPECT_EQ(rdma_bind_addr(tcp, sa(ib_sid)), -1);
  EXPECT_EQ(errno, EPROTONOSUPPORT);
  sockaddr_ib tcp_sid = ib_addr(nullptr, uint64_t{RDMA_PS_TCP} << 16);
  ASSERT_EQ(rdma_bind_addr(tcp, sa(tcp_sid)), 0) << strerror(errno);
  EXPECT_EQ(sid_of(&tcp->route.addr.src_addr) >> 16, RDMA_PS_TCP);
}

TEST_F(AfIb, AGidNoDeviceHasIsEaddrnotavailAndTheDevicesGidBindsTheDevice) {
  rdma_cm_id* id = create_id(passive_ch_, RDMA_PS_IB);
  ASSERT_NE(id, nullptr);
  ibv_gid other{};
  other.raw[0] = 0xfe;
  other.raw[1] = 0x80;
  other.raw[15] = 0x77;
  other.raw[8] = 0x12;
  sockaddr_ib foreign = ib_addr(&other, kPsIbSid);
  errno = 0;
  EXPECT_EQ(rdma_bind_addr(id, sa(foreign)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  const ibv_gid mine = device_gid();
  sockaddr_ib own = ib_addr(&mine, kPsIbSid);
  ASSERT_EQ(rdma_bind_addr(id, sa(own)), 0) << strerror(errno);
  EXPECT_NE(id->verbs, nullptr);
  EXPECT_EQ(id->port_num, 1);
}

TEST_F(AfIb, AConnectionByGidAndServiceIdCarriesAllNinetyTwoBytesOfPrivateData) {
  const ibv_gid gid = device_gid();
  rdma_cm_id* listener = create_id(passive_ch_, RDMA_PS_IB);
  ASSERT_NE(listener, nullptr);
  sockaddr_ib any = ib_addr(nullptr, kPsIbSid);
  ASSERT_EQ(rdma_bind_addr(listener, sa(any)), 0) << strerror(errno);
  ASSERT_EQ(rdma_listen(listener, 4), 0) << strerror(errno);
  const uint64_t sid = sid_of(&listener->route.addr.src_addr);

  rdma_cm_id* active = create_id(active_ch_, RDMA_PS_IB);
  ASSERT_NE(active, nullptr);
  sockaddr_ib dst = ib_addr(&gid, sid);
  ASSERT_EQ(rdma_resolve_addr(active, nullptr, sa(dst), 2000), 0) << strerror(errno);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ADDR_RESOLVED); }
  EXPECT_EQ(active->route.addr.src_addr.sa_family, AF_IB);
  EXPECT_EQ(std::memcmp(&reinterpret_cast<sockaddr_ib*>(&active->route.addr.src_addr)->sib_addr, gid.raw, 16), 0);
  EXPECT_EQ(ntohs(rdma_get_dst_port(active)), sid & 0xffff);
  ASSERT_EQ(rdma_resolve_route(active, 2000), 0) << strerror(errno);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ROUTE_RESOLVED); }
  ASSERT_NO_FATAL_FAILURE(create_qp(active));

  // 92 bytes: an AF_IB id sends no CMA header, so the whole REQ private data is the user's.
  const std::vector<uint8_t> data = pattern(92, 7);
  rdma_conn_param p{};
  p.private_data = data.data();
  p.private_data_len = static_cast<uint8_t>(data.size());
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.retry_count = 7;
  p.rnr_retry_count = 7;
  ASSERT_EQ(rdma_connect(active, &p), 0) << strerror(errno);
  Event req = expect_event(passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_TRUE(req && req->event == RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id* passive = req->id;
  track(passive);
  EXPECT_EQ(req->listen_id, listener);
  ASSERT_EQ(req->param.conn.private_data_len, 92);
  EXPECT_EQ(std::memcmp(req->param.conn.private_data, data.data(), 92), 0);
  EXPECT_EQ(passive->route.addr.src_addr.sa_family, AF_IB);
  EXPECT_EQ(passive->route.addr.dst_addr.sa_family, AF_IB);
  EXPECT_EQ(sid_of(&passive->route.addr.src_addr), sid);
  ASSERT_NO_FATAL_FAILURE(create_qp(passive));
  req.ack();
  ASSERT_EQ(rdma_accept(passive, &p), 0) << strerror(errno);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ESTABLISHED); }
  { Event e = expect_event(passive_ch_, RDMA_CM_EVENT_ESTABLISHED); }
  ASSERT_NO_FATAL_FAILURE(expect_rts_pair(active->qp, passive->qp));
  ASSERT_NO_FATAL_FAILURE(expect_send_recv(active, passive));

  // One byte more than the field holds is EINVAL, header or not.
  rdma_cm_id* again = create_id(active_ch_, RDMA_PS_IB);
  ASSERT_NE(again, nullptr);
  ASSERT_EQ(rdma_resolve_addr(again, nullptr, sa(dst), 2000), 0) << strerror(errno);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ADDR_RESOLVED); }
  ASSERT_EQ(rdma_resolve_route(again, 2000), 0) << strerror(errno);
  { Event e = expect_event(active_ch_, RDMA_CM_EVENT_ROUTE_RESOLVED); }
  ASSERT_NO_FATAL_FAILURE(create_qp(again));
  const std::vector<uint8_t> too_long = pattern(93, 1);
  p.private_data = too_long.data();
  p.private_data_len = static_cast<uint8_t>(too_long.size());
  errno = 0;
  EXPECT_EQ(rdma_connect(again, &p), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(AfIb, AnUnknownGidOnInfiniBandIsAnAddressError) {
  rdma_cm_id* active = create_id(active_ch_, RDMA_PS_IB);
  ASSERT_NE(active, nullptr);
  ibv_gid nowhere{};
  nowhere.raw[0] = 0xfe;
  nowhere.raw[1] = 0x80;
  nowhere.raw[8] = 0x0a;
  nowhere.raw[15] = 0x01;
  sockaddr_ib dst = ib_addr(&nowhere, kPsIbSid | 4000);
  ASSERT_EQ(rdma_resolve_addr(active, nullptr, sa(dst), 2000), 0) << strerror(errno);
  Event e = expect_event(active_ch_, RDMA_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH);
}

TEST(GetAddrInfoAfIb, ANumericIpv6LiteralBecomesAGidAndAServiceId) {
  rdma_addrinfo hints{};
  hints.ai_family = AF_IB;
  hints.ai_flags = RAI_NUMERICHOST | RAI_FAMILY;
  hints.ai_port_space = RDMA_PS_IB;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("fe80::250:56ff:fe00:2", "7000", &hints, &res), 0);
  ASSERT_NE(res, nullptr);
  EXPECT_EQ(res->ai_family, AF_IB);
  ASSERT_EQ(res->ai_dst_len, sizeof(sockaddr_ib));
  const auto* sib = reinterpret_cast<const sockaddr_ib*>(res->ai_dst_addr);
  EXPECT_EQ(sib->sib_family, AF_IB);
  EXPECT_EQ(be16toh(sib->sib_pkey), 0xffff);
  EXPECT_EQ(be64toh(sib->sib_sid), (uint64_t{RDMA_PS_IB} << 16) + 7000);
  const uint8_t expect[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x50, 0x56, 0xff, 0xfe, 0x00, 0x00, 0x02};
  EXPECT_EQ(std::memcmp(&sib->sib_addr, expect, 16), 0);
  rdma_freeaddrinfo(res);
}

TEST(GetAddrInfoNoLookup, NeitherNodeNorServiceGivesTheHintsOwnAddresses) {
  sockaddr_in src = ipv4(kLoopback, 4444);
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  hints.ai_src_addr = reinterpret_cast<sockaddr*>(&src);
  hints.ai_src_len = sizeof src;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, nullptr, &hints, &res), 0);
  ASSERT_NE(res, nullptr);
  EXPECT_TRUE(res->ai_flags & RAI_PASSIVE);
  EXPECT_EQ(res->ai_port_space, RDMA_PS_TCP);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
  ASSERT_EQ(res->ai_src_len, sizeof src);
  EXPECT_EQ(std::memcmp(res->ai_src_addr, &src, sizeof src), 0);
  EXPECT_NE(res->ai_src_addr, hints.ai_src_addr) << "a copy the caller frees with the result";
  EXPECT_EQ(res->ai_dst_addr, nullptr);
  rdma_freeaddrinfo(res);
}

}  // namespace
}  // namespace softhca::rdmacm_test
