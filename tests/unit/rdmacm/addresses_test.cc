// rdma_getaddrinfo (rdmacm.md §3.15) and binding (§3.6): what the result holds for numeric,
// named and passive lookups and how hints choose the port space and QP type; ports, ephemeral
// ports, wildcard conflicts (EADDRNOTAVAIL), REUSEADDR, and a port freed by rdma_destroy_id.
// Ports are ephemeral ones the device picked: tests of other processes may run at the same time.
#include <netdb.h>
#include <sys/un.h>

#include "tests/unit/rdmacm/rdmacm_fixture.h"

namespace softhca::rdmacm_test {
namespace {

const sockaddr_in* sin_of(const sockaddr* s) { return reinterpret_cast<const sockaddr_in*>(s); }

TEST(GetAddrInfo, ANumericActiveLookupGivesTheDestinationAndRcOverTcp) {
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", nullptr, &res), 0);
  ASSERT_NE(res, nullptr);
  EXPECT_EQ(res->ai_flags, 0);
  EXPECT_EQ(res->ai_family, AF_INET);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
  EXPECT_EQ(res->ai_port_space, RDMA_PS_TCP);
  ASSERT_NE(res->ai_dst_addr, nullptr);
  EXPECT_EQ(res->ai_dst_len, sizeof(sockaddr_in));
  EXPECT_EQ(sin_of(res->ai_dst_addr)->sin_family, AF_INET);
  EXPECT_EQ(ntohl(sin_of(res->ai_dst_addr)->sin_addr.s_addr), kLoopback);
  EXPECT_EQ(ntohs(sin_of(res->ai_dst_addr)->sin_port), 7471);
  EXPECT_EQ(res->ai_src_addr, nullptr);
  EXPECT_EQ(res->ai_route_len, 0u);
  EXPECT_EQ(res->ai_connect_len, 0u);
  EXPECT_EQ(res->ai_next, nullptr);
  rdma_freeaddrinfo(res);
}

TEST(GetAddrInfo, LocalhostIsTheIpv4Loopback) {
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("localhost", "20079", nullptr, &res), 0);
  ASSERT_NE(res->ai_dst_addr, nullptr);
  EXPECT_EQ(res->ai_family, AF_INET);
  EXPECT_EQ(ntohl(sin_of(res->ai_dst_addr)->sin_addr.s_addr), kLoopback);
  EXPECT_EQ(ntohs(sin_of(res->ai_dst_addr)->sin_port), 20079);
  rdma_freeaddrinfo(res);
}

TEST(GetAddrInfo, APassiveLookupWithNoNodeIsTheIpv4Wildcard) {
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, "7471", &hints, &res), 0);
  EXPECT_EQ(res->ai_flags & RAI_PASSIVE, RAI_PASSIVE);
  ASSERT_NE(res->ai_src_addr, nullptr);
  EXPECT_EQ(res->ai_src_len, sizeof(sockaddr_in));
  EXPECT_EQ(sin_of(res->ai_src_addr)->sin_family, AF_INET);
  EXPECT_EQ(sin_of(res->ai_src_addr)->sin_addr.s_addr, htonl(INADDR_ANY));
  EXPECT_EQ(ntohs(sin_of(res->ai_src_addr)->sin_port), 7471);
  EXPECT_EQ(res->ai_dst_addr, nullptr);
  rdma_freeaddrinfo(res);
}

TEST(GetAddrInfo, HintsChooseThePortSpaceAndTheQpType) {
  rdma_addrinfo hints{};
  rdma_addrinfo* res = nullptr;
  hints.ai_port_space = RDMA_PS_UDP;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7174", &hints, &res), 0);
  EXPECT_EQ(res->ai_port_space, RDMA_PS_UDP);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_UD) << "UDP means UD";
  rdma_freeaddrinfo(res);

  hints = rdma_addrinfo{};
  hints.ai_port_space = RDMA_PS_TCP;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7174", &hints, &res), 0);
  EXPECT_EQ(res->ai_port_space, RDMA_PS_TCP);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC) << "TCP means RC";
  rdma_freeaddrinfo(res);

  hints = rdma_addrinfo{};
  hints.ai_qp_type = IBV_QPT_UD;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7174", &hints, &res), 0);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_UD);
  EXPECT_EQ(res->ai_port_space, RDMA_PS_UDP) << "a UD QP means the UDP port space";
  rdma_freeaddrinfo(res);
}

