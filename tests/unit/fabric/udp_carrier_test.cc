#include "fabric/udp_carrier.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "packet_test_util.h"

namespace softhca::fabric {
namespace {

using namespace std::chrono_literals;
using testing::build;

// Every wait is bounded: loopback delivers a datagram into the receiver's queue before sendmsg
// returns, so one receive() finds it; the bound only keeps a broken carrier from hanging the test.
constexpr auto kBound = 10s;
constexpr uint32_t kIpHostB = 0x7f000002;  // 127.0.0.2: a second "host" on the loopback /8

struct Received {
  Ipv4Endpoint source;
  Ipv4Endpoint destination;
  std::vector<uint8_t> bytes;
};

// Receives until n datagrams arrived or a wait ends empty-handed.
std::vector<Received> receive_n(UdpCarrier& c, size_t n) {
  std::vector<Received> got;
  while (got.size() < n) {
    const ReceiveResult r = c.receive(kBound, [&](const Datagram& d) {
      got.push_back(Received{d.source, d.destination, {d.bytes.begin(), d.bytes.end()}});
    });
    if (r.delivered == 0) break;
  }
  return got;
}

UdpCarrierOptions options(CarrierMode mode, uint32_t ip = kIpv4Loopback, uint16_t port = 0) {
  UdpCarrierOptions o;
  o.mode = mode;
  o.bind = Ipv4Endpoint{ip, port};
  return o;
}

// A plain UDP socket on 127.0.0.1, for sending what no carrier would.
class RawSender {
 public:
  RawSender() {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(kIpv4Loopback);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~RawSender() { close(fd_); }
  RawSender(const RawSender&) = delete;
  RawSender& operator=(const RawSender&) = delete;
  [[nodiscard]] uint16_t port() const { return port_; }
  bool send_to(Ipv4Endpoint to, std::span<const uint8_t> bytes) const {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(to.ip);
    a.sin_port = htons(to.port);
    return sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof(a)) ==
           static_cast<ssize_t>(bytes.size());
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

PacketFields native_send(uint16_t dlid, uint16_t slid) {
  PacketFields f;
  f.opcode = BthOpcode::kRcSendOnly;
  f.dlid = Lid(dlid);
  f.slid = Lid(slid);
  f.dest_qp = Qpn(0x12);
  f.psn = Psn(5);
  return f;
}

PacketFields roce_write(uint32_t src_ip, uint32_t dst_ip) {
  PacketFields f;
  f.has_lrh = false;
  f.opcode = BthOpcode::kRcRdmaWriteOnly;
  f.dest_qp = Qpn(0x000011);
  f.psn = Psn(0x000100);
  f.ack_req = true;
  f.reth = RethFields{0x00007f0000001000, RKey(0x1234), 13};
  GrhFields g;
  g.traffic_class = 0x68;  // DSCP 26, not ECT
  g.hop_limit = 9;
  g.sgid = ipv4_mapped_gid(src_ip);
  g.dgid = ipv4_mapped_gid(dst_ip);
  f.grh = g;
  return f;
}

std::vector<uint8_t> build_roce(const PacketFields& f, std::span<const uint8_t> payload, UdpPorts ports) {
  std::vector<uint8_t> out(kMaxRocePacketBytes);
  out.resize(serialize_roce(f, payload, ports, out));
  return out;
}

// net.ipv4.ip_default_ttl: the TTL of a datagram whose sender did not choose one.
int kernel_default_ttl() {
  int ttl = 64;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_default_ttl", "r")) {
    if (std::fscanf(f, "%d", &ttl) != 1) ttl = 64;
    std::fclose(f);
  }
  return ttl;
}

void refresh_ipv4_checksum(std::vector<uint8_t>& p) {
  p[10] = p[11] = 0;
  const uint16_t sum = ipv4_header_checksum(std::span<const uint8_t>(p).first<kIpv4HeaderBytes>());
  p[10] = static_cast<uint8_t>(sum >> 8);
  p[11] = static_cast<uint8_t>(sum);
}

const std::vector<uint8_t> kThirteenBytes = {'h', 'e', 'l', 'l', 'o', ',', ' ', 'r', 'o', 'c', 'e', 'v', '2'};

// Two RoCE carriers, "hosts" 127.0.0.1 and 127.0.0.2; skips where the second address is unusable.
class RoceCarriers : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(a_.open(options(CarrierMode::kRoceV2)).is_ok());
    const Status st = b_.open(options(CarrierMode::kRoceV2, kIpHostB));
    if (st.err() == EADDRNOTAVAIL) GTEST_SKIP() << "127.0.0.2 is not a local address here";
    ASSERT_TRUE(st.is_ok()) << st.err();
  }
  UdpCarrier a_;
  UdpCarrier b_;
};

TEST(UdpCarrier, TwoCarriersExchangeNativeIbPacketsWhole) {
  UdpCarrier a;
  UdpCarrier b;
  ASSERT_TRUE(a.open(options(CarrierMode::kNativeIb)).is_ok());
  ASSERT_TRUE(b.open(options(CarrierMode::kNativeIb)).is_ok());
  EXPECT_EQ(a.local().ip, kIpv4Loopback);
  EXPECT_NE(a.local().port, 0);
  const std::vector<uint8_t> there = build(native_send(2, 1), kThirteenBytes);
  PacketFields ack = native_send(1, 2);
  ack.opcode = BthOpcode::kRcAcknowledge;
  ack.aeth = AethFields{ack_syndrome(kAethCreditInvalid), 1};
  const std::vector<uint8_t> back = build(ack, {});

  ASSERT_TRUE(a.send(b.local(), there).is_ok());
  const std::vector<Received> at_b = receive_n(b, 1);
  ASSERT_EQ(at_b.size(), 1u);
  EXPECT_EQ(at_b[0].bytes, there);  // Expect: LRH..VCRC, byte for byte
  EXPECT_EQ(at_b[0].source, a.local());
  EXPECT_EQ(at_b[0].destination, b.local());
  EXPECT_EQ(testing::parse_status(at_b[0].bytes), ParseStatus::kOk);

  ASSERT_TRUE(b.send(at_b[0].source, back).is_ok());
  const std::vector<Received> at_a = receive_n(a, 1);
  ASSERT_EQ(at_a.size(), 1u);
  EXPECT_EQ(at_a[0].bytes, back);
  EXPECT_EQ(a.sent(), 1u);
  EXPECT_EQ(a.received(), 1u);
  EXPECT_EQ(b.sent(), 1u);
  EXPECT_EQ(b.received(), 1u);
}

TEST(UdpCarrier, ABatchOfPacketsArrivesInOrder) {
  UdpCarrier a;
  UdpCarrier b;
  ASSERT_TRUE(a.open(options(CarrierMode::kNativeIb)).is_ok());
  ASSERT_TRUE(b.open(options(CarrierMode::kNativeIb)).is_ok());
  for (uint32_t psn = 0; psn < 10; ++psn) {
    PacketFields f = native_send(2, 1);
    f.psn = Psn(psn);
    ASSERT_TRUE(a.send(b.local(), build(f, kThirteenBytes)).is_ok());
  }
  const std::vector<Received> got = receive_n(b, 10);
  ASSERT_EQ(got.size(), 10u);
  for (uint32_t psn = 0; psn < 10; ++psn) {
    PacketFields f;
    std::span<const uint8_t> payload;
    ASSERT_EQ(parse(got[psn].bytes, f, payload), ParseStatus::kOk);
    EXPECT_EQ(f.psn, Psn(psn));
  }
}

TEST_F(RoceCarriers, ARoceV2PacketArrivesAsTheSameIpv4PacketAndParses) {
  // The sender serialises with its own endpoint as source, so nothing needs resealing.
  const std::vector<uint8_t> p = build_roce(roce_write(kIpv4Loopback, kIpHostB), kThirteenBytes,
                                            UdpPorts{a_.local().port, b_.local().port});
  ASSERT_TRUE(a_.send(b_.local(), p).is_ok());
  const std::vector<Received> got = receive_n(b_, 1);
  ASSERT_EQ(got.size(), 1u);
  // Expect: the rebuilt header (identification 0, DF, TOS and TTL from the cmsgs) is the one sent,
  // but for the TTL: the kernel's (the route's), not the header's 9, as Linux's RoCE sends it.
  std::vector<uint8_t> expected = p;
  expected[8] = static_cast<uint8_t>(kernel_default_ttl());
  refresh_ipv4_checksum(expected);
  EXPECT_EQ(got[0].bytes, expected);
  EXPECT_EQ(got[0].source, a_.local());
  EXPECT_EQ(got[0].destination, b_.local());
  PacketFields f;
  std::span<const uint8_t> payload;
  UdpPorts ports;
  ASSERT_EQ(parse_roce(got[0].bytes, f, payload, ports, b_.local().port), ParseStatus::kOk);
  PacketFields want = roce_write(kIpv4Loopback, kIpHostB);
  want.grh->hop_limit = static_cast<uint8_t>(kernel_default_ttl());
  EXPECT_EQ(f, want);
  EXPECT_EQ(std::vector<uint8_t>(payload.begin(), payload.end()), kThirteenBytes);
  EXPECT_EQ(a_.resealed(), 0u);
}

TEST_F(RoceCarriers, AFlowsEntropyPortIsTheDatagramsSourcePortAndNothingIsResealed) {
  const uint16_t port = roce_entropy_port(0x000011);
  if (a_.source_port_for(port) != port) GTEST_SKIP() << "another program holds UDP port " << port;
  const std::vector<uint8_t> p =
      build_roce(roce_write(kIpv4Loopback, kIpHostB), kThirteenBytes, UdpPorts{port, b_.local().port});
  ASSERT_TRUE(a_.send(b_.local(), p).is_ok());
  const std::vector<Received> got = receive_n(b_, 1);
  ASSERT_EQ(got.size(), 1u);
  // Expect: sent from the entropy port's socket as it was sealed (IBA Annex A17: flow entropy in the
  // source port), from the carrier's address.
  EXPECT_EQ(got[0].source, (Ipv4Endpoint{kIpv4Loopback, port}));
  EXPECT_EQ(a_.resealed(), 0u);
  PacketFields f;
  std::span<const uint8_t> payload;
  UdpPorts ports;
  ASSERT_EQ(parse_roce(got[0].bytes, f, payload, ports, b_.local().port), ParseStatus::kOk);
  EXPECT_EQ(ports, (UdpPorts{port, b_.local().port}));
}

TEST_F(RoceCarriers, AFlowLabelsPortGoesOutFromAnEntropyPortResealed) {
  // The port Linux derives from flow label 0x12345 (0xE341) has no socket: it folds onto entropy
  // port 0xC000 + 0x2341 % 16 = 0xC001, or the carrier's own port if that one is held elsewhere.
  const std::vector<uint8_t> p =
      build_roce(roce_write(kIpv4Loopback, kIpHostB), kThirteenBytes, UdpPorts{roce_src_port(0x12345), 4791});
  const uint16_t expected = a_.source_port_for(roce_src_port(0x12345));
  EXPECT_TRUE(expected == kRoceSrcPortMin + 1 || expected == a_.local().port) << expected;
  ASSERT_TRUE(a_.send(b_.local(), p).is_ok());
  EXPECT_EQ(a_.resealed(), 1u);
  const std::vector<Received> got = receive_n(b_, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].source.port, expected);
  PacketFields f;
  std::span<const uint8_t> payload;
  UdpPorts ports;
  ASSERT_EQ(parse_roce(got[0].bytes, f, payload, ports, b_.local().port), ParseStatus::kOk);
  EXPECT_EQ(ports, (UdpPorts{expected, b_.local().port}));
  PacketFields want = roce_write(kIpv4Loopback, kIpHostB);
  want.grh->hop_limit = static_cast<uint8_t>(kernel_default_ttl());
  EXPECT_EQ(f, want);
}

