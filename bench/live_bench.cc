// End-to-end figures of live mode across processes (issue 3, docs/live-mode.md): two processes of
// one host, one RC QP each, through the public verbs API (this program links softhca's
// libibverbs.so.1 like any verbs program):
//   lat   8-byte RDMA WRITE ping-pong, each side spinning on its own memory: half round trip; and,
//         for reference, the same two processes ping-ponging a cache line through shared memory, in
//         blocks alternating with the RDMA ones (both then see the platform in the same state)
//   rate  8-byte inline RDMA WRITEs, postlist 32, 1 signaled in 64, one QP: messages per second
//         (the RDMA ping-pong's p50, p99, p99.9 and max per round trip too)
//   event 8-byte SEND/RECV ping-pong in which each side sleeps in ibv_get_cq_event for its
//         receive (the event-driven pattern of qperf, ibv_rc_pingpong -e and MPI's progress
//         threads), beside the machine's floor for a wake-up: the same two processes ping-ponging
//         a byte through two pipes, in alternating blocks; half round trips and percentiles
//   rate  8-byte inline RDMA WRITEs, postlist 32, 1 signaled in 64, one QP: messages per second
//   bw    64 KiB RDMA WRITEs, 16 in flight: bytes per second
// The process forks before any verbs call; parent and child swap QP addresses through pipes.
// Prints a table, and JSON with --json. Options: --iters N (ping-pong round trips, default
// 200000; the event ping-pong does a tenth), --seconds S (rate and bw duration each, default 2),
// --only lat|event|rate|bw, --two-hosts (the peers on hosts "a" and "b" of one fabric: the same
// figures over the UDP carrier; with SOFTHCA_LINK=roce, RoCEv2 — give each host its own address
// with SOFTHCA_IP in that case), --hog (then every figure again with one CPU hog per online core
// started by the benchmark itself, keys with the suffix "_hog": graceful under load).
#include <infiniband/verbs.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kBufBytes = 1 << 20;
constexpr uint32_t kLatBytes = 8;
constexpr uint32_t kRateBytes = 8;
constexpr uint32_t kPostlist = 32;
constexpr uint32_t kSignalPeriod = 64;
constexpr uint32_t kBwBytes = 64 * 1024;
constexpr uint32_t kBwDepth = 16;
constexpr uint32_t kSqDepth = 256;

constexpr uint32_t kEventRecvDepth = 16;
constexpr size_t kEventRecvOffset = 4096;  // where the event ping-pong's receives land

struct PeerInfo {
  uint32_t lid, qpn, psn, rkey;
  uint64_t addr;
  uint32_t event_qpn, event_psn;
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "live_bench: %s (errno %d: %s)\n", what, errno, std::strerror(errno));
  std::exit(1);
}

struct Endpoint {
  ibv_device** list = nullptr;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* buf = nullptr;
  PeerInfo remote{};

