// The message sequence chart of `softhca trace --svg`: from an event list (runtime/trace_event.h)
// of a requester device and its responder, one arrow per TLP or packet between six lifelines —
// CPU, root complex/memory, HCA, wire, remote HCA, remote memory — drawn as a standalone SVG.
// Rows follow the order of the events; each arrow is labelled ("doorbell MWr 8B", "WQE MRd 64B",
// "CplD 64B", "RC RDMA WRITE Only PSN 0", "ACK PSN 0 MSN 1", "CQE MWr 64B") and timed (the time of
// its first event, since the first event of the chart). A packet's arrow starts where its sender
// transmits it and ends where its receiver takes it. Leaves out: events of other devices, the CPU's
// own work (posting, polling), which no tap sees.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/units.h"
#include "runtime/trace_event.h"

namespace softhca::tools {

enum class Lifeline : uint8_t { kCpu, kMemory, kHca, kWire, kRemoteHca, kRemoteMemory };
inline constexpr int kLifelineCount = 6;
std::string_view to_string(Lifeline l);

struct SeqArrow {
  Lifeline from = Lifeline::kCpu;
  Lifeline to = Lifeline::kHca;
  std::string label;
  size_t row_from = 0;  // rows of the chart (one per event): where the arrow starts and ends
  size_t row_to = 0;
  Picoseconds time{0};  // of the first event, since the chart's first event
  enum class Style : uint8_t { kMmio, kDmaRead, kCompletion, kDmaWrite, kRequest, kAck } style = Style::kMmio;
};

struct SequenceChart {
  std::vector<SeqArrow> arrows;
  size_t rows = 0;
};

// The chart of the events of `requester` (local lifelines) and `responder` (remote lifelines).
SequenceChart build_sequence_chart(std::span<const runtime::TraceEvent> events, uint32_t requester, uint32_t responder);

// "CPU->HCA doorbell MWr 8B": how tests and the text output name an arrow.
std::string describe(const SeqArrow& a);

// A standalone SVG 1.1 document (UTF-8) of the chart, with `title` above and `footer` below it.
std::string render_svg(const SequenceChart& chart, std::string_view title, std::string_view footer);

}  // namespace softhca::tools
