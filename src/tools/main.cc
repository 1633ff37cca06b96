// The softhca command-line tool. Subcommands: demo (the seed's experiment), model (what-ifs on the
// timing model), stats and trace, and run (a
// verbs program on softhca).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "tools/demo_cli.h"
#include "tools/model_cli.h"
#include "tools/run_cmd.h"
#include "tools/hosts_cmd.h"
#include "tools/port_cmd.h"
#include "tools/stats_cmd.h"
#include "tools/trace_cmd.h"

namespace {

constexpr int kExitUsage = 2;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"softhca: a software InfiniBand HCA that counts every PCIe transaction.", "softhca"};
  app.set_version_flag("--version", std::string("softhca ") + SOFTHCA_VERSION);
  app.require_subcommand(1);

  // The seed's experiment and the timing model's what-ifs (issue 4): each runs from its callback.
  softhca::tools::add_demo_command(app);
  softhca::tools::add_model_command(app);

  // Observability (issue 5): `stats` and `trace` run from their own callbacks and exit.
  softhca::tools::add_stats_command(app);
  softhca::tools::add_trace_command(app);
  // The fabric's hosts and their addresses (docs/addresses.md), for rdma_cm programs.
  softhca::tools::add_hosts_command(app);
  // The port down or up (docs/events.md): PORT_ERR / PORT_ACTIVE for the host's processes.
  softhca::tools::add_port_command(app);

  // Live mode (issue 3): `run` execs a verbs program on softhca.
  softhca::tools::add_run_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  return kExitUsage;
}