TEST(GetAddrInfo, AnActiveLookupKeepsTheSourceOfTheHints) {
  sockaddr_in src = ipv4(kLoopback, 0);
  rdma_addrinfo hints{};
  hints.ai_src_addr = sa(src);
  hints.ai_src_len = sizeof src;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res), 0);
  ASSERT_NE(res->ai_src_addr, nullptr);
  EXPECT_EQ(res->ai_src_len, sizeof src);
  EXPECT_EQ(std::memcmp(res->ai_src_addr, &src, sizeof src), 0);
  rdma_freeaddrinfo(res);
}

TEST(GetAddrInfo, NothingToLookUpIsEinvalAndABadNameIsAnEaiCode) {
  rdma_addrinfo* res = nullptr;
  errno = 0;
  EXPECT_EQ(rdma_getaddrinfo(nullptr, nullptr, nullptr, &res), -1);
  EXPECT_EQ(errno, EINVAL);
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_NUMERICHOST;
  EXPECT_EQ(rdma_getaddrinfo("not-a-number", "7471", &hints, &res), EAI_NONAME);
  rdma_freeaddrinfo(nullptr);  // Expect: freeing nothing is allowed
}

using Binding = RdmaCmTest;

TEST_F(Binding, PortZeroPicksAnEphemeralPortWrittenIntoTheSourceAddress) {
  rdma_cm_id* id = create_id(active_ch_);
  sockaddr_in any = ipv4(0u, 0);
  ASSERT_EQ(rdma_bind_addr(id, sa(any)), 0) << strerror(errno);
  const uint16_t port = src_port(id);
  EXPECT_GE(port, 32768);
  EXPECT_LE(port, 60999);
  EXPECT_EQ(id->route.addr.src_sin.sin_family, AF_INET);
  EXPECT_EQ(id->route.addr.dst_addr.sa_family, AF_INET) << "bind sets the destination's family";
  EXPECT_EQ(id->verbs, nullptr) << "the wildcard binds no device";
  EXPECT_EQ(id->port_num, 0);
}

TEST_F(Binding, A127AddressCountsAsTheWildcardAndKeepsItsAddress) {
  rdma_cm_id* id = create_id(active_ch_);
  sockaddr_in lo = ipv4(kLoopback, 0);
  ASSERT_EQ(rdma_bind_addr(id, sa(lo)), 0) << strerror(errno);
  EXPECT_EQ(src_ip(id), kLoopback);
  EXPECT_NE(src_port(id), 0);
  EXPECT_EQ(id->verbs, nullptr);
}

