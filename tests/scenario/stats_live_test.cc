// `softhca stats --live` and the per-QP counters: a child process runs a verbs workload on its
// host's shared device (two RC QPs of one context, connected to each other: same-host loopback),
// stops at a known point and waits; meanwhile this process, which never uses verbs and so is not
// one of the host's processes, reads the counters from the host segment and checks them packet
// by packet. Then the child exits with its QPs alive, so its SOFTHCA_STATS dump holds the same
// per-QP counters. Every wait is bounded; the child is always reaped.
#include <infiniband/verbs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../unit/runtime/child_process.h"
#include "runtime/host_segment.h"
#include "tools/stats_cmd.h"

namespace softhca::tools {
namespace {

using nlohmann::json;

constexpr int kWaitMs = 30'000;
constexpr int kWrites = 3;          // signaled 8-byte RDMA WRITEs from A to B
constexpr uint32_t kSendBytes = 16;  // then one signaled SEND into B's posted receive
// Wire sizes (IBA 5.3, 9.2-9.3): LRH 8 + BTH 12 (+ RETH 16 for a WRITE) + payload + ICRC 4 + VCRC 2;
// an ACK is LRH 8 + BTH 12 + AETH 4 + ICRC 4 + VCRC 2.
constexpr uint64_t kWriteWireBytes = 8 + 12 + 16 + 8 + 4 + 2;
constexpr uint64_t kSendWireBytes = 8 + 12 + kSendBytes + 4 + 2;
constexpr uint64_t kAckWireBytes = 8 + 12 + 4 + 4 + 2;

struct Qps {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* a = nullptr;
  ibv_qp* b = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(8192, 0);
};

int to_rts(ibv_qp* qp, uint32_t dest_qpn, uint16_t lid) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) return 1;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = lid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    return 2;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC) != 0
             ? 3
             : 0;
}

int open_qps(Qps& q) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n != 1) return 10;
  q.ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (q.ctx == nullptr) return 11;
  q.pd = ibv_alloc_pd(q.ctx);
  q.cq = q.pd != nullptr ? ibv_create_cq(q.ctx, 64, nullptr, nullptr, 0) : nullptr;
  if (q.cq == nullptr) return 12;
  ibv_qp_init_attr ia{};
  ia.send_cq = q.cq;
  ia.recv_cq = q.cq;
  ia.cap.max_send_wr = 16;
  ia.cap.max_recv_wr = 16;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  q.a = ibv_create_qp(q.pd, &ia);
  q.b = ibv_create_qp(q.pd, &ia);
  if (q.a == nullptr || q.b == nullptr) return 13;
  q.mr = ibv_reg_mr(q.pd, q.buf.data(), q.buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (q.mr == nullptr) return 14;
  ibv_port_attr pa{};
  if (ibv_query_port(q.ctx, 1, &pa) != 0) return 15;
  if (to_rts(q.a, q.b->qp_num, pa.lid) != 0 || to_rts(q.b, q.a->qp_num, pa.lid) != 0) return 16;
  return 0;
}