  explicit Endpoint(uint32_t psn) {
    list = ibv_get_device_list(nullptr);
    if (list == nullptr || list[0] == nullptr) fail("no device");
    ctx = ibv_open_device(list[0]);
    if (ctx == nullptr) fail("ibv_open_device");
    pd = ibv_alloc_pd(ctx);
    buf = static_cast<uint8_t*>(std::aligned_alloc(4096, kBufBytes));
    if (pd == nullptr || buf == nullptr) fail("alloc");
    std::memset(buf, 0, kBufBytes);
    mr = ibv_reg_mr(pd, buf, kBufBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    cq = ibv_create_cq(ctx, 2 * kSqDepth, nullptr, nullptr, 0);
    if (mr == nullptr || cq == nullptr) fail("ibv_reg_mr/ibv_create_cq");
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = kSqDepth;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = 64;
    qp = ibv_create_qp(pd, &init);
    if (qp == nullptr) fail("ibv_create_qp");
    // The event ping-pong's QP: receives on a CQ with a completion channel, sends polled.
    channel = ibv_create_comp_channel(ctx);
    if (channel == nullptr) fail("ibv_create_comp_channel");
    recv_cq = ibv_create_cq(ctx, kEventRecvDepth, nullptr, channel, 0);
    send_cq = ibv_create_cq(ctx, kSqDepth, nullptr, nullptr, 0);
    if (recv_cq == nullptr || send_cq == nullptr) fail("ibv_create_cq (events)");
    init.send_cq = send_cq;
    init.recv_cq = recv_cq;
    init.cap.max_recv_wr = kEventRecvDepth;
    event_qp = ibv_create_qp(pd, &init);
    if (event_qp == nullptr) fail("ibv_create_qp (events)");
    ibv_port_attr port{};
    if (ibv_query_port(ctx, 1, &port) != 0) fail("ibv_query_port");
    me = {port.lid, qp->qp_num, psn, mr->rkey, reinterpret_cast<uintptr_t>(buf), event_qp->qp_num, psn + 500};
  }
  PeerInfo me{};
  ibv_comp_channel* channel = nullptr;
  ibv_cq* recv_cq = nullptr;
  ibv_cq* send_cq = nullptr;
  ibv_qp* event_qp = nullptr;

  void connect() {
    connect_qp(qp, remote.qpn, remote.psn, me.psn);
    connect_qp(event_qp, remote.event_qpn, remote.event_psn, me.event_psn);
  }

  void connect_qp(ibv_qp* q, uint32_t remote_qpn, uint32_t remote_psn, uint32_t my_psn) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
      fail("INIT");
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = remote_psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = static_cast<uint16_t>(remote.lid);
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
      fail("RTR");
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = my_psn;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0)
      fail("RTS");
  }

  ~Endpoint() {
    ibv_destroy_qp(event_qp);
    ibv_destroy_cq(recv_cq);
    ibv_destroy_cq(send_cq);
    ibv_destroy_comp_channel(channel);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    std::free(buf);
  }

  // Posts `n` RDMA WRITEs of `bytes` from buf+local_off to remote+remote_off as one list.
  void post_writes(uint32_t n, uint32_t bytes, uint64_t remote_off, bool inline_data, uint32_t signal_mask) {
    // The list is built once and reused, as perftest does: per post only the flags and the
    // target change (building WRs is the application's cost, not the HCA's).
    if (n != list_n_ || bytes != list_bytes_ || inline_data != list_inline_) build_list(n, bytes, inline_data);
    const unsigned int base = inline_data ? IBV_SEND_INLINE : 0;
    for (uint32_t i = 0; i < n; ++i) {
      wrs_[i].send_flags = base | ((signal_mask >> i) & 1 ? IBV_SEND_SIGNALED : 0);
      wrs_[i].wr.rdma.remote_addr = remote.addr + remote_off;
    }
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp, wrs_.data(), &bad) != 0) fail("ibv_post_send");
  }
  void build_list(uint32_t n, uint32_t bytes, bool inline_data) {
    for (uint32_t i = 0; i < n; ++i) {
      sges_[i] = {reinterpret_cast<uintptr_t>(buf), bytes, mr->lkey};
      wrs_[i] = {};
      wrs_[i].wr_id = i;
      wrs_[i].sg_list = &sges_[i];
      wrs_[i].num_sge = 1;
      wrs_[i].opcode = IBV_WR_RDMA_WRITE;
      wrs_[i].wr.rdma.rkey = remote.rkey;
      wrs_[i].next = i + 1 < n ? &wrs_[i + 1] : nullptr;
    }
    list_n_ = n;
    list_bytes_ = bytes;
    list_inline_ = inline_data;
  }
  std::array<ibv_sge, kPostlist> sges_{};
  std::array<ibv_send_wr, kPostlist> wrs_{};
  uint32_t list_n_ = 0, list_bytes_ = 0;
  bool list_inline_ = false;

  // Polls until `n` completions arrived; exits on an error completion.
  void wait_completions(uint32_t n) {
    ibv_wc wc[16];
    while (n > 0) {
      const int got = ibv_poll_cq(cq, 16, wc);
      if (got < 0) fail("ibv_poll_cq");
      for (int i = 0; i < got; ++i)
        if (wc[i].status != IBV_WC_SUCCESS) {
          std::fprintf(stderr, "live_bench: completion error %s\n", ibv_wc_status_str(wc[i].status));
          std::exit(1);
        }
      n -= static_cast<uint32_t>(got);
    }
  }
};

void write_all(int fd, const void* p, size_t n) {
  if (::write(fd, p, n) != static_cast<ssize_t>(n)) fail("pipe write");
}
void read_all(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r <= 0) fail("pipe read");
    c += r;
    n -= static_cast<size_t>(r);
  }
}

// The sequence byte each side writes into the other's buffer for ping-pong round `i`.
uint8_t seq_byte(uint64_t i) { return static_cast<uint8_t>(i % 255 + 1); }

