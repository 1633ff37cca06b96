// RoCEv2 between two hosts on one machine, without root: two processes (fork before any verbs
// use), hosts "a" and "b" of one fabric with SOFTHCA_LINK=roce, SOFTHCA_IP=127.0.0.2 and 127.0.0.3
// (all of 127/8 is loopback) and SOFTHCA_ROCE_PORT set to a port free on both addresses. Through
// the public verbs API only: the port is Ethernet with LID 0, GID 0 is ::ffff:<ip> of type RoCE v2,
// and an RC QP pair connected by GID (GRH, hop limit 1, as ibv_rc_pingpong -g 0 does) carries a
// SEND, an RDMA WRITE, an RDMA READ and both atomics, with the bytes and values checked on both
// sides. A process that asks for another link than its host's is refused with a clear error.
// Every wait is bounded. For tests/acceptance/roce_pcap_tshark.sh: ROCE_TEST_PCAP_DIR makes each
// host capture into <dir>/<host>.pcap, ROCE_TEST_PORT fixes the UDP port (default: a free one).
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "child_process.h"
#include "runtime/fabric_registry.h"
#include "runtime/shared_runtime.h"

namespace {

constexpr int kWaitMs = 30'000;
constexpr size_t kMsgBytes = 4096;  // four packets at the 1024-byte path MTU
constexpr size_t kSendOffset = 0;
constexpr size_t kWriteOffset = 8192;
constexpr size_t kReadOffset = 16384;   // the target's bytes the initiator reads
constexpr size_t kAtomicOffset = 24576;  // the target's 8-byte counter
constexpr size_t kMrBytes = 32768;
constexpr uint64_t kCounterStart = 1000;
constexpr uint64_t kAdd = 5;
constexpr uint64_t kSwap = 77;
constexpr uint32_t kIpA = 0x7f000002;  // 127.0.0.2
constexpr uint32_t kIpB = 0x7f000003;  // 127.0.0.3

struct Endpoint {
  ibv_gid gid;
  uint32_t qpn;
  uint64_t addr;
  uint32_t rkey;
};

bool read_bounded(int fd, void* buf, size_t len) { return softhca::test::read_bounded(fd, buf, len, kWaitMs); }
using softhca::test::write_all;
int poll_one(ibv_cq* cq) { return softhca::test::poll_one(cq, kWaitMs); }

ibv_gid mapped_gid(uint32_t ip) {
  ibv_gid g{};
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  const uint32_t be = htonl(ip);
  std::memcpy(g.raw + 12, &be, 4);
  return g;
}

struct Side {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kMrBytes, 0);
  Side() = default;
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;
  ~Side() {
    if (mr != nullptr) ibv_dereg_mr(mr);
    if (qp != nullptr) ibv_destroy_qp(qp);
    if (cq != nullptr) ibv_destroy_cq(cq);
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
  }
};

// Opens softhca_0, checks the port is RoCE with GID 0 = ::ffff:ip, and makes PD, CQ, RC QP, MR.
// 0 or a step number.
int open_side(Side& s, uint32_t ip) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n != 1) return 1;
  s.ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (s.ctx == nullptr) return 2;
  ibv_port_attr pa{};
  if (ibv_query_port(s.ctx, 1, &pa) != 0) return 6;
  if (pa.link_layer != IBV_LINK_LAYER_ETHERNET || pa.lid != 0 || pa.state != IBV_PORT_ACTIVE) return 7;
  if (pa.active_mtu != IBV_MTU_4096) return 8;  // lo's MTU is 65536
  ibv_gid gid{};
  const ibv_gid want = mapped_gid(ip);
  if (ibv_query_gid(s.ctx, 1, 0, &gid) != 0 || std::memcmp(&gid, &want, sizeof gid) != 0) return 9;
  ibv_gid_entry entry{};
  if (ibv_query_gid_ex(s.ctx, 1, 0, &entry, 0) != 0 || entry.gid_type != IBV_GID_TYPE_ROCE_V2) return 10;
  if (ibv_query_gid_ex(s.ctx, 1, 1, &entry, 0) != ENODATA) return 12;  // one GID only (returns the errno)
  s.pd = ibv_alloc_pd(s.ctx);
  s.cq = s.pd != nullptr ? ibv_create_cq(s.ctx, 16, nullptr, nullptr, 0) : nullptr;
  if (s.cq == nullptr) return 3;
  ibv_qp_init_attr ia{};
  ia.send_cq = s.cq;
  ia.recv_cq = s.cq;
  ia.cap.max_send_wr = 8;
  ia.cap.max_recv_wr = 8;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  s.qp = ibv_create_qp(s.pd, &ia);
  if (s.qp == nullptr) return 4;
  s.mr = ibv_reg_mr(s.pd, s.buf.data(), s.buf.size(),
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC);
  return s.mr == nullptr ? 5 : 0;
}