int post(ibv_qp* qp, ibv_wr_opcode op, uint64_t local, uint32_t len, uint64_t remote, uint32_t key, uint32_t rkey) {
  ibv_sge sge{local, len, key};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

// The child: the workload, then "paused" (with the QPNs) on `out`, then waits for a byte on `in`
// and exits with its objects alive (the SOFTHCA_STATS dump at exit lists its QPs).
int run_workload(int in, int out) {
  // Static: still reachable at exit, as a program's objects are (not leaks: LeakSanitizer agrees).
  static Qps q;
  if (int e = open_qps(q); e != 0) return e;
  const auto base = reinterpret_cast<uintptr_t>(q.buf.data());
  ibv_sge rsge{base + 4096, kSendBytes, q.mr->lkey};
  ibv_recv_wr rwr{};
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  if (ibv_post_recv(q.b, &rwr, &bad_r) != 0) return 20;
  for (int i = 0; i < kWrites; ++i) {
    if (post(q.a, IBV_WR_RDMA_WRITE, base, 8, base + 2048, q.mr->lkey, q.mr->rkey) != 0) return 21;
    if (test::poll_one(q.cq, kWaitMs) != IBV_WC_SUCCESS) return 22;
  }
  if (post(q.a, IBV_WR_SEND, base, kSendBytes, 0, q.mr->lkey, 0) != 0) return 23;
  for (int i = 0; i < 2; ++i) {  // the SEND's and the receive's
    if (test::poll_one(q.cq, kWaitMs) != IBV_WC_SUCCESS) return 24;
  }
  const uint32_t qpns[2] = {q.a->qp_num, q.b->qp_num};
  if (!test::write_all(out, qpns, sizeof qpns)) return 25;
  uint8_t go = 0;
  return test::read_bounded(in, &go, 1, kWaitMs) ? 0 : 26;
}

const json* find_qp(const json& dev, uint32_t qpn) {
  for (const json& q : dev["qps"])
    if (q["qpn"] == qpn) return &q;
  return nullptr;
}

// Expect: A sent 3 WRITEs and a SEND and received their 4 ACKs; B the other way round; A wrote
// 4 send CQEs, B 1 receive CQE; A rang 4 doorbells (or wrote the WQE through BlueFlame).
void expect_workload_counters(const json& dev, uint32_t qpn_a, uint32_t qpn_b) {
  const json* a = find_qp(dev, qpn_a);
  const json* b = find_qp(dev, qpn_b);
  ASSERT_NE(a, nullptr) << dev.dump(1);
  ASSERT_NE(b, nullptr) << dev.dump(1);
  EXPECT_EQ((*a)["type"], "RC");
  EXPECT_EQ((*a)["state"], "RTS");
  EXPECT_EQ((*a)["packets_sent"], kWrites + 1);
  EXPECT_EQ((*a)["bytes_sent"], kWrites * kWriteWireBytes + kSendWireBytes);
  EXPECT_EQ((*a)["packets_received"], kWrites + 1);
  EXPECT_EQ((*a)["bytes_received"], (kWrites + 1) * kAckWireBytes);
  EXPECT_EQ((*a)["doorbells"].get<uint64_t>() + (*a)["blueflame_writes"].get<uint64_t>(), kWrites + 1u);
  EXPECT_EQ((*a)["cqes"], kWrites + 1);
  EXPECT_EQ((*b)["packets_sent"], kWrites + 1);
  EXPECT_EQ((*b)["bytes_sent"], (kWrites + 1) * kAckWireBytes);
  EXPECT_EQ((*b)["packets_received"], kWrites + 1);
  EXPECT_EQ((*b)["cqes"], 1);
  EXPECT_EQ((*b)["doorbells"], 0);
  for (const json* q : {a, b}) {
    for (const char* k : {"packets_dropped", "retransmitted", "naks_sent", "naks_received", "error_cqes"})
      EXPECT_EQ((*q)[k], 0) << k;
  }
  // The device's own packet counters: every packet looped back, so sent = received.
  EXPECT_EQ(dev["packets"]["sent"], 2 * (kWrites + 1));
  EXPECT_EQ(dev["packets"]["received"], 2 * (kWrites + 1));
}

struct Result {
  int rc;
  std::string out;
  std::string err;
};

Result stats(const StatsOptions& o) {
  std::ostringstream out;
  std::ostringstream err;
  const int rc = run_stats(o, out, err);
  return {rc, out.str(), err.str()};
}

TEST(StatsLive, ReadsTheCountersOfARunningHostAndTheDumpAtExitHasTheSamePerQpCounters) {
  const std::string fabric = "stats-live-" + std::to_string(::getpid());
  const std::string dump_path = std::string(::testing::TempDir()) + "softhca-stats-live.json";
  std::remove(dump_path.c_str());
  int to_child[2];
  int from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setenv("SOFTHCA_FABRIC", fabric.c_str(), 1);
    ::setenv("SOFTHCA_STATS", dump_path.c_str(), 1);
    ::unsetenv("SOFTHCA_NUM_DEVICES");
    const int rc = run_workload(to_child[0], from_child[1]);
    std::exit(rc);  // exit(), not _exit(): the runtime writes SOFTHCA_STATS at exit
  }
  uint32_t qpns[2] = {};
  const bool paused = test::read_bounded(from_child[0], qpns, sizeof qpns, kWaitMs);

  StatsOptions o;
  o.live = true;
  o.json = true;
  o.fabric = fabric;
  const Result live = paused ? stats(o) : Result{-1, "", "the child did not reach its pause"};
  o.json = false;
  const Result table = paused ? stats(o) : Result{-1, "", ""};

  const uint8_t go = 1;
  test::write_all(to_child[1], &go, 1);
  EXPECT_EQ(test::reap_bounded(pid, kWaitMs), 0);
  ASSERT_TRUE(paused);

  // While it ran: the live counters.
  ASSERT_EQ(live.rc, 0) << live.err;
  const json dev = json::parse(live.out)["devices"][0];
  EXPECT_EQ(dev["processes"], 1) << "the reader is not one of the host's processes";
  expect_workload_counters(dev, qpns[0], qpns[1]);
  ASSERT_EQ(table.rc, 0) << table.err;
  EXPECT_NE(table.out.find("doorbell"), std::string::npos) << table.out;  // Expect: the PCIe table
  char row[64];
  std::snprintf(row, sizeof row, "0x%06x RC   RTS", qpns[0]);
  EXPECT_NE(table.out.find(row), std::string::npos) << table.out;

  // After it left: the host segment is gone (the reader kept nothing alive), and the dump holds
  // the same per-QP counters, next to the PCIe counters.
  struct stat st {};
  EXPECT_NE(::stat(runtime::segment_path(o.dir, ::geteuid(), fabric, "host0").c_str(), &st), 0);
  StatsOptions f;
  f.path = dump_path;
  f.json = true;
  const Result file = stats(f);
  ASSERT_EQ(file.rc, 0) << file.err;
  const json fdev = json::parse(file.out)["devices"][0];
  EXPECT_TRUE(fdev.contains("pcie"));
  expect_workload_counters(fdev, qpns[0], qpns[1]);
  // Expect: the live PCIe counters (the host's one process, at its pause) are what it dumped at
  // exit: it did no device work after the pause.
  ASSERT_TRUE(dev.contains("pcie"));
  EXPECT_EQ(dev["pcie"], fdev["pcie"]);
  EXPECT_FALSE(dev["pcie"]["tlps"].empty());
  EXPECT_EQ(stats(o).rc, 1) << "no host segment any more";
  for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
}

}  // namespace
}  // namespace softhca::tools
