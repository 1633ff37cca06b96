// Hand-made packets over a plain UDP socket (issue 15, row 4): any local user can send a datagram
// to a host's carrier port, no privileges needed. An RDMA WRITE with the right QPN, PSN, rkey and
// VA must still be placed only when it comes from where the QP is connected: from a port that is
// no host's carrier it is dropped at the carrier; from another host of the fabric (or, on RoCE,
// another address) it reaches the device and is dropped there as bad_source, leaving memory, the
// QP's state and the peer's ACK stream untouched. Each case ends with the same WRITE from the
// peer, which lands: the attack failed for the reason named, not because the setup was broken.
// Hosts are SharedRuntimes of this process; every wait is bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fabric/packet/packet.h"
#include "fabric/packet/roce.h"
#include "fabric/udp_carrier.h"
#include "hwif/cmd.h"
#include "runtime/fabric_registry.h"
#include "runtime/shared_runtime.h"

namespace softhca::runtime {
namespace {

constexpr int kWaitMs = 10'000;
constexpr uint32_t kRqPsn = 100;
constexpr uint64_t kIova = 0x10000;        // where the QP's MR starts, as its peer addresses it
constexpr size_t kTarget = 0x100;          // the bytes a forged WRITE aims at
constexpr uint32_t kPeerQpn = 0x4242;
constexpr uint32_t kIpA = 0x7f000002;      // RoCE: the victim host, 127.0.0.2
constexpr uint32_t kIpB = 0x7f000003;      // its QP's peer
constexpr uint32_t kIpOther = 0x7f000004;  // another address of this machine
const std::array<uint8_t, 8> kForged = {0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee};
const std::array<uint8_t, 8> kGenuine = {1, 2, 3, 4, 5, 6, 7, 8};

std::string unique_fabric() {
  static std::atomic<int> n{0};
  return "hdg-" + std::to_string(::getpid()) + "-" + std::to_string(n.fetch_add(1));
}

bool wait_until(const std::function<bool()>& done) {
  for (int i = 0; i < kWaitMs; ++i) {
    if (done()) return true;
    ::usleep(1000);
  }
  return done();
}

// A plain UDP socket bound to `bind` (port 0: any), with SO_REUSEPORT when asked (a process of
// the same user may bind a host's carrier port, as the host's own processes do).
class Socket {
 public:
  Socket(fabric::Ipv4Endpoint bind, bool reuse_port) : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    const int one = 1;
    if (reuse_port) ::setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(bind.ip);
    a.sin_port = htons(bind.port);
    bound_ = ::bind(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
    socklen_t len = sizeof a;
    if (bound_ && ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) port_ = ntohs(a.sin_port);
  }
  ~Socket() { ::close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  [[nodiscard]] bool bound() const { return bound_; }
  [[nodiscard]] uint16_t port() const { return port_; }
  bool send_to(fabric::Ipv4Endpoint to, std::span<const uint8_t> bytes) const {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(to.ip);
    a.sin_port = htons(to.port);
    return ::sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&a), sizeof a) ==
           static_cast<ssize_t>(bytes.size());
  }

