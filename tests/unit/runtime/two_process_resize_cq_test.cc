// ibv_resize_cq in the shared runtime, end to end through the public verbs API: two processes (fork
// before any verbs use, SOFTHCA_FABRIC unique to the test) connect RC QPs; the initiator streams
// SENDs, the target receives them. Each resizes its own CQ over and over while the traffic flows:
// the target's receive CQEs are written by whichever process acts as the device (on one host, the
// initiator's thread placing the SEND; over UDP, the target host's agent), so its resizes race with
// another process's CQE writes. Every message must complete exactly once, in order, with its bytes,
// on both sides. Every wait is bounded.
#include <infiniband/verbs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "child_process.h"
#include "runtime/fabric_registry.h"
#include "runtime/host_segment.h"

namespace {

namespace test = softhca::test;

constexpr int kWaitMs = 30'000;
constexpr uint64_t kMessages = 3000;
constexpr uint32_t kRecvWindow = 16;  // receives the target keeps posted: at most 16 CQEs pending
constexpr uint32_t kSendWindow = 8;   // SENDs the initiator keeps in flight
constexpr uint32_t kSlots = 32;       // buffer slots, per side (more than either window)
constexpr uint32_t kSlotBytes = 2048;
constexpr uint64_t kResizeEvery = 5;  // completions between two resizes
// Sizes each side cycles through: none below its window, so every resize must succeed.
constexpr int kRecvSizes[] = {16, 300, 17, 64, 31, 1000, 16, 100};
constexpr int kSendSizes[] = {8, 200, 9, 15, 64, 8, 33};

uint32_t length(uint64_t seq) { return 64 + static_cast<uint32_t>(seq % 1000); }
uint8_t pattern(uint64_t seq, uint32_t i) { return static_cast<uint8_t>(seq * 131 + i); }

struct Endpoint {
  uint16_t lid;
  uint32_t qpn;
};

struct Side {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(size_t{kSlots} * kSlotBytes, 0);
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
  [[nodiscard]] ibv_sge slot(uint64_t seq, uint32_t len) {
    return ibv_sge{reinterpret_cast<uintptr_t>(buf.data() + (seq % kSlots) * kSlotBytes), len, mr->lkey};
  }
};

// softhca_0 with PD, a CQ of `cqe`, an RC QP on it and an MR over buf. 0 or a step number.
int open_side(Side& s, int cqe) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n != 1) return 1;
  s.ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (s.ctx == nullptr) return 2;
  s.pd = ibv_alloc_pd(s.ctx);
  s.cq = s.pd != nullptr ? ibv_create_cq(s.ctx, cqe, nullptr, nullptr, 0) : nullptr;
  if (s.cq == nullptr) return 3;
  ibv_qp_init_attr ia{};
  ia.send_cq = s.cq;
  ia.recv_cq = s.cq;
  ia.cap.max_send_wr = kSendWindow;
  ia.cap.max_recv_wr = kRecvWindow;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  s.qp = ibv_create_qp(s.pd, &ia);
  if (s.qp == nullptr) return 4;
  s.mr = ibv_reg_mr(s.pd, s.buf.data(), s.buf.size(), IBV_ACCESS_LOCAL_WRITE);
  return s.mr == nullptr ? 5 : 0;
}

// Swaps endpoints over the pipes and takes the QP RESET -> INIT -> RTR -> RTS. 0 or a step number.
int connect(Side& s, int in, int out) {
  ibv_port_attr pa{};
  if (ibv_query_port(s.ctx, 1, &pa) != 0) return 10;
  const Endpoint me{pa.lid, s.qp->qp_num};
  Endpoint peer{};
  if (!test::write_all(out, &me, sizeof me) || !test::read_bounded(in, &peer, sizeof peer, kWaitMs)) return 11;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  if (ibv_modify_qp(s.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) return 12;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer.qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;  // 0.01 ms (IBA table 45): a SEND ahead of its receive is retried soon
  a.ah_attr.dlid = peer.lid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(s.qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    return 13;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;  // for ever
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(s.qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC) != 0)
    return 14;
  return 0;
}

// One completion within kWaitMs: 1, 0 on timeout, -1 on a poll error.
int poll_bounded(ibv_cq* cq, ibv_wc& wc) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  while (std::chrono::steady_clock::now() < deadline) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n != 0) return n == 1 ? 1 : -1;
  }
  return 0;
}

int post_recv(Side& s, uint64_t seq) {
  ibv_sge sge = s.slot(seq, kSlotBytes);
  ibv_recv_wr wr{};
  wr.wr_id = seq;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(s.qp, &wr, &bad);
}

