// The trace of sim mode: the chain of a one-post latency run (model_workload.h, LatencyTrace) as
// Chrome/Perfetto trace-event JSON, timestamps in model time. Each host is a process with a track
// per resource its steps occupy (CPU threads, PCIe downstream and upstream, the HCA units, the IB
// port and the wire); the switch is a process of its own. Each step is a complete event ("ph":
// "X") from its start to its end on that resource, named after its phase of the seed's steps 0-5
// and what it is (a TLP by its PCIe type, a packet, an HCA unit's work). docs/observability.md.
#pragma once
#include <string>

#include "tools/model_workload.h"

namespace softhca::tools {

std::string format_sim_trace(const LatencyTrace& trace);

}  // namespace softhca::tools