Endpoint local_endpoint(Side& s) {
  Endpoint e{};
  ibv_query_gid(s.ctx, 1, 0, &e.gid);
  e.qpn = s.qp->qp_num;
  e.addr = reinterpret_cast<uintptr_t>(s.buf.data());
  e.rkey = s.mr->rkey;
  return e;
}

// RESET -> INIT -> RTR -> RTS towards the peer, addressed by GID as ibv_rc_pingpong -g 0 does.
// 0 or a step number.
int connect(Side& s, const Endpoint& peer) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if (ibv_modify_qp(s.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) return 20;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer.qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = 1;
  const int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  // Ethernet has no LIDs: a path without a GRH is refused.
  if (ibv_modify_qp(s.qp, &a, mask) == 0) return 23;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = peer.gid;
  a.ah_attr.grh.sgid_index = 0;
  a.ah_attr.grh.hop_limit = 64;  // a routable TTL (ibv_rc_pingpong's 1 makes tshark add a note)
  if (ibv_modify_qp(s.qp, &a, mask) != 0) return 21;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(s.qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC) != 0)
    return 22;
  return 0;
}

uint8_t pattern(char tag, size_t i) { return static_cast<uint8_t>(tag + i * 7); }

// The target (host a): posts a receive, checks the SEND, then (after the initiator is done, with
// no CPU of its own involved) the WRITE's bytes and the counter the atomics changed.
int run_target(int in, int out) {
  Side s;
  if (int e = open_side(s, kIpA); e != 0) return e;
  for (size_t i = 0; i < kMsgBytes; ++i) s.buf[kReadOffset + i] = pattern('R', i);
  std::memcpy(s.buf.data() + kAtomicOffset, &kCounterStart, 8);
  ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf.data() + kSendOffset), kMsgBytes, s.mr->lkey};
  ibv_recv_wr rwr{};
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  const Endpoint me = local_endpoint(s);
  Endpoint peer{};
  if (!write_all(out, &me, sizeof(me)) || !read_bounded(in, &peer, sizeof(peer))) return 31;
  const ibv_gid want = mapped_gid(kIpB);
  if (std::memcmp(&peer.gid, &want, sizeof want) != 0) return 32;
  if (int e = connect(s, peer); e != 0) return e;
  if (ibv_post_recv(s.qp, &rwr, &bad_r) != 0) return 30;
  const uint8_t ready = 1;
  if (!write_all(out, &ready, 1)) return 33;
  if (poll_one(s.cq) != IBV_WC_SUCCESS) return 34;
  for (size_t i = 0; i < kMsgBytes; ++i) {
    if (s.buf[kSendOffset + i] != pattern('S', i)) return 35;
  }
  uint8_t done = 0;
  if (!read_bounded(in, &done, 1)) return 37;  // the initiator saw all its completions
  for (size_t i = 0; i < kMsgBytes; ++i) {
    if (s.buf[kWriteOffset + i] != pattern('W', i)) return 36;
  }
  uint64_t counter = 0;
  std::memcpy(&counter, s.buf.data() + kAtomicOffset, 8);
  return counter == kSwap ? 0 : 38;
}

int post_and_complete(Side& s, ibv_send_wr& wr) {
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(s.qp, &wr, &bad) != 0) return -3;
  return poll_one(s.cq);
}

