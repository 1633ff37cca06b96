// `softhca stats FILE`: the counters a program left in a SOFTHCA_STATS dump (runtime.cc
// dump_stats), per device, as a readable table (PCIe TLPs by type and cause with payload and wire
// bytes; packets, ACKs, NAKs, retransmissions, CQEs, drops; then one row per QP), or with --json
// the dump itself, checked and normalized (sorted keys, two-space indent).
// `softhca stats --live [--fabric F] [--host H]`: the same for the host device that processes are
// using now, read from its host segment in /dev/shm/softhca-<uid>/ (mapped read-only: the command is not one of
// the host's processes and takes no lock). The PCIe counters are per process and not there.
#pragma once
#include <iosfwd>
#include <string>

namespace CLI {
class App;
}

namespace softhca::tools {

struct StatsOptions {
  std::string path;  // the dump; unused with live
  bool json = false;
  bool live = false;            // read the running host's segment instead of a file
  std::string fabric = "default";
  std::string host = "host0";
  std::string dir = "/dev/shm";  // the base of host segments, SegmentOptions::dir (tests use their own)
};

// Writes the table (or JSON) to out, or a reason to err. 0 on success, 1 when the file cannot be
// read or is not a SOFTHCA_STATS dump, or (live) when the host has no segment.
int run_stats(const StatsOptions& options, std::ostream& out, std::ostream& err);

// Registers the `stats` subcommand. It runs from its callback and ends the process with its exit
// code, so main() needs nothing else for it.
void add_stats_command(CLI::App& app);

}  // namespace softhca::tools