TEST_F(RoceCarriers, AUnicastPacketLeavesWithTheKernelsTtlWhateverItsHeaderSays) {
  PacketFields w = roce_write(kIpv4Loopback, kIpHostB);
  w.grh->hop_limit = 1;  // ibv_rc_pingpong's hop limit: a router would drop it
  const std::vector<uint8_t> p = build_roce(w, kThirteenBytes, UdpPorts{a_.local().port, b_.local().port});
  ASSERT_EQ(p[8], 1);
  ASSERT_TRUE(a_.send(b_.local(), p).is_ok());
  const std::vector<Received> got = receive_n(b_, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].bytes[8], kernel_default_ttl());  // Expect: net.ipv4.ip_default_ttl (64 as shipped)
}

TEST_F(RoceCarriers, ARebuiltHeaderHidesTheSendersIdentificationAndTheUnseenRuleRecoversIt) {
  // A sender that numbers its datagrams (Linux: a changing identification in each): a plain socket
  // sends BTH..ICRC sealed over identification 0x2bad; the receiver rebuilds identification 0.
  RawSender raw;
  std::vector<uint8_t> p =
      build_roce(roce_write(kIpv4Loopback, kIpHostB), kThirteenBytes, UdpPorts{raw.port(), b_.local().port});
  p[4] = 0x2b;
  p[5] = 0xad;
  p[8] = static_cast<uint8_t>(kernel_default_ttl());
  refresh_ipv4_checksum(p);
  ASSERT_TRUE(reseal_roce(p));
  ASSERT_TRUE(raw.send_to(b_.local(), std::span<const uint8_t>(p).subspan(kRoceEncapBytes)));
  const std::vector<Received> got = receive_n(b_, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ((got[0].bytes[4] << 8) | got[0].bytes[5], 0);
  PacketFields f;
  std::span<const uint8_t> payload;
  UdpPorts ports;
  // Expect: the ICRC over the rebuilt header fails; with the identification unseen it holds, for 0x2bad.
  EXPECT_EQ(parse_roce(got[0].bytes, f, payload, ports, b_.local().port), ParseStatus::kBadIcrc);
  EXPECT_EQ(parse_roce(got[0].bytes, f, payload, ports, b_.local().port, Ipv4IdRule::kUnseen), ParseStatus::kOk);
  EXPECT_EQ(solve_ipv4_identification(got[0].bytes), 0x2bad);
  EXPECT_EQ(std::vector<uint8_t>(payload.begin(), payload.end()), kThirteenBytes);
}

TEST_F(RoceCarriers, ACorruptedRoceV2DatagramIsRejectedByTheIcrc) {
  RawSender raw;
  std::vector<uint8_t> p =
      build_roce(roce_write(kIpv4Loopback, kIpHostB), kThirteenBytes, UdpPorts{raw.port(), b_.local().port});
  // A foreign sender (a plain socket) flips one payload bit of an otherwise well-built packet.
  std::vector<uint8_t> udp_payload(p.begin() + kRoceEncapBytes, p.end());
  udp_payload[kBthBytes + kRethBytes + 3] ^= 0x10;  // a payload bit
  ASSERT_TRUE(raw.send_to(b_.local(), udp_payload));
  const std::vector<Received> got = receive_n(b_, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].source, (Ipv4Endpoint{kIpv4Loopback, raw.port()}));
  PacketFields f;
  std::span<const uint8_t> payload;
  UdpPorts ports;
  EXPECT_EQ(parse_roce(got[0].bytes, f, payload, ports, b_.local().port), ParseStatus::kBadIcrc);
}

