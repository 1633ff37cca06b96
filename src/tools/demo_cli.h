// `softhca demo`: the seed's experiment. By default in virtual time on the embedded
// thunderx2-cx4-edr profile (demo_sim.h): PCIe counts per message, the modeled latency and message
// rate per feature set, and the latency breakdown along the seed's steps. `--live` runs the same
// rows in live mode instead (counts only). Registered on the CLI from main.cc.
#pragma once

namespace CLI {
class App;
}

namespace softhca::tools {

// Registers the `demo` subcommand. It runs from its callback and ends the process with its exit
// code (0 done, 1 failed), so main() needs nothing else for it.
void add_demo_command(CLI::App& app);

}  // namespace softhca::tools
