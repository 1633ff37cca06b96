#include "tools/model_post.h"

namespace softhca::tools {

ibv_mtu mtu_enum(uint32_t bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
  }
}

unsigned int remote_access_of(Operation op) {
  switch (op) {
    case Operation::kRead: return IBV_ACCESS_REMOTE_READ;
    case Operation::kAtomic: return IBV_ACCESS_REMOTE_ATOMIC;
    case Operation::kWrite:
    case Operation::kSend: break;
  }
  return IBV_ACCESS_REMOTE_WRITE;
}

void set_operation(ibv_send_wr& wr, const Workload& w, const HostSide& sender, uint32_t q, uint64_t remote_addr,
                   uint32_t rkey) {
  switch (w.op) {
    case Operation::kWrite:
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.wr.rdma = {remote_addr, rkey};
      break;
    case Operation::kRead:
      wr.opcode = IBV_WR_RDMA_READ;
      wr.wr.rdma = {remote_addr, rkey};
      break;
    case Operation::kSend:
      wr.opcode = IBV_WR_SEND;
      if (w.transport == Transport::kUd) wr.wr.ud = {sender.ah(), sender.peer_qpn(q), HostSide::kQkey};
      break;
    case Operation::kAtomic:
      wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
      wr.wr.atomic = {remote_addr, 1, 0, rkey};
      break;
  }
}

Picoseconds post_cpu_cost(const sim::TimingParams& params, const Workload& w, const ChainRecorder& recorder,
                          uint32_t wqes) {
  const int64_t inline_lines = w.inline_data ? (w.size_bytes + 63) / 64 : 0;
  Picoseconds cost = params.post_call + (params.wqe_build + params.inline_per_64b * inline_lines) * wqes;
  cost += recorder.blueflame_lines() > 0 ? params.blueflame_line * recorder.blueflame_lines()
                                         : params.doorbell * recorder.doorbells();
  return cost;
}

void add_counts(pcie::CounterSnapshot& into, const pcie::CounterSnapshot& d) {
  for (int t = 0; t < pcie::kTlpTypeCount; ++t) {
    for (int c = 0; c < pcie::kTlpCauseCount; ++c) {
      into.at(static_cast<pcie::TlpType>(t), static_cast<pcie::TlpCause>(c)) +=
          d.at(static_cast<pcie::TlpType>(t), static_cast<pcie::TlpCause>(c));
    }
  }
}

}  // namespace softhca::tools