TEST_F(RoceCarriers, ShortAndOversizeDatagramsAreDroppedAndCounted) {
  RawSender raw;
  const std::vector<uint8_t> tiny(kMinRoceUdpPayloadBytes - 1, 0);
  const std::vector<uint8_t> huge(kMaxRoceUdpPayloadBytes + 1, 0);
  const std::vector<uint8_t> giant(kMaxPacketBytes + 100, 0);  // beyond the receive buffer: MSG_TRUNC
  const std::vector<uint8_t> good =
      build_roce(roce_write(kIpv4Loopback, kIpHostB), kThirteenBytes, UdpPorts{a_.local().port, b_.local().port});
  ASSERT_TRUE(raw.send_to(b_.local(), tiny));
  ASSERT_TRUE(raw.send_to(b_.local(), huge));
  ASSERT_TRUE(raw.send_to(b_.local(), giant));
  ASSERT_TRUE(a_.send(b_.local(), good).is_ok());
  const std::vector<Received> got = receive_n(b_, 1);
  ASSERT_EQ(got.size(), 1u);
  std::vector<uint8_t> expected = good;  // with the kernel's TTL
  expected[8] = static_cast<uint8_t>(kernel_default_ttl());
  refresh_ipv4_checksum(expected);
  EXPECT_EQ(got[0].bytes, expected);
  EXPECT_EQ(b_.dropped_short(), 1u);
  EXPECT_EQ(b_.dropped_oversize(), 2u);
  EXPECT_EQ(b_.received(), 1u);
}

