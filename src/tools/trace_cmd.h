// `softhca trace`: runs the demo's 8-byte RDMA WRITE (tools/demo_workload.h) between two devices in
// this process with every TLP and packet recorded (runtime::TraceRecorder, live wall time), and
// draws the first N operations as a message sequence chart (tools/trace_svg.h) in an SVG file,
// optionally also writing the Chrome/Perfetto trace JSON of the same run. See docs/observability.md.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/trace_event.h"
#include "tools/demo_workload.h"

namespace CLI {
class App;
}

namespace softhca::tools {

// The demo row a --features value names: none, inline, blueflame, inline+blueflame, postlist,
// unsignaled or all (case does not matter); nullptr for anything else.
const FeatureRow* feature_row(std::string_view name);

struct RecordedOperations {
  std::vector<runtime::TraceEvent> events;  // of both devices, oldest first
  uint32_t requester = 0;                   // device indexes of softhca_0 and softhca_1
  uint32_t responder = 1;
  std::string error;                        // empty on success
};

// Runs `ops` writes of `row` and returns what the devices did meanwhile. The first call makes the
// process runtime (two devices, with the recorder attached) and must come before any other use of
// verbs in this process; later calls reuse it.
RecordedOperations record_demo_writes(const FeatureRow& row, uint64_t ops);

// Registers the `trace` subcommand. It runs from its callback and ends the process with its exit
// code (0 done, 1 failed), so main() needs nothing else for it.
void add_trace_command(CLI::App& app);

}  // namespace softhca::tools