// The target: keeps kRecvWindow receives posted and checks each message as it completes; resizes
// its CQ every kResizeEvery completions. 0 or a step number.
int run_target(int in, int out) {
  Side s;
  if (int e = open_side(s, kRecvSizes[0]); e != 0) return e;
  if (int e = connect(s, in, out); e != 0) return e;
  // Posted once the QP can take them (not in RESET); a SEND that arrives first is RNR-NAKed and
  // retried (rnr_retry 7).
  for (uint64_t seq = 0; seq < kRecvWindow; ++seq) {
    if (post_recv(s, seq) != 0) return 20;
  }
  size_t resizes = 0;
  for (uint64_t seq = 0; seq < kMessages; ++seq) {
    ibv_wc wc{};
    if (poll_bounded(s.cq, wc) != 1) return 21;                      // lost
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV) return 22;
    if (wc.wr_id != seq) return 23;                                  // out of order or repeated
    if (wc.byte_len != length(seq)) return 24;
    const uint8_t* p = s.buf.data() + (seq % kSlots) * kSlotBytes;
    for (uint32_t i = 0; i < wc.byte_len; ++i) {
      if (p[i] != pattern(seq, i)) return 25;
    }
    if (seq + kRecvWindow < kMessages && post_recv(s, seq + kRecvWindow) != 0) return 26;
    if (seq % kResizeEvery == kResizeEvery - 1) {
      const int size = kRecvSizes[++resizes % std::size(kRecvSizes)];
      if (ibv_resize_cq(s.cq, size) != 0) return 27;
    }
  }
  ibv_wc wc{};
  if (ibv_poll_cq(s.cq, 1, &wc) != 0) return 28;  // nothing more
  if (resizes != kMessages / kResizeEvery) return 29;
  const uint8_t done = 1;
  return test::write_all(out, &done, 1) ? 0 : 30;
}

// The initiator: SENDs message after message, kSendWindow in flight, and checks each send
// completion; resizes its CQ every kResizeEvery completions. 0 or a step number.
int run_initiator(int in, int out) {
  Side s;
  if (int e = open_side(s, kSendSizes[0]); e != 0) return 40 + e;
  if (int e = connect(s, in, out); e != 0) return 40 + e;
  uint64_t posted = 0;
  size_t resizes = 0;
  for (uint64_t seq = 0; seq < kMessages; ++seq) {
    for (; posted < kMessages && posted < seq + kSendWindow; ++posted) {
      uint8_t* p = s.buf.data() + (posted % kSlots) * kSlotBytes;
      for (uint32_t i = 0; i < length(posted); ++i) p[i] = pattern(posted, i);
      ibv_sge sge = s.slot(posted, length(posted));
      ibv_send_wr wr{};
      wr.wr_id = posted;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_SIGNALED;
      ibv_send_wr* bad = nullptr;
      if (ibv_post_send(s.qp, &wr, &bad) != 0) return 60;
    }
    ibv_wc wc{};
    if (poll_bounded(s.cq, wc) != 1) return 61;
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_SEND) return 62;
    if (wc.wr_id != seq) return 63;
    if (seq % kResizeEvery == kResizeEvery - 1) {
      const int size = kSendSizes[++resizes % std::size(kSendSizes)];
      if (ibv_resize_cq(s.cq, size) != 0) return 64;
    }
  }
  uint8_t done = 0;
  if (!test::read_bounded(in, &done, 1, kWaitMs)) return 65;  // the target saw every message
  return 0;
}

pid_t spawn(const std::string& fabric, const std::string& host, int (*role)(int, int), int in, int out) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("SOFTHCA_FABRIC", fabric.c_str(), 1);
    ::setenv("SOFTHCA_HOST", host.c_str(), 1);
    ::unsetenv("SOFTHCA_NUM_DEVICES");
    std::exit(role(in, out));  // exit, not _exit: the runtime detaches at exit
  }
  return pid;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Both processes exit 0 (a non-zero status names the step that failed, see run_*), and nothing of
// the fabric is left in /dev/shm.
void run_pair(const std::string& fabric, const std::string& target_host, const std::string& initiator_host) {
  int a_to_b[2];
  int b_to_a[2];
  ASSERT_EQ(::pipe(a_to_b), 0);
  ASSERT_EQ(::pipe(b_to_a), 0);
  const pid_t target = spawn(fabric, target_host, run_target, b_to_a[0], a_to_b[1]);
  const pid_t initiator = spawn(fabric, initiator_host, run_initiator, a_to_b[0], b_to_a[1]);
  for (int fd : {a_to_b[0], a_to_b[1], b_to_a[0], b_to_a[1]}) ::close(fd);
  EXPECT_EQ(test::reap_bounded(initiator, 2 * kWaitMs), 0);
  EXPECT_EQ(test::reap_bounded(target, 2 * kWaitMs), 0);
  using softhca::runtime::segment_path;
  EXPECT_FALSE(file_exists(segment_path("/dev/shm", ::geteuid(), fabric, target_host)));
  EXPECT_FALSE(file_exists(segment_path("/dev/shm", ::geteuid(), fabric, initiator_host)));
  EXPECT_FALSE(file_exists(softhca::runtime::FabricRegistry("/dev/shm", fabric).path()));
}

TEST(TwoProcessResizeCq, CqsResizedOverAndOverOnOneHostWhileSendsFlowLoseNoCompletion) {
  run_pair("hcresize-" + std::to_string(::getpid()), "host0", "host0");
}

TEST(TwoProcessResizeCq, CqsResizedOverAndOverOnTwoHostsOverUdpWhileSendsFlowLoseNoCompletion) {
  run_pair("hcresizeudp-" + std::to_string(::getpid()), "a", "b");
}

}  // namespace
