#include "tools/model_workload.h"

#include <string>

namespace softhca::tools {

namespace {
constexpr uint32_t kMaxQueueDepth = 1u << 14;   // the device's max_qp_wr (R1)
constexpr uint32_t kMaxInlineBytes = 956;       // the device's max_inline_data (docs/device.md)
constexpr uint32_t kMaxQps = 1u << 16;          // the device's max_qp (hca/device_config.cc)
constexpr uint32_t kAtomicBytes = 8;
constexpr uint32_t kMaxUdBytes = 4096;          // one packet of the port's MTU (W4)
constexpr uint32_t kMaxDmaBytes = 1u << 20;     // a DMA transfer's chain stays small (assumed bound)
constexpr uint32_t kMaxHosts = 256;             // the timing model's hosts (sim::TimingModel)
}  // namespace

std::string_view to_string(Operation op) {
  switch (op) {
    case Operation::kWrite: return "write";
    case Operation::kRead: return "read";
    case Operation::kSend: return "send";
    case Operation::kAtomic: return "atomic";
  }
  return "?";
}

std::optional<Operation> operation_from_string(std::string_view s) {
  if (s == "write") return Operation::kWrite;
  if (s == "read") return Operation::kRead;
  if (s == "send") return Operation::kSend;
  if (s == "atomic") return Operation::kAtomic;
  return std::nullopt;
}

std::optional<std::string> validate(const Workload& w) {
  if (w.messages == 0) return "the workload needs at least one message";
  if (w.size_bytes == 0) return "message size must be at least 1 byte";
  if (w.size_bytes > (1u << 30)) return "message size must be at most 1 GiB";
  if (is_dma(w.pattern)) {
    if (w.size_bytes > kMaxDmaBytes) return "a DMA transfer is at most " + std::to_string(kMaxDmaBytes) + " bytes";
    return std::nullopt;  // no QP, no CPU: the other parameters do not apply
  }
  if (w.transport == Transport::kUd && w.op != Operation::kSend) return "UD carries send only (use --op send)";
  if (w.transport == Transport::kUc && w.op != Operation::kSend && w.op != Operation::kWrite) {
    return "UC carries write and send only";
  }
  if (w.transport == Transport::kUd && w.size_bytes > kMaxUdBytes) {
    return "a UD message is one packet: at most " + std::to_string(kMaxUdBytes) + " bytes";
  }
  if (is_fanout(w.pattern)) {
    if (w.hosts < 2 || w.hosts > kMaxHosts) return "incast and alltoall run on 2.." + std::to_string(kMaxHosts) + " hosts";
    if (w.qps != 1 || w.threads != 1) return "incast and alltoall run one QP per flow and one thread per host";
    const uint64_t flows = w.pattern == Pattern::kIncast ? w.hosts - 1 : uint64_t{w.hosts} * (w.hosts - 1);
    if (flows * w.messages > (uint64_t{1} << 32)) return "at most 2^32 messages in all";
  } else if (w.hosts != 2) {
    return "only incast and alltoall run on more than two hosts";
  }
  if (w.pattern == Pattern::kPingPong) {
    if (w.op != Operation::kSend && w.op != Operation::kWrite) return "pingpong answers write or send only";
    if (w.qps != 1 || w.threads != 1 || w.postlist != 1) {
      return "pingpong runs one QP, one thread and one WR per post on each host";
    }
  }
  if (w.op == Operation::kAtomic && w.size_bytes != kAtomicBytes) return "atomics are 8 bytes (use --size 8)";
  if (w.inline_data && (w.op == Operation::kRead || w.op == Operation::kAtomic)) {
    return "inline data applies to write and send only";
  }
  if (w.inline_data && w.size_bytes > kMaxInlineBytes) {
    return "inline messages are at most " + std::to_string(kMaxInlineBytes) + " bytes";
  }
  if (w.qps == 0 || w.qps > kMaxQps) return "QPs must be 1.." + std::to_string(kMaxQps);
  if (w.threads == 0 || w.threads > w.qps) return "threads must be 1..QPs (each thread owns its QPs)";
  if (w.threads > 255) return "at most 255 threads";
  if (w.queue_depth == 0 || w.queue_depth > kMaxQueueDepth) {
    return "queue depth must be 1.." + std::to_string(kMaxQueueDepth);
  }
  if (w.postlist == 0 || w.signal_period == 0) return "postlist and signal period must be at least 1";
  // A post must fit next to the unsignaled WRs no completion has retired yet.
  if (w.postlist + w.signal_period - 1 > w.queue_depth) {
    return "postlist + signal period - 1 must not exceed the queue depth, or the closed loop stalls";
  }
  const uint64_t buffer = static_cast<uint64_t>(w.qps) * w.queue_depth * w.size_bytes;
  if (buffer > (uint64_t{1} << 32)) return "QPs x queue depth x size must stay within 4 GiB of buffers";
  return std::nullopt;
}

std::string_view to_string(Transport t) {
  switch (t) {
    case Transport::kRc: return "rc";
    case Transport::kUc: return "uc";
    case Transport::kUd: return "ud";
  }
  return "?";
}

std::optional<Transport> transport_from_string(std::string_view s) {
  if (s == "rc") return Transport::kRc;
  if (s == "uc") return Transport::kUc;
  if (s == "ud") return Transport::kUd;
  return std::nullopt;
}

std::string_view to_string(Pattern p) {
  switch (p) {
    case Pattern::kStream: return "stream";
    case Pattern::kPingPong: return "pingpong";
    case Pattern::kPcieRead: return "pcie-read";
    case Pattern::kPcieWrite: return "pcie-write";
    case Pattern::kIncast: return "incast";
    case Pattern::kAllToAll: return "alltoall";
  }
  return "?";
}

std::optional<Pattern> pattern_from_string(std::string_view s) {
  if (s == "stream") return Pattern::kStream;
  if (s == "pingpong") return Pattern::kPingPong;
  if (s == "pcie-read") return Pattern::kPcieRead;
  if (s == "pcie-write") return Pattern::kPcieWrite;
  if (s == "incast") return Pattern::kIncast;
  if (s == "alltoall") return Pattern::kAllToAll;
  return std::nullopt;
}

RunResult run_workload(const sim::MachineProfile& p, const Workload& w, const RunOptions& options) {
  if (is_dma(w.pattern)) return run_dma(p, w);
  if (is_fanout(w.pattern)) return run_fanout(p, w);
  return w.pattern == Pattern::kPingPong ? run_pingpong(p, w) : run_closed_loop(p, w, options);
}

}  // namespace softhca::tools
