// Chrome/Perfetto trace-event JSON (the "JSON Object Format" that chrome://tracing and
// ui.perfetto.dev open) from an event list (trace_event.h). One process per device, named after it,
// with four tracks (threads):
//   1 "PCIe downstream"  TLPs towards the device: doorbell and BlueFlame MWr, CplD of its reads
//   2 "PCIe upstream"    TLPs towards host memory: MRd, payload/CQE/EQE MWr, interrupts
//   3 "HCA"              packets the device received and processed
//   4 "wire"             packets the device transmitted
// and, when the trace has CPU events (live mode, SOFTHCA_TRACE), one more process, "CPU threads"
// (pid kCpuThreadsPid), with a track per thread that called into the library, its tid the Linux
// thread id, named "thread <tid>": post_send, poll_cq hit, ring doorbell, BlueFlame write.
// Every event is an instant event ("ph":"i") named after what it is ("doorbell MWr",
// "wqe_read CplD", or the packet's opcode), with its cause, sizes, PSN, QPN... in args. "ts" is in
// microseconds (fractional, picosecond resolution) since the start of the trace.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/trace_event.h"

namespace softhca::runtime {

enum class TraceTrack : uint32_t { kPcieDownstream = 1, kPcieUpstream = 2, kHca = 3, kWire = 4 };
// The track of a TLP or packet event (CPU events are on their thread's track).
TraceTrack track_of(const TraceEvent& e);
// The process id of the CPU threads' tracks: far above the devices' (device i is i + 1).
inline constexpr int kCpuThreadsPid = 1'000'000;
std::string_view to_string(TraceTrack t);

struct ChromeTraceInfo {
  std::vector<std::string> device_names;  // by device index; devices without a name get softhca_<i>
  uint64_t dropped_events = 0;            // written into otherData
  uint64_t max_events = 0;
  std::string clock = "live: wall time (steady clock)";
};

// The whole document. The process id of device i is i + 1.
std::string chrome_trace_json(std::span<const TraceEvent> events, const ChromeTraceInfo& info);
// Writes chrome_trace_json() to path; false if the file cannot be written.
bool write_chrome_trace(const std::string& path, std::span<const TraceEvent> events, const ChromeTraceInfo& info);

}  // namespace softhca::runtime
