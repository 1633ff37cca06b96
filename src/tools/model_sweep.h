// What-if runs of the timing model: one workload on one profile, or a sweep over one parameter
// (a workload parameter such as size or postlist, or a profile key such as pcie.rtt_ns), optionally
// crossed with a second "series" parameter (one line per value in a plot). Each point is a
// closed-loop run plus a one-post latency run (model_workload.h).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/machine_profile.h"
#include "tools/model_workload.h"

namespace softhca::tools {

// A parameter and the values it takes: "postlist=1,2,4,8", "size=8:4096:x2", "pcie.rtt_ns=100:500:100".
struct SweepAxis {
  std::string name;
  std::vector<std::string> values;
};

// Parses "NAME=LIST"; LIST is comma-separated values, or START:STOP:STEP (linear), or
// START:STOP:xFACTOR (geometric). Throws std::invalid_argument with the reason.
SweepAxis parse_axis(std::string_view spec);

// Workload parameters a sweep can set: size, messages, qps, threads, postlist, signal_period,
// depth, inline (0/1), blueflame (off, auto, on), op (write, read, send, atomic), transport (rc,
// uc, ud), workload (stream, pingpong).
bool is_workload_parameter(std::string_view name);
// Sets a workload parameter or profile key from text; throws std::invalid_argument.
void apply_parameter(sim::MachineProfile& p, Workload& w, std::string_view name, std::string_view value);

struct ModelPoint {
  std::string series;  // the series value ("" without a series)
  std::string x;       // the swept value ("" without a sweep)
  RunResult run;
  LatencyBreakdown latency;
};

// Runs every (series, x) point in order. `progress(done, total)` is called after each point.
std::vector<ModelPoint> run_model(const sim::MachineProfile& profile, const Workload& workload,
                                  const std::optional<SweepAxis>& sweep, const std::optional<SweepAxis>& series,
                                  const std::function<void(size_t, size_t)>& progress, const RunOptions& options = {});

// Utilization of the busiest resource of a run: its name on its host ("cpu2@0": thread 2's core
// on host 0, "pcie_up@0", "hca_wqe@1", ...), and busy time / elapsed. A CPU core counts alone
// (threads are not summed), as does each HCA unit, link direction and port.
struct Bottleneck {
  std::string name;
  double utilization = 0;
};
Bottleneck busiest(const RunResult& r);
// "cpu<thread>@<host>".
std::string cpu_name(const CpuUse& c);

}  // namespace softhca::tools