 private:
  int fd_;
  bool bound_ = false;
  uint16_t port_ = 0;
};

// An RC QP of host `rt` whose MR (kIova, one page) may be written by its peer, in RTS with the
// peer at `peer` (a LID, or a GID when global) expecting kRqPsn.
struct VictimQp {
  uint32_t qpn = 0;
  uint32_t rkey = 0;
  uint8_t* memory = nullptr;
};

int exec_ok(Runtime& rt, const auto& in, auto& out) { return hwif::exec_cmd(rt.devices()[0]->commands(), in, out); }
int exec_ok(Runtime& rt, const auto& in) { return hwif::exec_cmd(rt.devices()[0]->commands(), in); }

VictimQp make_victim(Runtime& rt, const hwif::AddressVector& peer) {
  VictimQp v;
  pcie::HostKernel& k = rt.devices()[0]->kernel();
  const pcie::DmaMemory cq_ring = k.alloc_coherent(64 * 8), cq_db = k.alloc_coherent(64);
  const pcie::DmaMemory sq = k.alloc_coherent(16 * hwif::kSendWqeBbBytes), rq = k.alloc_coherent(16 * 16);
  const pcie::DmaMemory qp_db = k.alloc_coherent(64), mr = k.alloc_coherent(4096);
  if (!cq_ring.valid() || !cq_db.valid() || !sq.valid() || !rq.valid() || !qp_db.valid() || !mr.valid()) return v;
  for (size_t i = 0; i < 8; ++i) cq_ring.data[i * 64 + 63] = 0xf0;  // owned by hardware
  hwif::AllocPdOut pd{};
  hwif::CreateCqIn cq;
  cq.ring_addr = cq_ring.dma_addr;
  cq.dbrec_addr = cq_db.dma_addr;
  cq.log_nent = 3;
  hwif::CreateCqOut cqo{};
  if (exec_ok(rt, hwif::AllocPdIn{}, pd) != 0 || exec_ok(rt, cq, cqo) != 0) return v;
  hwif::CreateMkeyIn mk;
  mk.pdn = pd.pdn;
  mk.access = hwif::kAccessLocalWrite | hwif::kAccessRemoteWrite;
  mk.host_addr = mr.dma_addr;
  mk.iova = kIova;
  mk.length = mr.size;
  hwif::CreateMkeyOut mko{};
  hwif::CreateQpIn qp;
  qp.type = hwif::QpType::kRc;
  qp.pdn = pd.pdn;
  qp.send_cqn = qp.recv_cqn = cqo.cqn;
  qp.sq_addr = sq.dma_addr;
  qp.log_sq_bbs = 4;
  qp.rq_addr = rq.dma_addr;
  qp.log_rq_cnt = 4;
  qp.log_rq_stride = 4;
  qp.dbrec_addr = qp_db.dma_addr;
  hwif::CreateQpOut qpo{};
  if (exec_ok(rt, mk, mko) != 0 || exec_ok(rt, qp, qpo) != 0) return v;
  hwif::ModifyQpIn m;
  m.qpn = qpo.qpn;
  m.attr.state = hwif::QpState::kInit;
  m.attr.port_num = 1;
  m.attr.access_flags = hwif::kAccessRemoteWrite;
  m.attr_mask = hwif::kQpState | hwif::kQpPkeyIndex | hwif::kQpPort | hwif::kQpAccessFlags;
  if (exec_ok(rt, m) != 0) return v;
  m.attr.state = hwif::QpState::kRtr;
  m.attr.av = peer;
  m.attr.path_mtu = hwif::Mtu::k1024;
  m.attr.dest_qpn = kPeerQpn;
  m.attr.rq_psn = kRqPsn;
  m.attr.max_dest_rd_atomic = 1;
  m.attr.min_rnr_timer = 1;
  m.attr_mask = hwif::kQpState | hwif::kQpAv | hwif::kQpPathMtu | hwif::kQpDestQpn | hwif::kQpRqPsn |
                hwif::kQpMaxDestRdAtomic | hwif::kQpMinRnrTimer;
  if (exec_ok(rt, m) != 0) return v;
  m.attr.state = hwif::QpState::kRts;
  m.attr.sq_psn = 1;
  m.attr.timeout = 14;
  m.attr.retry_cnt = 7;
  m.attr.rnr_retry = 7;
  m.attr.max_rd_atomic = 1;
  m.attr_mask = hwif::kQpState | hwif::kQpSqPsn | hwif::kQpTimeout | hwif::kQpRetryCnt | hwif::kQpRnrRetry |
                hwif::kQpMaxQpRdAtomic;
  if (exec_ok(rt, m) != 0) return v;
  v.qpn = qpo.qpn;
  v.rkey = mko.rkey;
  v.memory = mr.data;
  return v;
}

hwif::QpState qp_state(Runtime& rt, uint32_t qpn) {
  hwif::QueryQpOut q{};
  return exec_ok(rt, hwif::QueryQpIn{qpn}, q) == 0 ? q.attr.state : hwif::QpState::kReset;
}

uint64_t dropped(const hca::DeviceStats& s, hca::DropReason r) { return s.dropped[static_cast<size_t>(r)]; }

// An RDMA WRITE Only of 8 bytes to kIova + kTarget, to `qpn` at `psn` through `rkey`.
fabric::PacketFields write_to(const VictimQp& v, uint32_t psn) {
  fabric::PacketFields f;
  f.opcode = fabric::BthOpcode::kRcRdmaWriteOnly;
  f.dest_qp = Qpn(v.qpn);
  f.psn = Psn(psn);
  f.ack_req = true;
  f.reth = fabric::RethFields{kIova + kTarget, RKey(v.rkey), 8};
  return f;
}

bool untouched(const VictimQp& v) { return std::memcmp(v.memory + kTarget, kForged.data(), 8) != 0; }
bool genuine(const VictimQp& v) { return std::memcmp(v.memory + kTarget, kGenuine.data(), 8) == 0; }

// ---- InfiniBand: hosts a (the victim), b (its QP's peer) and c (another host of the fabric) -------

class NativeDatagrams : public ::testing::Test {
 protected:
  void SetUp() override {
    fabric_ = unique_fabric();
    // Host a last: a process's memory is published by the runtime it attached last, and only the
    // victim's QP needs memory.
    for (const char* name : {"b", "c", "a"}) {
      SharedRuntimeOptions o;
      o.names.fabric = fabric_;
      o.names.host = std::string(name);
      std::string error;
      hosts_.push_back(SharedRuntime::create(o, error));
      ASSERT_NE(hosts_.back(), nullptr) << error;
    }
    hwif::AddressVector peer;
    peer.dlid = b().lid();
    peer.port_num = 1;
    victim_ = make_victim(a(), peer);
    ASSERT_NE(victim_.qpn, 0u);
  }
  void TearDown() override {
    for (auto& h : hosts_) {
      if (h) h->detach();
    }
  }
  SharedRuntime& a() { return *hosts_[2]; }
  SharedRuntime& b() { return *hosts_[0]; }
  SharedRuntime& c() { return *hosts_[1]; }
  fabric::Ipv4Endpoint endpoint_of(const std::string& host) const {
    const auto h = FabricRegistry("/dev/shm", fabric_).find_by_name(host);
    return h ? fabric::Ipv4Endpoint{ntohl(h->ipv4_be), h->udp_port} : fabric::Ipv4Endpoint{};
  }
  // The native packet (LRH..VCRC) of f from `slid` to host a.
  std::vector<uint8_t> wire(fabric::PacketFields f, uint16_t slid, std::span<const uint8_t> payload) {
    f.dlid = Lid(a().lid());
    f.slid = Lid(slid);
    std::vector<uint8_t> out(fabric::kMaxPacketBytes);
    out.resize(fabric::serialize(f, payload, out));
    return out;
  }
  // Sends f from a socket on host `from`'s carrier endpoint (a process of the same user may bind
  // it), as SLID `slid`, and waits until host a's device dropped it as bad_source.
  void send_from_host(const std::string& from, const fabric::PacketFields& f, uint16_t slid,
                      std::span<const uint8_t> payload) {
    Socket s(endpoint_of(from), true);
    ASSERT_TRUE(s.bound());
    ASSERT_TRUE(s.send_to(endpoint_of("a"), wire(f, slid, payload)));
  }
  // The genuine WRITE from host b lands, and draws its ACK.
  void expect_the_peer_still_gets_through() {
    const uint64_t acks = a().packet_stats().acks_sent;
    send_from_host("b", write_to(victim_, kRqPsn), b().lid(), kGenuine);
    EXPECT_TRUE(wait_until([&] { return genuine(victim_); }));
    EXPECT_TRUE(wait_until([&] { return a().packet_stats().acks_sent == acks + 1; }));
    EXPECT_EQ(qp_state(a(), victim_.qpn), hwif::QpState::kRts);
  }