// Ping-pong: the initiator writes round i, the responder waits for it and writes back.
// Round trips [first, first + n) of the RDMA WRITE ping-pong; the seconds they took.
// The initiator adds each round trip's duration [ns] to `samples`.
double pingpong(Endpoint& ep, bool initiator, uint64_t first, uint64_t n, std::vector<double>& samples) {
  volatile uint8_t* last = ep.buf + kLatBytes - 1;
  const auto start = Clock::now();
  auto mark = start;
  for (uint64_t i = first; i < first + n; ++i) {
    const uint8_t b = seq_byte(i);
    if (!initiator) {
      while (*last != b) {
      }
    }
    // Send from the upper half so the spinning byte in the lower half is not overwritten by us.
    ibv_sge sge{reinterpret_cast<uintptr_t>(ep.buf + kBufBytes / 2), kLatBytes, ep.mr->lkey};
    std::memset(ep.buf + kBufBytes / 2, b, kLatBytes);
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_INLINE | ((i % kSignalPeriod == kSignalPeriod - 1) ? IBV_SEND_SIGNALED : 0);
    wr.wr.rdma.remote_addr = ep.remote.addr;
    wr.wr.rdma.rkey = ep.remote.rkey;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(ep.qp, &wr, &bad) != 0) fail("ibv_post_send");
    if (wr.send_flags & IBV_SEND_SIGNALED) ep.wait_completions(1);
    if (initiator) {
      while (*last != b) {
      }
      const auto now = Clock::now();
      samples.push_back(std::chrono::duration<double, std::nano>(now - mark).count());
      mark = now;
    }
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// p50, p99, p99.9 and the largest of round-trip samples, as half round trips [us].
nlohmann::json percentiles(std::vector<double> v) {
  if (v.empty()) return nlohmann::json::object();
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))] / 2e3;
  };
  return {{"p50", at(0.50)}, {"p99", at(0.99)}, {"p99_9", at(0.999)}, {"max", v.back() / 2e3}};
}

// ---- the event-driven ping-pong -----------------------------------------------------------------

void post_event_recv(Endpoint& ep) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(ep.buf + kEventRecvOffset), 64, ep.mr->lkey};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (ibv_post_recv(ep.event_qp, &wr, &bad) != 0) fail("ibv_post_recv");
}

// Sleeps in ibv_get_cq_event until the receive CQ has a completion, as ibv_rc_pingpong -e does
// (the CQ armed; the event acknowledged and the CQ re-armed before it is polled); takes one
// receive completion and posts the receive again.
void wait_event_recv(Endpoint& ep) {
  for (;;) {
    ibv_wc wc{};
    const int got = ibv_poll_cq(ep.recv_cq, 1, &wc);
    if (got < 0) fail("ibv_poll_cq");
    if (got == 1) {
      if (wc.status != IBV_WC_SUCCESS) fail("receive completion error");
      post_event_recv(ep);
      return;
    }
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    if (ibv_get_cq_event(ep.channel, &cq, &context) != 0) fail("ibv_get_cq_event");
    ibv_ack_cq_events(cq, 1);
    if (ibv_req_notify_cq(cq, 0) != 0) fail("ibv_req_notify_cq");
  }
}

void post_event_send(Endpoint& ep, uint64_t i) {
  std::memset(ep.buf + kBufBytes / 2, seq_byte(i), kLatBytes);
  ibv_sge sge{reinterpret_cast<uintptr_t>(ep.buf + kBufBytes / 2), kLatBytes, ep.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  const bool signaled = i % kSignalPeriod == kSignalPeriod - 1;
  wr.send_flags = IBV_SEND_INLINE | (signaled ? IBV_SEND_SIGNALED : 0);
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(ep.event_qp, &wr, &bad) != 0) fail("ibv_post_send (event)");
  if (!signaled) return;
  ibv_wc wc{};
  int got = 0;
  while ((got = ibv_poll_cq(ep.send_cq, 1, &wc)) == 0) {
  }
  if (got < 0 || wc.status != IBV_WC_SUCCESS) fail("send completion error");
}

