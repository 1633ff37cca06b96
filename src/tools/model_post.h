// What one post of a timing-model workload is, shared by the stream and the ping-pong: the WR's
// opcode and addressing for the workload's operation and transport (UD: address handle, remote
// QPN and Q_Key), the CPU time of the post (step 0, ps), and helpers for PCIe counts and the MTU.
#pragma once
#include <infiniband/verbs.h>

#include <cstdint>

#include "base/units.h"
#include "pcie/counters.h"
#include "sim/timing_params.h"
#include "tools/model_host_side.h"
#include "tools/model_recorder.h"
#include "tools/model_workload.h"

namespace softhca::tools {

// The extra bytes a UD receive buffer needs in front of the payload: the GRH (W1).
inline constexpr uint32_t kUdGrhBytes = 40;

// The path MTU enum of `bytes` (256..4096, W4).
ibv_mtu mtu_enum(uint32_t bytes);
// What the responder must allow for the workload's operation.
unsigned int remote_access_of(Operation op);
// Sets wr's opcode and its remote part: RDMA address and rkey for write, read and atomics; for UD
// the sender's address handle, the peer's QPN on QP q and the Q_Key.
void set_operation(ibv_send_wr& wr, const Workload& w, const HostSide& sender, uint32_t q, uint64_t remote_addr,
                   uint32_t rkey);
// Step 0's CPU time of a post of `wqes` WRs the recorder has just seen: the call, building each
// WQE (and copying inline data), then the doorbell or the BlueFlame lines.
Picoseconds post_cpu_cost(const sim::TimingParams& params, const Workload& w, const ChainRecorder& recorder,
                          uint32_t wqes);
// into += d, for every TLP type and cause.
void add_counts(pcie::CounterSnapshot& into, const pcie::CounterSnapshot& d);

}  // namespace softhca::tools
