// Helpers of the observability acceptance tests: run observe_workload once with SOFTHCA_PCAP,
// SOFTHCA_TRACE and SOFTHCA_STATS pointing into a fresh directory, and run other commands (tshark)
// with their output captured. Every command runs under coreutils `timeout`, so no step can hang.
#pragma once
#include <string>

namespace softhca::acceptance {

inline constexpr int kCommandTimeoutS = 120;

struct ObserveRun {
  std::string dir;       // a fresh directory under $TMPDIR (or /tmp); see remove_run_files()
  std::string pcap;      // dir/capture.pcap
  std::string trace;     // dir/trace.json
  std::string stats;     // dir/stats.json
  std::string manifest;  // dir/manifest.json
  int exit_code = -1;    // of the workload
  std::string output;    // its stdout and stderr
};

// Runs the workload (path given at build time) with two devices and every observer on; extra_env
// ("VAR=value ...", already quoted for sh) is added to its environment.
ObserveRun run_observe_workload(const std::string& workload, const std::string& extra_env = "");

// Runs `command` with sh -c under `timeout`, stdout and stderr captured in output; the command's
// exit code (124 on timeout, -1 if it could not be started).
int run_command(const std::string& command, std::string& output);

// Removes the run's directory (call when the checks passed; a failure leaves it for inspection).
void remove_run_files(const ObserveRun& run);

// True if `program` is found on PATH.
bool on_path(const std::string& program);

// 'text' quoted for sh.
std::string shell_quote(const std::string& text);

}  // namespace softhca::acceptance
