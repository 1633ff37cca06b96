// `softhca model`: what-ifs on the timing model. Any profile (--profile NAME|FILE), any workload
// (--op, --size, --messages, --qps, --threads, --postlist, --inline, --signal-period, --blueflame,
// --depth), single overrides (--set pcie.rtt_ns=250), a sweep over one parameter (--sweep
// postlist=1:64:x2) crossed with a series (--series inline=off,on), printed as a table, CSV or
// JSON (--format), and plotted (--svg FILE). Progress on stderr when it is a terminal.
#pragma once
#include <optional>
#include <span>
#include <string>

#include "sim/machine_profile.h"
#include "tools/model_sweep.h"
#include "tools/model_workload.h"

namespace CLI {
class App;
}

namespace softhca::tools {

struct ModelReport {
  const sim::MachineProfile* profile = nullptr;
  const Workload* workload = nullptr;
  const SweepAxis* sweep = nullptr;   // may be null
  const SweepAxis* series = nullptr;  // may be null
  std::span<const ModelPoint> points;
};

std::string format_model_table(const ModelReport& r);
std::string format_model_csv(const ModelReport& r);
std::string format_model_json(const ModelReport& r);
// Message rate against the swept parameter, a line per series. `metric`: "rate" or "latency".
std::string format_model_svg(const ModelReport& r, std::string_view metric);

// Registers the `model` subcommand; it runs from its callback and ends the process (0 done, 1 a
// run failed, 2 bad arguments).
void add_model_command(CLI::App& app);

}  // namespace softhca::tools
