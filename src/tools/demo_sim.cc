#include "tools/demo_sim.h"

namespace softhca::tools {

Workload demo_workload(const FeatureRow& row, const WorkloadParams& params) {
  Workload w;
  w.op = Operation::kWrite;
  w.size_bytes = params.message_bytes;
  w.messages = params.messages;
  w.qps = 1;
  w.threads = 1;
  w.postlist = row.postlist;
  w.inline_data = row.inline_data;
  w.signal_period = row.signal_period;
  w.blueflame = row.blueflame;
  w.queue_depth = params.sq_depth;
  return w;
}

std::vector<SimRow> run_sim_demo(const sim::MachineProfile& profile, const WorkloadParams& params) {
  std::vector<SimRow> rows;
  for (const FeatureRow& row : demo_rows()) {
    const Workload w = demo_workload(row, params);
    const RunResult r = run_closed_loop(profile, w);
    SimRow s;
    s.measurement.row = row;
    s.measurement.messages = r.messages;
    s.measurement.message_bytes = params.message_bytes;
    s.measurement.requester = r.requester;
    s.measurement.responder = r.responder;
    s.message_rate = r.message_rate;
    s.elapsed = r.elapsed;
    s.latency = measure_latency(profile, w);
    rows.push_back(s);
  }
  return rows;
}

}  // namespace softhca::tools
