// `softhca run [options] -- PROGRAM ARGS...`: runs an unmodified verbs program on softhca. It puts
// softhca's libibverbs.so.1 first on the loader's path, sets the SOFTHCA_* variables its options
// stand for (docs/environment.md) and execs the program, which then shares its host's HCA with
// every other process of that host (docs/live-mode.md).
#pragma once
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace softhca::tools {

struct RunCommandOptions {
  std::string host;      // SOFTHCA_HOST
  std::string fabric;    // SOFTHCA_FABRIC
  std::string link;      // SOFTHCA_LINK: ib | roce
  std::string ip;        // SOFTHCA_IP: the host's IPv4 address (docs/addresses.md)
  std::string pcap;      // SOFTHCA_PCAP
  std::string trace;     // SOFTHCA_TRACE
  std::string stats;     // SOFTHCA_STATS
  std::string blueflame; // SOFTHCA_BLUEFLAME
  std::string faults;    // SOFTHCA_FAULTS (docs/reliability.md)
  std::string lib_dir;   // where libibverbs.so.1 is (default: found next to this binary)
  bool no_view = false;  // skip the device view (/sys/class/infiniband, /dev/infiniband)
  std::vector<std::string> command;
};

// The directory holding softhca's libibverbs.so.1: SOFTHCA_LIB_DIR, else the build tree's or the
// install tree's directory relative to this executable, else the build directory it was built in.
// Empty when none has the library.
std::string find_lib_dir();

// The environment changes `options` stand for, as NAME=VALUE strings (LD_LIBRARY_PATH included).
std::vector<std::string> run_environment(const RunCommandOptions& options, const std::string& lib_dir);

// Registers the `run` subcommand; its callback execs the program and only returns (with exit code
// 127 and a message) when that fails.
void add_run_command(CLI::App& app);

}  // namespace softhca::tools
