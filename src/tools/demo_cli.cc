#include "tools/demo_cli.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tools/demo_report.h"
#include "tools/demo_sim.h"
#include "tools/demo_workload.h"
#include "tools/model_profile.h"

namespace softhca::tools {

namespace {

struct DemoOptions {
  WorkloadParams params;
  bool json = false;
  bool live = false;
  std::string profile{kDefaultProfileName};
  std::vector<std::string> overrides;
};

int run_live(const DemoOptions& o) {
  // Before the runtime's first use: the demo is two hosts in this process. A value the user set
  // is kept (and checked when the devices are looked up).
  setenv("SOFTHCA_NUM_DEVICES", "2", 0);
  std::vector<RowMeasurement> rows;
  for (const FeatureRow& row : demo_rows()) {
    RowOutcome outcome = run_live_row(row, o.params);
    if (!outcome.ok()) {
      std::fprintf(stderr, "softhca demo: row \"%.*s\": %s\n", static_cast<int>(row.name.size()), row.name.data(),
                   outcome.error.c_str());
      return EXIT_FAILURE;
    }
    rows.push_back(outcome.measurement);
  }
  std::cout << (o.json ? format_json(rows, o.params) : format_table(rows, o.params));
  std::cout.flush();
  return std::cout ? EXIT_SUCCESS : EXIT_FAILURE;
}

int run_sim(const DemoOptions& o) {
  try {
    sim::MachineProfile profile = load_profile(o.profile);
    for (const std::string& s : o.overrides) apply_override(profile, s);
    const std::vector<SimRow> rows = run_sim_demo(profile, o.params);
    std::cout << (o.json ? format_sim_json(rows, o.params, profile) : format_sim_table(rows, o.params, profile));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "softhca demo: %s\n", e.what());
    return EXIT_FAILURE;
  }
  std::cout.flush();
  return std::cout ? EXIT_SUCCESS : EXIT_FAILURE;
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* demo = app.add_subcommand(
      "demo", "The seed's experiment: PCIe transactions, latency and message rate per 8-byte RDMA WRITE, per feature set");
  demo->footer(
      "Posts RDMA WRITEs on an RC QP from softhca_0 to softhca_1, two hosts in this process, once per\n"
      "feature set (none, postlist, inline, unsignaled, BlueFlame, inline+BlueFlame, all). By default\n"
      "in virtual time on the thunderx2-cx4-edr profile built into softhca: the PCIe transactions per\n"
      "message (the same counts as live mode), the modeled latency of one post and the closed-loop\n"
      "message rate, then where one post's time goes along the seed's steps 0-5. --live runs the rows\n"
      "in live mode (counts only, and a data check). docs/model.md has the counting rules,\n"
      "docs/timing-model.md the timing model.");
  demo->add_option("-n,--messages", o->params.messages, "RDMA WRITEs per feature set")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  demo->add_flag("--json", o->json, "Print JSON instead of the tables");
  demo->add_flag("--live", o->live, "Run in live mode (PCIe counts only), as before the timing model");
  demo->add_option("--profile", o->profile, "Machine profile: a built-in name or a TOML file")->capture_default_str();
  demo->add_option("--set", o->overrides, "Override one profile value, KEY=VALUE (repeatable), e.g. pcie.rtt_ns=250");
  demo->callback([o] { std::exit(o->live ? run_live(*o) : run_sim(*o)); });
}

}  // namespace softhca::tools