TEST_F(RoceCarriers, SendRefusesWhatIsNotAnIpv4UdpPacket) {
  std::vector<uint8_t> p =
      build_roce(roce_write(kIpv4Loopback, kIpHostB), kThirteenBytes, UdpPorts{a_.local().port, b_.local().port});
  std::vector<uint8_t> bad = p;
  bad[9] = 6;  // TCP
  EXPECT_EQ(a_.send(b_.local(), bad).err(), EINVAL);
  bad = p;
  bad.push_back(0);  // Total Length no longer the size
  EXPECT_EQ(a_.send(b_.local(), bad).err(), EINVAL);
  EXPECT_EQ(a_.send_errors(), 2u);
  EXPECT_EQ(a_.sent(), 0u);
}

TEST(UdpCarrier, StopWakesABlockedReceiverAndKeepsItAwake) {
  UdpCarrier c;
  ASSERT_TRUE(c.open(options(CarrierMode::kNativeIb)).is_ok());
  ReceiveResult r;
  // Unlimited wait: only stop() can end it (no packet is ever sent to this carrier). Whether the
  // thread is already in poll() when stop() runs or not, stop() is sticky, so the outcome is the same.
  std::thread receiver([&] { r = c.receive(-1ms, [](const Datagram&) {}); });
  c.stop();
  receiver.join();
  EXPECT_TRUE(r.woken);
  EXPECT_EQ(r.delivered, 0u);
  EXPECT_TRUE(c.receive(kBound, [](const Datagram&) {}).woken);  // Expect: returns at once
}