  std::string fabric_;
  std::vector<std::unique_ptr<SharedRuntime>> hosts_;
  VictimQp victim_;
};

TEST_F(NativeDatagrams, TheRightQpnPsnRkeyAndVaFromAPlainSocketAreDroppedAtTheCarrier) {
  const hca::DeviceStats before = a().packet_stats();
  const uint64_t refused = a().packets_refused_at_carrier();
  Socket s(fabric::Ipv4Endpoint{fabric::kIpv4Loopback, 0}, false);
  ASSERT_TRUE(s.bound());
  // Expect: as the peer (its SLID), from a port that is no host's carrier: refused at the carrier.
  ASSERT_TRUE(s.send_to(endpoint_of("a"), wire(write_to(victim_, kRqPsn), b().lid(), kForged)));
  ASSERT_TRUE(wait_until([&] { return a().packets_refused_at_carrier() == refused + 1; }));
  // Expect: with another SLID (host c's) from that port: refused at the carrier too.
  ASSERT_TRUE(s.send_to(endpoint_of("a"), wire(write_to(victim_, kRqPsn), c().lid(), kForged)));
  ASSERT_TRUE(wait_until([&] { return a().packets_refused_at_carrier() == refused + 2; }));
  const hca::DeviceStats after = a().packet_stats();
  EXPECT_EQ(after.packets_received, before.packets_received);  // the device never saw them
  EXPECT_EQ(after.packets_sent, before.packets_sent);          // no ACK, no NAK
  EXPECT_TRUE(untouched(victim_));
  EXPECT_EQ(qp_state(a(), victim_.qpn), hwif::QpState::kRts);
  expect_the_peer_still_gets_through();
}

TEST_F(NativeDatagrams, AWriteFromAnotherHostsEndpointAsThatHostIsDroppedAtTheDeviceAsBadSource) {
  const hca::DeviceStats before = a().packet_stats();
  // Expect: host c's SLID from host c's carrier passes the carrier; the QP is connected to host b,
  // so the device drops it: memory untouched, QP RTS, no ACK.
  send_from_host("c", write_to(victim_, kRqPsn), c().lid(), kForged);
  ASSERT_TRUE(wait_until([&] {
    return dropped(a().packet_stats(), hca::DropReason::kBadSource) == dropped(before, hca::DropReason::kBadSource) + 1;
  }));
  const hca::DeviceStats after = a().packet_stats();
  EXPECT_EQ(after.packets_sent, before.packets_sent);
  EXPECT_EQ(after.acks_sent, before.acks_sent);
  EXPECT_TRUE(untouched(victim_));
  EXPECT_EQ(qp_state(a(), victim_.qpn), hwif::QpState::kRts);
  // Expect: host b's SLID from host c's carrier: refused at the carrier (a host speaks for its LID).
  const uint64_t refused = a().packets_refused_at_carrier();
  send_from_host("c", write_to(victim_, kRqPsn), b().lid(), kForged);
  ASSERT_TRUE(wait_until([&] { return a().packets_refused_at_carrier() == refused + 1; }));
  EXPECT_TRUE(untouched(victim_));
  expect_the_peer_still_gets_through();
}

TEST_F(NativeDatagrams, AWrongRkeyFromAHostTheQpIsNotConnectedToLeavesItInRts) {
  const hca::DeviceStats before = a().packet_stats();
  fabric::PacketFields f = write_to(victim_, kRqPsn);
  f.reth->rkey = RKey(victim_.rkey ^ 0x10100);  // names no MR: from the peer, a NAK and QP ERR
  send_from_host("c", f, c().lid(), kForged);
  ASSERT_TRUE(wait_until([&] {
    return dropped(a().packet_stats(), hca::DropReason::kBadSource) == dropped(before, hca::DropReason::kBadSource) + 1;
  }));
  // Expect: no NAK, and the QP still in RTS (one forged packet cannot break the connection).
  EXPECT_EQ(a().packet_stats().packets_sent, before.packets_sent);
  EXPECT_EQ(a().packet_stats().naks_sent, before.naks_sent);
  EXPECT_EQ(qp_state(a(), victim_.qpn), hwif::QpState::kRts);
  expect_the_peer_still_gets_through();
}

TEST_F(NativeDatagrams, StalePsnsFromAHostTheQpIsNotConnectedToDrawNoAcks) {
  const hca::DeviceStats before = a().packet_stats();
  // Expect: ten stale WRITEs (from the peer, each a duplicate with an ACK to the peer): nothing.
  for (uint32_t i = 1; i <= 10; ++i) send_from_host("c", write_to(victim_, kRqPsn - i), c().lid(), kForged);
  ASSERT_TRUE(wait_until([&] {
    return dropped(a().packet_stats(), hca::DropReason::kBadSource) == dropped(before, hca::DropReason::kBadSource) + 10;
  }));
  const hca::DeviceStats after = a().packet_stats();
  EXPECT_EQ(after.acks_sent, before.acks_sent);
  EXPECT_EQ(after.packets_sent, before.packets_sent);
  EXPECT_EQ(after.duplicates, before.duplicates);
  expect_the_peer_still_gets_through();
}

// ---- RoCE: host a at 127.0.0.2, its QP connected to the GID of 127.0.0.3 -----------------------

// A UDP port free on 127.0.0.2, 127.0.0.3 and 127.0.0.4 now.
uint16_t free_roce_port() {
  for (int attempt = 0; attempt < 20; ++attempt) {
    Socket a(fabric::Ipv4Endpoint{kIpA, 0}, false);
    if (!a.bound()) continue;
    Socket b(fabric::Ipv4Endpoint{kIpB, a.port()}, false);
    Socket c(fabric::Ipv4Endpoint{kIpOther, a.port()}, false);
    if (b.bound() && c.bound()) return a.port();
  }
  return 0;
}

class RoceDatagrams : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = free_roce_port();
    ASSERT_NE(port_, 0);
    SharedRuntimeOptions o;
    o.names.fabric = unique_fabric();
    o.names.host = std::string("a");
    o.link = LinkOptions{hwif::LinkLayer::kEthernet, kIpA, port_, 65536};
    std::string error;
    host_ = SharedRuntime::create(o, error);
    ASSERT_NE(host_, nullptr) << error;
    hwif::AddressVector peer;
    peer.is_global = true;
    peer.dgid.raw = fabric::ipv4_mapped_gid(kIpB);
    peer.hop_limit = 64;
    peer.port_num = 1;
    victim_ = make_victim(*host_, peer);
    ASSERT_NE(victim_.qpn, 0u);
  }
  void TearDown() override {
    if (host_) host_->detach();
  }
  // Sends f as RoCEv2 from `from` to host a: the UDP payload (BTH..ICRC) of the IPv4 packet whose
  // addresses and ports are the ones the datagram travels with, as a real sender's would be.
  void send(fabric::Ipv4Endpoint from, fabric::PacketFields f, std::span<const uint8_t> payload) {
    f.has_lrh = false;
    f.grh = fabric::GrhFields{0, 0, 64, fabric::ipv4_mapped_gid(from.ip), fabric::ipv4_mapped_gid(kIpA)};
    Socket s(from, false);
    ASSERT_TRUE(s.bound());
    std::array<uint8_t, fabric::kMaxRocePacketBytes> packet{};
    const size_t n = fabric::serialize_roce(f, payload, fabric::UdpPorts{s.port(), port_}, packet);
    ASSERT_GT(n, fabric::kRoceEncapBytes);
    ASSERT_TRUE(s.send_to(fabric::Ipv4Endpoint{kIpA, port_},
                          std::span<const uint8_t>(packet.data() + fabric::kRoceEncapBytes, n - fabric::kRoceEncapBytes)));
  }

  uint16_t port_ = 0;
  std::unique_ptr<SharedRuntime> host_;
  VictimQp victim_;
};