// Round trips [first, first + n) of the SEND/RECV ping-pong woken by completion events.
double event_pingpong(Endpoint& ep, bool initiator, uint64_t first, uint64_t n, std::vector<double>& samples) {
  const auto start = Clock::now();
  auto mark = start;
  for (uint64_t i = first; i < first + n; ++i) {
    if (initiator) {
      post_event_send(ep, i);
      wait_event_recv(ep);
      const auto now = Clock::now();
      samples.push_back(std::chrono::duration<double, std::nano>(now - mark).count());
      mark = now;
    } else {
      wait_event_recv(ep);
      post_event_send(ep, i);
    }
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The machine's floor for a wake-up: a byte through two pipes, each side blocked in read().
double pipe_pingpong(int rd, int wr, bool initiator, uint64_t n, std::vector<double>& samples) {
  const auto start = Clock::now();
  auto mark = start;
  char b = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (initiator) {
      write_all(wr, &b, 1);
      read_all(rd, &b, 1);
      const auto now = Clock::now();
      samples.push_back(std::chrono::duration<double, std::nano>(now - mark).count());
      mark = now;
    } else {
      read_all(rd, &b, 1);
      write_all(wr, &b, 1);
    }
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Streams writes for `seconds`; returns messages completed and elapsed seconds.
std::pair<uint64_t, double> stream(Endpoint& ep, uint32_t bytes, bool inline_data, double seconds) {
  const uint32_t batch = inline_data ? kPostlist : 1;
  const uint32_t in_flight = inline_data ? kSqDepth / 2 : kBwDepth;
  uint64_t posted = 0, completed_batches = 0, signaled_outstanding = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (Clock::now() < end) {
    for (uint32_t k = 0; k < 64 && posted < completed_batches + in_flight; ++k) {
      uint32_t mask = 0;
      for (uint32_t i = 0; i < batch; ++i)
        if ((posted + i) % (inline_data ? kSignalPeriod : 1) == (inline_data ? kSignalPeriod - 1 : 0)) mask |= 1u << i;
      ep.post_writes(batch, bytes, (posted * bytes) % (kBufBytes - bytes), inline_data, mask);
      signaled_outstanding += static_cast<uint64_t>(__builtin_popcount(mask));
      posted += batch;
    }
    ibv_wc wc[16];
    const int got = ibv_poll_cq(ep.cq, 16, wc);
    if (got < 0) fail("ibv_poll_cq");
    for (int i = 0; i < got; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) fail("completion error");
      completed_batches += inline_data ? kSignalPeriod : 1;
      --signaled_outstanding;
    }
  }
  ep.wait_completions(static_cast<uint32_t>(signaled_outstanding));
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  return {posted, s};
}

// The floor under the ping-pong: the same two processes handing a cache line back and forth
// through plain shared memory, no verbs. Round trips [first, first + n); the seconds they took.
// On a virtual machine it moves with where the host runs the two vCPUs (75 ns to 300 ns here), and
// the RDMA ping-pong moves with it: the two figures side by side tell the platform from the HCA.
double shm_pingpong(std::atomic<uint64_t>* lines, bool initiator, uint64_t first, uint64_t n) {
  std::atomic<uint64_t>& to_target = lines[0];
  std::atomic<uint64_t>& to_initiator = lines[8];  // another cache line
  const auto start = Clock::now();
  for (uint64_t i = first + 1; i <= first + n; ++i) {
    if (initiator) {
      to_target.store(i, std::memory_order_release);
      while (to_initiator.load(std::memory_order_acquire) != i) {
      }
    } else {
      while (to_target.load(std::memory_order_acquire) != i) {
      }
      to_initiator.store(i, std::memory_order_release);
    }
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Both ping-pongs, `iters` round trips each, in alternating blocks so that both see the platform
// in the same state; their half round trips in seconds.
std::pair<double, double> latencies(Endpoint& ep, std::atomic<uint64_t>* lines, bool initiator, uint64_t iters,
                                    std::vector<double>& samples) {
  constexpr uint64_t kBlocks = 20;
  const uint64_t per_block = iters / kBlocks > 0 ? iters / kBlocks : 1;
  double rdma = 0, shm = 0;
  for (uint64_t b = 0; b < kBlocks; ++b) {
    rdma += pingpong(ep, initiator, b * per_block, per_block, samples);
    shm += shm_pingpong(lines, initiator, b * per_block, per_block);
  }
  const auto round_trips = static_cast<double>(kBlocks * per_block);
  return {rdma / round_trips / 2, shm / round_trips / 2};
}

// The event-driven ping-pong and the pipe floor, in alternating blocks; half round trips [s].
std::pair<double, double> event_latencies(Endpoint& ep, int rd, int wr, bool initiator, uint64_t iters,
                                          std::vector<double>& event_samples, std::vector<double>& pipe_samples) {
  constexpr uint64_t kBlocks = 10;
  const uint64_t per_block = iters / kBlocks > 0 ? iters / kBlocks : 1;
  double event = 0, pipe = 0;
  for (uint64_t b = 0; b < kBlocks; ++b) {
    event += event_pingpong(ep, initiator, b * per_block, per_block, event_samples);
    pipe += pipe_pingpong(rd, wr, initiator, per_block, pipe_samples);
  }
  const auto round_trips = static_cast<double>(kBlocks * per_block);
  return {event / round_trips / 2, pipe / round_trips / 2};
}

// CPU hogs, one per online core, forked before any verbs call and held on a pipe until release():
// then each spins until it is killed ("under load", started by the benchmark itself).
struct Hogs {
  std::vector<pid_t> pids;
  int go[2] = {-1, -1};
  void fork_all() {
    if (::pipe(go) != 0) fail("pipe");
    const long cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    for (long c = 0; c < cores; ++c) {
      const pid_t p = ::fork();
      if (p < 0) fail("fork");
      if (p == 0) {
        char b = 0;
        if (::read(go[0], &b, 1) != 1) ::_exit(0);
        volatile uint64_t x = 0;
        for (;;) x = x + 1;
      }
      pids.push_back(p);
    }
  }
  void release() {
    const std::string bytes(pids.size(), 'g');
    write_all(go[1], bytes.data(), bytes.size());
  }
  void stop() {
    for (pid_t p : pids) ::kill(p, SIGKILL);
    for (pid_t p : pids) ::waitpid(p, nullptr, 0);
    pids.clear();
  }
};


// Every figure asked for, keys ending in `suffix`; both processes run it, with barriers between
// the parts.
void measure(Endpoint& ep, std::atomic<uint64_t>* lines, int rd, int wr, bool initiator, uint64_t iters,
             double seconds, const std::string& only, const std::string& suffix, nlohmann::json& results) {
  char token = 0;
  const auto barrier = [&] {
    write_all(wr, &token, 1);
    read_all(rd, &token, 1);
  };
  if (only.empty() || only == "lat") {
    std::vector<double> samples;
    samples.reserve(iters);
    const auto [rdma, shm] = latencies(ep, lines, initiator, iters, samples);
    results["write_lat_8B_half_rtt_us" + suffix] = rdma * 1e6;
    results["shm_pingpong_half_rtt_us" + suffix] = shm * 1e6;
    if (initiator) results["write_lat_8B_half_rtt_percentiles_us" + suffix] = percentiles(std::move(samples));
    barrier();
  }
  if (only.empty() || only == "event") {
    std::vector<double> event_samples, pipe_samples;
    const uint64_t n = std::max<uint64_t>(iters / 10, 10);
    const auto [event, pipe] = event_latencies(ep, rd, wr, initiator, n, event_samples, pipe_samples);
    results["send_event_lat_8B_half_rtt_us" + suffix] = event * 1e6;
    results["pipe_pingpong_half_rtt_us" + suffix] = pipe * 1e6;
    if (initiator) {
      results["send_event_lat_8B_half_rtt_percentiles_us" + suffix] = percentiles(std::move(event_samples));
      results["pipe_pingpong_half_rtt_percentiles_us" + suffix] = percentiles(std::move(pipe_samples));
    }
    barrier();
  }
  if (initiator) {
    if (only.empty() || only == "rate") {
      auto [msgs, s] = stream(ep, kRateBytes, true, seconds);
      results["write_rate_8B_postlist32_inline_sig64_mps" + suffix] = static_cast<double>(msgs) / s;
    }
    if (only.empty() || only == "bw") {
      auto [msgs, s] = stream(ep, kBwBytes, false, seconds);
      results["write_bw_64KiB_GBps" + suffix] = static_cast<double>(msgs) * kBwBytes / s / 1e9;
    }
  }
  barrier();
}

void print_table(const nlohmann::json& results, bool two_hosts, const std::string& suffix) {
  const auto row = [&](const char* label, const std::string& key, double scale, const char* unit) {
    if (results.contains(key + suffix))
      std::printf("%-46s %11.3f %s\n", label, results[key + suffix].get<double>() * scale, unit);
  };
  const auto pct = [&](const std::string& key) {
    if (!results.contains(key + suffix)) return;
    const nlohmann::json& p = results[key + suffix];
    std::printf("%-46s %6.2f / %.2f / %.2f / %.2f us\n", "    p50 / p99 / p99.9 / max", p["p50"].get<double>(),
                p["p99"].get<double>(), p["p99_9"].get<double>(), p["max"].get<double>());
  };
  std::printf("%-46s %14s\n",
              (std::string(two_hosts ? "live mode, two hosts over UDP" : "live mode, two processes of one host") +
               (suffix.empty() ? "" : ", a CPU hog per core"))
                  .c_str(),
              "result");
  row("8 B RDMA WRITE ping-pong, half round trip", "write_lat_8B_half_rtt_us", 1, "us");
  pct("write_lat_8B_half_rtt_percentiles_us");
  row("  (reference: shared-memory ping-pong)", "shm_pingpong_half_rtt_us", 1, "us");
  row("8 B SEND ping-pong woken by CQ events", "send_event_lat_8B_half_rtt_us", 1, "us");
  pct("send_event_lat_8B_half_rtt_percentiles_us");
  row("  (reference: pipe ping-pong, blocking)", "pipe_pingpong_half_rtt_us", 1, "us");
  pct("pipe_pingpong_half_rtt_percentiles_us");
  row("8 B WRITE, postlist 32, inline, 1/64 sig.", "write_rate_8B_postlist32_inline_sig64_mps", 1e-6, "Mmsg/s");
  row("64 KiB RDMA WRITE bandwidth", "write_bw_64KiB_GBps", 1, "GB/s");
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t iters = 200000;
  double seconds = 2.0;
  bool json = false;
  bool two_hosts = false;
  bool hog = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") json = true;
    else if (a == "--iters" && i + 1 < argc) iters = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--seconds" && i + 1 < argc) seconds = std::strtod(argv[++i], nullptr);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--two-hosts") two_hosts = true;
    else if (a == "--hog") hog = true;
    else {
      std::fprintf(stderr,
                   "usage: live_bench [--json] [--iters N] [--seconds S] [--only lat|event|rate|bw] [--two-hosts] "
                   "[--hog]\n");
      return 2;
    }
  }
  if (std::getenv("SOFTHCA_FABRIC") == nullptr)
    ::setenv("SOFTHCA_FABRIC", ("bench" + std::to_string(::getpid())).c_str(), 1);

  Hogs hogs;
  if (hog) hogs.fork_all();
  int to_child[2], to_parent[2];
  if (::pipe(to_child) != 0 || ::pipe(to_parent) != 0) fail("pipe");
  void* shared = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) fail("mmap");
  auto* lines = new (shared) std::atomic<uint64_t>[16]{};
  const pid_t child = ::fork();
  if (child < 0) fail("fork");
  const bool initiator = child != 0;
  // Before any verbs call: the process's host is fixed when the runtime starts.
  if (two_hosts) ::setenv("SOFTHCA_HOST", initiator ? "a" : "b", 1);
  const int rd = initiator ? to_parent[0] : to_child[0];
  const int wr = initiator ? to_child[1] : to_parent[1];

  nlohmann::json results = nlohmann::json::object();
  {
    Endpoint ep(initiator ? 1000 : 2000);
    write_all(wr, &ep.me, sizeof ep.me);
    read_all(rd, &ep.remote, sizeof ep.remote);
    ep.connect();
    for (uint32_t i = 0; i < kEventRecvDepth; ++i) post_event_recv(ep);
    if (ibv_req_notify_cq(ep.recv_cq, 0) != 0) fail("ibv_req_notify_cq");
    char token = 0;
    // Barrier: both QPs are in RTS (and the receives posted) before anything is sent.
    write_all(wr, &token, 1);
    read_all(rd, &token, 1);
    measure(ep, lines, rd, wr, initiator, iters, seconds, only, "", results);
    if (hog) {
      if (initiator) hogs.release();
      measure(ep, lines, rd, wr, initiator, iters, seconds, only, "_hog", results);
      if (initiator) hogs.stop();
    }
    write_all(wr, &token, 1);  // done: the target may tear down
    read_all(rd, &token, 1);
  }
  if (!initiator) return 0;
  int status = 0;
  ::waitpid(child, &status, 0);
  hogs.stop();

  if (json) {
    std::printf("%s\n", results.dump(2).c_str());
  } else {
    print_table(results, two_hosts, "");
    if (hog) print_table(results, two_hosts, "_hog");
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