TEST(UdpCarrier, WakeEndsOneWaitOnly) {
  UdpCarrier c;
  ASSERT_TRUE(c.open(options(CarrierMode::kNativeIb)).is_ok());
  c.wake();
  c.wake();  // Expect: two wake-ups before a wait count as one
  EXPECT_TRUE(c.receive(kBound, [](const Datagram&) {}).woken);
  const ReceiveResult r = c.receive(0ms, [](const Datagram&) {});
  EXPECT_FALSE(r.woken);
  EXPECT_EQ(r.delivered, 0u);
  EXPECT_EQ(r.err, 0);
}

TEST(UdpCarrier, ReusePortLetsTwoProcessesOfAHostShareTheirPort) {
  UdpCarrierOptions o = options(CarrierMode::kNativeIb);
  o.reuse_port = true;
  UdpCarrier first;
  ASSERT_TRUE(first.open(o).is_ok());
  o.bind.port = first.local().port;
  UdpCarrier second;
  EXPECT_TRUE(second.open(o).is_ok());
  EXPECT_EQ(second.local(), first.local());
  UdpCarrier third;
  EXPECT_EQ(third.open(options(CarrierMode::kNativeIb, kIpv4Loopback, first.local().port)).err(), EADDRINUSE);
}

TEST(UdpCarrier, ErrorsAreTheErrnoValuesOfTheSocketCalls) {
  UdpCarrier c;
  const std::vector<uint8_t> p = build(native_send(2, 1), kThirteenBytes);
  EXPECT_EQ(c.send(Ipv4Endpoint{kIpv4Loopback, 9}, p).err(), EBADF);
  EXPECT_EQ(c.receive(0ms, [](const Datagram&) {}).err, EBADF);
  EXPECT_EQ(c.open(options(CarrierMode::kRoceV2, 0)).err(), EINVAL);  // RoCE needs a specific address
  ASSERT_TRUE(c.open(options(CarrierMode::kNativeIb)).is_ok());
  EXPECT_EQ(c.open(options(CarrierMode::kNativeIb)).err(), EINVAL);  // already open
  EXPECT_EQ(c.send(c.local(), std::span<const uint8_t>(p).first(10)).err(), EINVAL);
  c.close();
  EXPECT_FALSE(c.is_open());
}

}  // namespace
}  // namespace softhca::fabric