TEST_F(RoceDatagrams, AWriteFromAnotherAddressThanThePeersIsDroppedAndOnlyThePeersIsPlaced) {
  const hca::DeviceStats before = host_->packet_stats();
  // Expect: from the RoCE port of another address (127.0.0.4): through the carrier, then dropped by
  // the device (its SGID, the sender's address, is not the QP's path DGID): nothing written, no ACK.
  send(fabric::Ipv4Endpoint{kIpOther, port_}, write_to(victim_, kRqPsn), kForged);
  ASSERT_TRUE(wait_until([&] {
    return dropped(host_->packet_stats(), hca::DropReason::kBadSource) ==
           dropped(before, hca::DropReason::kBadSource) + 1;
  }));
  EXPECT_EQ(host_->packet_stats().packets_sent, before.packets_sent);
  EXPECT_TRUE(untouched(victim_));
  // Expect: from the peer's address but another port than the RoCE port, below the RoCEv2 entropy
  // range (0xC000 and up, where Linux and softhca send flows from): refused at the carrier.
  uint16_t other_port = 0;
  for (uint16_t p = fabric::kRoceSrcPortMin - 1; p > fabric::kRoceSrcPortMin - 256 && other_port == 0; --p) {
    if (p != port_ && Socket(fabric::Ipv4Endpoint{kIpB, p}, false).bound()) other_port = p;
  }
  ASSERT_NE(other_port, 0);
  const uint64_t refused = host_->packets_refused_at_carrier();
  send(fabric::Ipv4Endpoint{kIpB, other_port}, write_to(victim_, kRqPsn), kForged);
  ASSERT_TRUE(wait_until([&] { return host_->packets_refused_at_carrier() == refused + 1; }));
  EXPECT_TRUE(untouched(victim_));
  EXPECT_EQ(qp_state(*host_, victim_.qpn), hwif::QpState::kRts);
  // Expect: from the peer's address and the RoCE port: placed and acknowledged.
  send(fabric::Ipv4Endpoint{kIpB, port_}, write_to(victim_, kRqPsn), kGenuine);
  EXPECT_TRUE(wait_until([&] { return genuine(victim_); }));
  EXPECT_TRUE(wait_until([&] { return host_->packet_stats().acks_sent == before.acks_sent + 1; }));
}

}  // namespace
}  // namespace softhca::runtime
