// The timing model's workloads and what they report: a stream (host 0 posts closed-loop) or a
// ping-pong (both hosts post and poll, perftest's _lat) on RC, UC or UD, or an incast or all-to-all
// of many hosts, through the real verbs API and device on a sim-mode runtime, or pcie-bench's DMA reads and writes through the device's PCIe
// port alone; virtual time in ps, deterministic bit for bit.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "driver/provider.h"
#include "pcie/counters.h"
#include "pcie/pcie_config.h"
#include "sim/chain.h"
#include "sim/machine_profile.h"
#include "sim/timing_model.h"
#include "tools/model_sim_runtime.h"

namespace softhca::tools {

enum class Operation : uint8_t { kWrite, kRead, kSend, kAtomic };
std::string_view to_string(Operation op);
std::optional<Operation> operation_from_string(std::string_view s);

// The QPs' transport service: RC (all operations), UC (write, send), UD (send, one packet each).
enum class Transport : uint8_t { kRc, kUc, kUd };
std::string_view to_string(Transport t);
std::optional<Transport> transport_from_string(std::string_view s);

// stream: softhca_0 posts closed-loop while its send queues have room, softhca_1's CPU does nothing
// (receives re-posted untimed). pingpong: host 0 posts a message, host 1's CPU polls for it (SEND:
// its receive CQE; WRITE: the last byte of its buffer) and posts the same message back, host 0
// polls for that and posts again (perftest's ib_send_lat, ib_write_lat). pcie-read, pcie-write:
// host 0's device reads (writes) size_bytes of host memory, `messages` times: one at a time for
// the latency, as many at once as its read tags (posted credits) allow for the bandwidth
// (pcie-bench's LAT_RD, BW_RD, BW_WR); no CPU, no QP, no fabric (transport and op do not apply).
// incast: hosts 1..N-1 each send `messages` to host 0; alltoall: every host sends `messages` to
// every other, round robin over its peers in ascending order (0, 1, ...: a plain loop, so at first
// every host sends to the same one) or shifted (h+1, h+2, ...: MPI's pairwise order); one QP per (sender, receiver) flow, one CPU
// thread per host posting closed-loop, receivers' CPUs not modelled; through the switch's output
// queues and link-level credits (model_fanout.cc).
enum class Pattern : uint8_t { kStream, kPingPong, kPcieRead, kPcieWrite, kIncast, kAllToAll };
[[nodiscard]] constexpr bool is_dma(Pattern p) { return p == Pattern::kPcieRead || p == Pattern::kPcieWrite; }
[[nodiscard]] constexpr bool is_fanout(Pattern p) { return p == Pattern::kIncast || p == Pattern::kAllToAll; }
std::string_view to_string(Pattern p);
std::optional<Pattern> pattern_from_string(std::string_view s);

struct Workload {
  Pattern pattern = Pattern::kStream;
  Transport transport = Transport::kRc;
  Operation op = Operation::kWrite;
  uint32_t size_bytes = 8;        // per message (atomics: 8)
  uint64_t messages = 1024;       // in total, spread over the QPs (pingpong: round trips, 1 QP)
  uint32_t qps = 1;               // QPs from host 0 to host 1
  uint32_t threads = 1;           // CPU threads of host 0; QP q belongs to thread q % threads
  uint32_t postlist = 1;          // WRs per ibv_post_send
  bool inline_data = false;       // IBV_SEND_INLINE (write and send only)
  uint32_t signal_period = 1;     // one signaled WR in this many (and always the QP's last)
  driver::BlueFlameMode blueflame = driver::BlueFlameMode::kOff;
  uint32_t queue_depth = 128;     // send queue depth (max_send_wr) per QP
  uint32_t hosts = 2;             // incast, alltoall: hosts on the switch (2..256); else 2
  bool shifted = false;           // alltoall: host h's peers in the order h+1, h+2, ... (else 0, 1, ...)
};
// An error message when the workload cannot run (sizes, limits, a closed loop that would stall).
std::optional<std::string> validate(const Workload& w);
// The same workload with another pattern (a run checks the rules of the pattern it runs).
[[nodiscard]] inline Workload as_pattern(Workload w, Pattern p) {
  w.pattern = p;
  return w;
}

// The seed's steps 0-5 of one post on an idle machine: where its time goes.
struct LatencyBreakdown {
  Picoseconds total{0};  // from the start of ibv_post_send to the CPU having polled the CQE
  std::array<Picoseconds, sim::kPhaseCount> phase{};  // along the critical path; sums to total
};

// The chain a one-post latency run placed: every step with its times in model picoseconds (the
// sim-mode trace, model_trace.h, is drawn from it).
struct LatencyTrace {
  std::vector<sim::Step> steps;
  std::vector<sim::StepTimes> times;
};

// One CPU core's busy time over a run: a posting thread's posts and polls (each thread has a core).
struct CpuUse {
  uint32_t host = 0;
  uint32_t thread = 0;
  Picoseconds busy{0};
};

// incast, alltoall: what one host's HCA did, from the chains placed (the device's own TLPs and
// packets of every exchange the host took part in).
struct HostTraffic {
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t packets_sent = 0;      // requests, ACKs and responses leaving its port
  uint64_t packets_received = 0;
  uint64_t packet_bytes_sent = 0;  // LRH to VCRC
  // TLPs on its PCIe link: [LinkDir (down, up)][TlpClass (posted, non-posted, completion)].
  std::array<std::array<uint64_t, 3>, 2> tlps{};
  std::array<uint64_t, 2> tlp_wire_bytes{};  // [LinkDir]
};

struct RunResult {
  Workload workload;
  uint64_t messages = 0;
  Picoseconds elapsed{0};    // first post to last completion polled
  double message_rate = 0;   // messages per second of virtual time
  double goodput_gbps = 0;   // message payload bytes per second, in Gb/s
  pcie::CounterSnapshot requester;  // softhca_0's PCIe counters over the run
  pcie::CounterSnapshot responder;  // softhca_1's
  Picoseconds cpu_busy{0};          // host 0's CPU threads, summed
  std::vector<CpuUse> cpu;          // per thread (= core) of every host whose CPU is modelled
  std::vector<sim::ResourceUse> resources;
  uint64_t scheduler_events = 0;
  uint64_t steps = 0;
  uint64_t replayed_posts = 0;  // posts whose chain was replayed (RunOptions::replay)
  // Completion tags kept at most at once (TagWindow): bounded by the completions in flight.
  uint64_t peak_pending_tags = 0;
  // Ping-pong: each round trip is from one of host 0's posts to its next (perftest's timestamps);
  // half of it, the median over the round trips (perftest's t_typical), the least and the most.
  Picoseconds half_rtt{0};
  Picoseconds half_rtt_min{0};
  Picoseconds half_rtt_max{0};
  // pcie-read, pcie-write: one transfer from its first TLP's issue to its last byte (read: the
  // last completion at the device; write: in memory), the median over the transfers, the least and
  // the most; and the steady-state bandwidth with as many in flight as the device allows.
  Picoseconds dma_latency{0};
  Picoseconds dma_latency_min{0};
  Picoseconds dma_latency_max{0};
  double dma_bandwidth_gbps = 0;
  std::vector<HostTraffic> traffic;  // incast, alltoall: per host
};

struct RunOptions {
  // Replay mode, for long runs: every post of a QP's first period (lcm of queue depth, signal
  // period and postlist WRs) goes through the device; posts of later whole periods reuse the chain
  // the same post of the first period recorded (a closed loop of one shape repeats itself: ring
  // offsets, payload slots and the signaled pattern), their PCIe counts are added likewise; the
  // tail runs through the device again. Same counts and times as a full run, many times faster.
  bool replay = false;
};

// Runs the workload's stream closed-loop to the end (whatever w.pattern says). Throws
// std::invalid_argument (bad workload) or std::runtime_error (a verbs call or a completion failed).
RunResult run_closed_loop(const sim::MachineProfile& p, const Workload& w, const RunOptions& options = {});
// Runs w.messages round trips of a ping-pong (model_pingpong.h); throws as run_closed_loop().
RunResult run_pingpong(const sim::MachineProfile& p, const Workload& w);
// Runs pcie-read or pcie-write (model_dma.cc): its latency run, then its bandwidth run (whose
// counts, resources and rate the result holds). Throws std::invalid_argument for a bad workload.
RunResult run_dma(const sim::MachineProfile& p, const Workload& w);
// Runs incast or alltoall over w.hosts hosts (model_fanout.cc); throws as run_closed_loop().
RunResult run_fanout(const sim::MachineProfile& p, const Workload& w);
// The run w.pattern names.
RunResult run_workload(const sim::MachineProfile& p, const Workload& w, const RunOptions& options = {});

// One post of `w.postlist` WRs (only the last signaled) on an idle machine, through completion
// and poll; the time of each of the seed's steps along the critical path.
LatencyBreakdown measure_latency(const sim::MachineProfile& p, const Workload& w);
// The same run, and the chain it placed into `trace`.
LatencyBreakdown measure_latency(const sim::MachineProfile& p, const Workload& w, LatencyTrace& trace);

}  // namespace softhca::tools
