// The softhca command-line tool. Subcommands: demo (the seed's experiment in live mode).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "tools/demo_report.h"
#include "tools/demo_workload.h"

namespace {

constexpr int kExitUsage = 2;

int run_demo(const softhca::tools::WorkloadParams& params, bool json) {
  // Before the runtime's first use: the demo is two hosts in this process. A value the user set
  // is kept (and checked when the devices are looked up).
  setenv("SOFTHCA_NUM_DEVICES", "2", 0);
  std::vector<softhca::tools::RowMeasurement> rows;
  for (const softhca::tools::FeatureRow& row : softhca::tools::demo_rows()) {
    softhca::tools::RowOutcome outcome = softhca::tools::run_live_row(row, params);
    if (!outcome.ok()) {
      std::fprintf(stderr, "softhca demo: row \"%.*s\": %s\n", static_cast<int>(row.name.size()),
                   row.name.data(), outcome.error.c_str());
      return EXIT_FAILURE;
    }
    rows.push_back(outcome.measurement);
  }
  std::cout << (json ? softhca::tools::format_json(rows, params) : softhca::tools::format_table(rows, params));
  std::cout.flush();
  return std::cout ? EXIT_SUCCESS : EXIT_FAILURE;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"softhca: a software InfiniBand HCA that counts every PCIe transaction.", "softhca"};
  app.set_version_flag("--version", std::string("softhca ") + SOFTHCA_VERSION);
  app.require_subcommand(1);

  softhca::tools::WorkloadParams params;
  bool json = false;
  CLI::App* demo = app.add_subcommand(
      "demo", "The seed's experiment: PCIe transactions per 8-byte RDMA WRITE, per feature set");
  demo->footer(
      "Posts RDMA WRITEs on an RC QP from softhca_0 to softhca_1, two devices in this process, once\n"
      "per feature set (none, postlist, inline, unsignaled, BlueFlame, inline+BlueFlame, all), and\n"
      "prints the PCIe transactions per message from both devices' counters (live mode). Exits 1 if\n"
      "a write fails or its data does not land. See docs/model.md for the counting rules.");
  demo->add_option("-n,--messages", params.messages, "RDMA WRITEs per feature set")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  demo->add_flag("--json", json, "Print JSON instead of the table");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  if (*demo) return run_demo(params, json);
  return kExitUsage;
}
