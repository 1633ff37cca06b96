// `softhca stats FILE`: the counters a program left in a SOFTHCA_STATS dump (runtime.cc
// dump_stats), per device, as a readable table (PCIe TLPs by type and cause with payload and wire
// bytes; packets, ACKs, NAKs, retransmissions, CQEs, drops), or with --json the dump itself,
// checked and normalized (sorted keys, two-space indent). Per-QP counters and reading a running
// program need the per-host shared state of issue 3 and are not shown yet.
#pragma once
#include <iosfwd>
#include <string>

namespace CLI {
class App;
}

namespace softhca::tools {

struct StatsOptions {
  std::string path;
  bool json = false;
};

// Writes the table (or JSON) to out, or a reason to err. 0 on success, 1 when the file cannot be
// read or is not a SOFTHCA_STATS dump.
int run_stats(const StatsOptions& options, std::ostream& out, std::ostream& err);

// Registers the `stats` subcommand. It runs from its callback and ends the process with its exit
// code, so main() needs nothing else for it.
void add_stats_command(CLI::App& app);

}  // namespace softhca::tools