// The initiator (host b): SEND, RDMA WRITE, RDMA READ, FETCH_AND_ADD, COMPARE_AND_SWAP.
int run_initiator(int in, int out) {
  Side s;
  if (int e = open_side(s, kIpB); e != 0) return 40 + e;
  for (size_t i = 0; i < kMsgBytes; ++i) {
    s.buf[kSendOffset + i] = pattern('S', i);
    s.buf[kWriteOffset + i] = pattern('W', i);
  }
  const Endpoint me = local_endpoint(s);
  Endpoint peer{};
  if (!read_bounded(in, &peer, sizeof(peer)) || !write_all(out, &me, sizeof(me))) return 60;
  if (int e = connect(s, peer); e != 0) return 40 + e;
  uint8_t ready = 0;
  if (!read_bounded(in, &ready, 1)) return 61;

  ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf.data() + kSendOffset), kMsgBytes, s.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  if (post_and_complete(s, wr) != IBV_WC_SUCCESS) return 62;

  sge.addr = reinterpret_cast<uintptr_t>(s.buf.data() + kWriteOffset);
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = peer.addr + kWriteOffset;
  wr.wr.rdma.rkey = peer.rkey;
  if (post_and_complete(s, wr) != IBV_WC_SUCCESS) return 63;

  sge.addr = reinterpret_cast<uintptr_t>(s.buf.data() + kReadOffset);
  wr.opcode = IBV_WR_RDMA_READ;
  wr.wr.rdma.remote_addr = peer.addr + kReadOffset;
  if (post_and_complete(s, wr) != IBV_WC_SUCCESS) return 64;
  for (size_t i = 0; i < kMsgBytes; ++i) {
    if (s.buf[kReadOffset + i] != pattern('R', i)) return 65;
  }

  sge.addr = reinterpret_cast<uintptr_t>(s.buf.data() + kAtomicOffset);
  sge.length = 8;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.wr.atomic.remote_addr = peer.addr + kAtomicOffset;
  wr.wr.atomic.rkey = peer.rkey;
  wr.wr.atomic.compare_add = kAdd;
  if (post_and_complete(s, wr) != IBV_WC_SUCCESS) return 66;
  uint64_t original = 0;
  std::memcpy(&original, s.buf.data() + kAtomicOffset, 8);
  if (original != kCounterStart) return 67;

  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = kCounterStart + kAdd;
  wr.wr.atomic.swap = kSwap;
  if (post_and_complete(s, wr) != IBV_WC_SUCCESS) return 68;
  std::memcpy(&original, s.buf.data() + kAtomicOffset, 8);
  if (original != kCounterStart + kAdd) return 69;

  const uint8_t done = 1;
  return write_all(out, &done, 1) ? 0 : 70;
}