TEST_F(Binding, ABoundPortIsNotAvailableToAnotherIdUntilTheFirstIsDestroyed) {
  rdma_cm_id* first = create_id(active_ch_);
  sockaddr_in any = ipv4(0u, 0);
  ASSERT_EQ(rdma_bind_addr(first, sa(any)), 0);
  const uint16_t port = src_port(first);
  // Expect: the wildcard is involved on either side, so EADDRNOTAVAIL (cma_check_port).
  rdma_cm_id* second = create_id(active_ch_);
  sockaddr_in same = ipv4(0u, port);
  errno = 0;
  EXPECT_EQ(rdma_bind_addr(second, sa(same)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  rdma_cm_id* third = create_id(active_ch_);
  sockaddr_in lo = ipv4(kLoopback, port);
  errno = 0;
  EXPECT_EQ(rdma_bind_addr(third, sa(lo)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  // Expect: the same port of another port space is another port.
  rdma_cm_id* udp = create_id(active_ch_, RDMA_PS_UDP);
  EXPECT_EQ(rdma_bind_addr(udp, sa(same)), 0) << strerror(errno);
  // Expect: destroying the owner frees the port; the id that failed may bind it now.
  destroy(first);
  forget(first);
  EXPECT_EQ(rdma_bind_addr(second, sa(same)), 0) << strerror(errno);
  EXPECT_EQ(src_port(second), port);
}

TEST_F(Binding, ReuseAddrOnBothIdsLetsThemShareAPortButNotListenOnItTwice) {
  const int one = 1;
  rdma_cm_id* a = create_id(passive_ch_);
  rdma_cm_id* b = create_id(passive_ch_);
  rdma_cm_id* c = create_id(passive_ch_);
  ASSERT_EQ(rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, const_cast<int*>(&one), sizeof one), 0);
  ASSERT_EQ(rdma_set_option(b, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, const_cast<int*>(&one), sizeof one), 0);
  sockaddr_in any = ipv4(0u, 0);
  ASSERT_EQ(rdma_bind_addr(a, sa(any)), 0);
  sockaddr_in same = ipv4(0u, src_port(a));
  EXPECT_EQ(rdma_bind_addr(b, sa(same)), 0) << strerror(errno);
  errno = 0;
  EXPECT_EQ(rdma_bind_addr(c, sa(same)), -1) << "REUSEADDR on one side only shares nothing";
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  // Expect: listening checks the port again without REUSEADDR (cma_bind_listen): not while
  // another id owns it; once the other is gone, yes.
  errno = 0;
  EXPECT_EQ(rdma_listen(a, 1), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  destroy(b);
  forget(b);
  EXPECT_EQ(rdma_listen(a, 1), 0) << strerror(errno);
  // Expect: a REUSEADDR id may still bind the listener's port, but not listen on it.
  rdma_cm_id* d = create_id(passive_ch_);
  ASSERT_EQ(rdma_set_option(d, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, const_cast<int*>(&one), sizeof one), 0);
  EXPECT_EQ(rdma_bind_addr(d, sa(same)), 0) << strerror(errno);
  errno = 0;
  EXPECT_EQ(rdma_listen(d, 1), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
}

TEST_F(Binding, ASecondBindOfABoundIdIsEinval) {
  rdma_cm_id* id = create_id(active_ch_);
  sockaddr_in any = ipv4(0u, 0);
  ASSERT_EQ(rdma_bind_addr(id, sa(any)), 0);
  errno = 0;
  EXPECT_EQ(rdma_bind_addr(id, sa(any)), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Binding, AnAddressFamilyTheLibraryDoesNotKnowIsEinval) {
  rdma_cm_id* id = create_id(active_ch_);
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  errno = 0;
  EXPECT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&un)), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Binding, ListeningOnAnUnboundIdBindsTheWildcardAndAnEphemeralPort) {
  rdma_cm_id* id = create_id(passive_ch_);
  ASSERT_EQ(rdma_listen(id, 4), 0) << strerror(errno);
  EXPECT_EQ(id->route.addr.src_sin.sin_family, AF_INET);
  EXPECT_EQ(src_ip(id), 0u);
  EXPECT_GE(src_port(id), 32768);
  EXPECT_LE(src_port(id), 60999);
}

TEST_F(Binding, ResolvingAnUnboundIdBindsItToTheDeviceAndAnEphemeralPort) {
  rdma_cm_id* id = create_id(active_ch_);
  ASSERT_NO_FATAL_FAILURE(resolve(id, ipv4(kLoopback, 9)));
  EXPECT_EQ(src_ip(id), kLoopback) << "toward 127.0.0.1 the source is 127.0.0.1";
  EXPECT_GE(src_port(id), 32768);
  EXPECT_LE(src_port(id), 60999);
  EXPECT_NE(id->verbs, nullptr);
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(id->verbs, 1, 0, &gid), 0);
  EXPECT_EQ(std::memcmp(&id->route.addr.addr.ibaddr.sgid, &gid, 16), 0);
  EXPECT_EQ(std::memcmp(&id->route.addr.addr.ibaddr.dgid, &gid, 16), 0) << "loopback: our own GID";
  EXPECT_EQ(ntohs(id->route.addr.addr.ibaddr.pkey), 0xffff);
}

}  // namespace
}  // namespace softhca::rdmacm_test
