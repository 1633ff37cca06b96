// The event list that timelines (Chrome/Perfetto JSON, chrome_trace.h) and sequence diagrams
// (softhca trace --svg) are drawn from: every TLP and every packet of every device, in the order
// they happened, each with its time. Live mode fills it from the runtime's taps with wall time
// (trace_recorder.h); sim mode can fill it with the timing model's times. Units: picoseconds since
// the start of the trace; sizes in bytes.
#pragma once
#include <cstdint>

#include "base/units.h"
#include "fabric/capture/packet_summary.h"
#include "pcie/tlp.h"
#include "runtime/runtime.h"

namespace softhca::runtime {

enum class TraceEventKind : uint8_t { kTlp, kPacket, kCpu };

// What a CPU thread did in the library (live mode, SOFTHCA_TRACE): posted, polled a completion,
// rang a doorbell or wrote a WQE through BlueFlame.
enum class CpuEventKind : uint8_t { kPostSend, kPollHit, kDoorbell, kBlueFlame };
struct CpuEventInfo {
  CpuEventKind what = CpuEventKind::kPostSend;
  uint32_t tid = 0;     // the Linux thread id
  uint32_t object = 0;  // post_send: QPN; poll hit: CQN; doorbell, BlueFlame: the device
  uint32_t count = 0;   // post_send: work requests; poll hit: completions; doorbell, BlueFlame: 1
};

struct TraceEvent {
  Picoseconds time{0};  // since the start of the trace; never decreases along the list
  uint64_t seq = 0;     // the runtime's tap sequence number (one counter for all devices)
  uint32_t device = 0;  // index of the device: softhca_<device>
  TraceEventKind kind = TraceEventKind::kTlp;
  PacketDirection packet_dir = PacketDirection::kSent;  // kPacket: sent or received by `device`
  pcie::Tlp tlp;                                        // kTlp
  fabric::PacketSummary packet;                         // kPacket
  CpuEventInfo cpu;                                     // kCpu
};

}  // namespace softhca::runtime