// A UDP port bindable on both addresses now (the kernel's pick for one, checked on the other).
uint16_t free_port() {
  for (int attempt = 0; attempt < 20; ++attempt) {
    const int a = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(kIpA);
    socklen_t len = sizeof sa;
    if (::bind(a, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
        ::getsockname(a, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
      ::close(a);
      continue;
    }
    const int b = ::socket(AF_INET, SOCK_DGRAM, 0);
    sa.sin_addr.s_addr = htonl(kIpB);
    const bool ok = ::bind(b, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    ::close(b);
    ::close(a);
    if (ok) return ntohs(sa.sin_port);
  }
  return 0;
}

void set_host_env(const std::string& fabric, const std::string& host, uint32_t ip, uint16_t port) {
  ::setenv("SOFTHCA_FABRIC", fabric.c_str(), 1);
  ::setenv("SOFTHCA_HOST", host.c_str(), 1);
  ::setenv("SOFTHCA_LINK", "roce", 1);
  in_addr a{htonl(ip)};
  ::setenv("SOFTHCA_IP", ::inet_ntoa(a), 1);
  ::setenv("SOFTHCA_ROCE_PORT", std::to_string(port).c_str(), 1);
  ::unsetenv("SOFTHCA_NUM_DEVICES");
  if (const char* dir = std::getenv("ROCE_TEST_PCAP_DIR"); dir != nullptr && *dir != '\0') {
    ::setenv("SOFTHCA_PCAP", (std::string(dir) + "/" + host + ".pcap").c_str(), 1);
  } else {
    ::unsetenv("SOFTHCA_PCAP");
  }
}

pid_t spawn(const std::string& fabric, const std::string& host, uint32_t ip, uint16_t port, int (*role)(int, int),
            int in, int out) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    set_host_env(fabric, host, ip, port);
    std::exit(role(in, out));  // exit, not _exit: the runtime detaches at exit
  }
  return pid;
}

int reap(pid_t pid) { return softhca::test::reap_bounded(pid, kWaitMs); }

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

TEST(RoceTwoHosts, RcSendWriteReadAndAtomicsBetweenTwoHostsOverRoceV2) {
  const char* fixed = std::getenv("ROCE_TEST_PORT");
  const uint16_t port = fixed != nullptr ? static_cast<uint16_t>(std::atoi(fixed)) : free_port();
  ASSERT_NE(port, 0);
  const std::string fabric = "hfroce-" + std::to_string(::getpid());
  int a_to_b[2];
  int b_to_a[2];
  ASSERT_EQ(::pipe(a_to_b), 0);
  ASSERT_EQ(::pipe(b_to_a), 0);
  const pid_t target = spawn(fabric, "a", kIpA, port, run_target, b_to_a[0], a_to_b[1]);
  const pid_t initiator = spawn(fabric, "b", kIpB, port, run_initiator, a_to_b[0], b_to_a[1]);
  for (int fd : {a_to_b[0], a_to_b[1], b_to_a[0], b_to_a[1]}) ::close(fd);
  // A non-zero status names the step that failed (see run_target / run_initiator).
  EXPECT_EQ(reap(initiator), 0);
  EXPECT_EQ(reap(target), 0);
  using softhca::runtime::segment_path;
  EXPECT_FALSE(file_exists(segment_path("/dev/shm", ::geteuid(), fabric, "a")));
  EXPECT_FALSE(file_exists(segment_path("/dev/shm", ::geteuid(), fabric, "b")));
  EXPECT_FALSE(file_exists(softhca::runtime::FabricRegistry("/dev/shm", fabric).path()));
}

// In a child: attaches host "a" with the given link; 0 attached, 1 refused with an error naming
// SOFTHCA_LINK, 2 refused otherwise. Holds the attachment until `hold` is readable (or closed).
int attach_with(const std::string& fabric, softhca::runtime::LinkOptions link, int ready_fd, int hold_fd) {
  softhca::runtime::SharedRuntimeOptions o;
  o.names.fabric = fabric;
  o.names.host = std::string("a");  // not = "a": GCC 12 -O3 -Wrestrict false positive
  o.link = link;
  std::string error;
  auto rt = softhca::runtime::SharedRuntime::create(o, error);
  const uint8_t status = rt != nullptr ? 0 : error.find("SOFTHCA_LINK") != std::string::npos ? 1 : 2;
  if (!write_all(ready_fd, &status, 1)) return 3;
  if (hold_fd >= 0) {
    uint8_t b = 0;
    (void)read_bounded(hold_fd, &b, 1);
  }
  return status;
}

TEST(RoceTwoHosts, AProcessAskingForAnotherLinkThanItsHostsIsRefused) {
  const uint16_t port = free_port();
  ASSERT_NE(port, 0);
  const std::string fabric = "hfmix-" + std::to_string(::getpid());
  int ready[2];
  int hold[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(hold), 0);
  softhca::runtime::LinkOptions roce;
  roce.layer = softhca::hwif::LinkLayer::kEthernet;
  roce.ipv4 = kIpA;
  roce.roce_port = port;
  roce.netdev_mtu = 65536;
  const pid_t first = ::fork();
  if (first == 0) std::exit(attach_with(fabric, roce, ready[1], hold[0]));
  uint8_t status = 9;
  ASSERT_TRUE(read_bounded(ready[0], &status, 1));
  EXPECT_EQ(status, 0);  // the host is formatted with an Ethernet port
  const pid_t second = ::fork();
  if (second == 0) std::exit(attach_with(fabric, softhca::runtime::LinkOptions{}, ready[1], -1));
  ASSERT_TRUE(read_bounded(ready[0], &status, 1));
  EXPECT_EQ(status, 1);  // InfiniBand asked: refused, naming SOFTHCA_LINK
  softhca::runtime::LinkOptions other_ip = roce;
  other_ip.ipv4 = kIpB;
  const pid_t third = ::fork();
  if (third == 0) std::exit(attach_with(fabric, other_ip, ready[1], -1));
  ASSERT_TRUE(read_bounded(ready[0], &status, 1));
  EXPECT_EQ(status, 1);  // same link layer, another address: refused too
  const uint8_t go = 1;
  ASSERT_TRUE(write_all(hold[1], &go, 1));
  EXPECT_EQ(reap(first), 0);
  EXPECT_EQ(reap(second), 1);
  EXPECT_EQ(reap(third), 1);
  for (int fd : {ready[0], ready[1], hold[0], hold[1]}) ::close(fd);
  EXPECT_FALSE(file_exists(softhca::runtime::segment_path("/dev/shm", ::geteuid(), fabric, "a")));
  EXPECT_FALSE(file_exists(softhca::runtime::FabricRegistry("/dev/shm", fabric).path()));
}

}  // namespace
