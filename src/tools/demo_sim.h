// The seed's experiment in virtual time (`softhca demo`): the demo's seven feature rows
// (demo_workload.h) run as closed-loop workloads on a machine profile (the embedded
// thunderx2-cx4-edr by default) through the real verbs API on the sim runtime: the same PCIe
// counts as live mode, plus each row's modeled one-post latency, its breakdown along the seed's
// steps 0-5, and its message rate. Deterministic: same profile, same output.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "sim/machine_profile.h"
#include "tools/demo_workload.h"
#include "tools/model_workload.h"

namespace softhca::tools {

struct SimRow {
  RowMeasurement measurement;   // the PCIe counts of the closed-loop run
  LatencyBreakdown latency;     // one post of the row's shape on an idle machine
  double message_rate = 0;      // closed loop, messages per second
  Picoseconds elapsed{0};
};

// The workload of one demo row: 8-byte (params.message_bytes) RDMA WRITEs on one QP.
Workload demo_workload(const FeatureRow& row, const WorkloadParams& params);

// Runs every demo row in sim mode (installs the sim runtime: call before any live verbs use).
// Throws on failure.
std::vector<SimRow> run_sim_demo(const sim::MachineProfile& profile, const WorkloadParams& params);

}  // namespace softhca::tools
