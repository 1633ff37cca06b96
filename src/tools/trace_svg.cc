#include "tools/trace_svg.h"
#include "tools/xml_escape.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <optional>

#include "fabric/packet/opcode.h"

namespace softhca::tools {

namespace {

using runtime::PacketDirection;
using runtime::TraceEvent;
using runtime::TraceEventKind;
using Style = SeqArrow::Style;

std::string bytes_label(uint32_t n) { return std::to_string(n) + "B"; }

// What a DMA read or write is for, as the chart names it.
std::string_view purpose(pcie::TlpCause c) {
  switch (c) {
    case pcie::TlpCause::kDoorbell: return "doorbell";
    case pcie::TlpCause::kBlueFlame: return "BlueFlame";
    case pcie::TlpCause::kCqArm: return "CQ arm";
    case pcie::TlpCause::kWqeRead: return "WQE";
    case pcie::TlpCause::kPayloadRead: return "payload";
    case pcie::TlpCause::kRecvWqeRead: return "recv WQE";
    case pcie::TlpCause::kDbRecRead: return "doorbell record";
    case pcie::TlpCause::kPayloadWrite: return "payload";
    case pcie::TlpCause::kAtomic: return "atomic";
    case pcie::TlpCause::kCqeWrite: return "CQE";
    case pcie::TlpCause::kEqeWrite: return "EQE";
    case pcie::TlpCause::kInterrupt: return "MSI-X";
    case pcie::TlpCause::kEqDoorbell: return "EQ doorbell";
    case pcie::TlpCause::kDmWrite: return "device memory write";
    case pcie::TlpCause::kDmRead: return "device memory read";
  }
  return "?";
}

using pcie::is_cpu_cause;

// The arrow of one TLP of the local (remote == false) or remote device.
SeqArrow tlp_arrow(const pcie::Tlp& t, bool remote) {
  const Lifeline hca = remote ? Lifeline::kRemoteHca : Lifeline::kHca;
  // The remote host's CPU has no lifeline of its own; its MMIO writes start at its memory.
  const Lifeline mem = remote ? Lifeline::kRemoteMemory : Lifeline::kMemory;
  const Lifeline cpu = remote ? Lifeline::kRemoteMemory : Lifeline::kCpu;
  SeqArrow a;
  switch (t.type) {
    case pcie::TlpType::kMWr:
      if (is_cpu_cause(t.cause)) {
        a.from = cpu;
        a.to = hca;
        a.style = Style::kMmio;
      } else {
        a.from = hca;
        a.to = mem;
        a.style = Style::kDmaWrite;
      }
      a.label = std::string(purpose(t.cause)) + " MWr " + bytes_label(t.payload_bytes);
      break;
    case pcie::TlpType::kMRd:  // the CPU's reads of device memory go the other way
      a.from = is_cpu_cause(t.cause) ? cpu : hca;
      a.to = is_cpu_cause(t.cause) ? hca : mem;
      a.style = is_cpu_cause(t.cause) ? Style::kMmio : Style::kDmaRead;
      a.label = std::string(purpose(t.cause)) + " MRd " + bytes_label(t.read_bytes);
      break;
    case pcie::TlpType::kCplD:
      a.from = is_cpu_cause(t.cause) ? hca : mem;
      a.to = is_cpu_cause(t.cause) ? cpu : hca;
      a.style = Style::kCompletion;
      a.label = "CplD " + bytes_label(t.payload_bytes);
      break;
  }
  return a;
}

std::string packet_label(const fabric::PacketSummary& p) {
  if (p.valid && p.has_aeth && p.opcode == static_cast<uint8_t>(fabric::BthOpcode::kRcAcknowledge)) {
    const char* kind = fabric::is_ack(p.syndrome) ? "ACK" : fabric::is_rnr_nak(p.syndrome) ? "RNR NAK" : "NAK";
    return std::string(kind) + " PSN " + std::to_string(p.psn) + " MSN " + std::to_string(p.msn);
  }
  return fabric::describe(p);
}

bool is_ack_opcode(const fabric::PacketSummary& p) {
  return p.valid && (p.opcode == static_cast<uint8_t>(fabric::BthOpcode::kRcAcknowledge) ||
                     p.opcode == static_cast<uint8_t>(fabric::BthOpcode::kRcAtomicAcknowledge));
}

bool same_packet(const fabric::PacketSummary& a, const fabric::PacketSummary& b) {
  return a.valid == b.valid && a.opcode == b.opcode && a.psn == b.psn && a.dest_qp == b.dest_qp &&
         a.slid == b.slid && a.dlid == b.dlid && a.wire_bytes == b.wire_bytes;
}

// Colours per arrow style (Tableau 10), and the name of its arrowhead marker.
struct StyleLook {
  const char* colour;
  const char* marker;
};
constexpr std::array<StyleLook, 6> kLooks{{
    {"#1f77b4", "head-mmio"},        // kMmio
    {"#ff7f0e", "head-read"},        // kDmaRead
    {"#2ca02c", "head-completion"},  // kCompletion
    {"#9467bd", "head-write"},       // kDmaWrite
    {"#d62728", "head-request"},     // kRequest
    {"#8c564b", "head-ack"},         // kAck
}};

// Layout [px].
constexpr int kTimeColumn = 96;
constexpr int kLaneWidth = 150;
constexpr int kTitleY = 26;
constexpr int kBoxTop = 44;
constexpr int kBoxHeight = 34;
constexpr int kFirstRowY = kBoxTop + kBoxHeight + 34;
constexpr int kRowHeight = 30;

int lane_x(Lifeline l) { return kTimeColumn + kLaneWidth / 2 + static_cast<int>(l) * kLaneWidth; }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::string_view to_string(Lifeline l) {
  switch (l) {
    case Lifeline::kCpu: return "CPU";
    case Lifeline::kMemory: return "memory";
    case Lifeline::kHca: return "HCA";
    case Lifeline::kWire: return "wire";
    case Lifeline::kRemoteHca: return "remote HCA";
    case Lifeline::kRemoteMemory: return "remote memory";
  }
  return "?";
}

SequenceChart build_sequence_chart(std::span<const TraceEvent> all, uint32_t requester, uint32_t responder) {
  std::vector<const TraceEvent*> ev;
  for (const TraceEvent& e : all) {
    if (e.device == requester || e.device == responder) ev.push_back(&e);
  }
  SequenceChart chart;
  chart.rows = ev.size();
  if (ev.empty()) return chart;
  const Picoseconds t0 = ev.front()->time;
  std::vector<bool> matched(ev.size(), false);  // received packets already joined to their send

  for (size_t i = 0; i < ev.size(); ++i) {
    const TraceEvent& e = *ev[i];
    const bool remote = e.device != requester;
    if (e.kind == TraceEventKind::kTlp) {
      SeqArrow a = tlp_arrow(e.tlp, remote);
      a.row_from = a.row_to = i;
      a.time = e.time - t0;
      chart.arrows.push_back(std::move(a));
      continue;
    }
    SeqArrow a;
    a.label = packet_label(e.packet);
    a.style = is_ack_opcode(e.packet) ? Style::kAck : Style::kRequest;
    a.time = e.time - t0;
    const Lifeline here = remote ? Lifeline::kRemoteHca : Lifeline::kHca;
    const Lifeline there = remote ? Lifeline::kHca : Lifeline::kRemoteHca;
    if (e.packet_dir == PacketDirection::kSent) {
      // The carrier is in order: the first unmatched identical packet the peer receives is this one.
      std::optional<size_t> recv;
      for (size_t j = i + 1; j < ev.size() && !recv; ++j) {
        const TraceEvent& r = *ev[j];
        if (!matched[j] && r.kind == TraceEventKind::kPacket && r.packet_dir == PacketDirection::kReceived &&
            r.device != e.device && same_packet(r.packet, e.packet)) {
          recv = j;
        }
      }
      a.from = here;
      a.row_from = i;
      if (recv) {
        matched[*recv] = true;
        a.to = there;
        a.row_to = *recv;
      } else {
        a.to = Lifeline::kWire;  // not received within the chart
        a.row_to = i;
      }
      chart.arrows.push_back(std::move(a));
    } else if (!matched[i]) {
      // Received, but its send is not in the chart.
      a.from = Lifeline::kWire;
      a.to = here;
      a.row_from = a.row_to = i;
      chart.arrows.push_back(std::move(a));
    }
  }
  return chart;
}

std::string describe(const SeqArrow& a) {
  return std::string(to_string(a.from)) + "->" + std::string(to_string(a.to)) + " " + a.label;
}

std::string render_svg(const SequenceChart& chart, std::string_view title, std::string_view footer) {
  const int width = kTimeColumn + kLifelineCount * kLaneWidth + 16;
  const int last_row_y = kFirstRowY + static_cast<int>(chart.rows == 0 ? 0 : chart.rows - 1) * kRowHeight;
  const int bottom = last_row_y + 24;
  const int height = bottom + 36;

  std::string s;
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + std::to_string(width) +
       "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " +
       std::to_string(height) + "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n";
  s += "<title>" + xml_escape(title) + "</title>\n<defs>\n";
  for (const StyleLook& look : kLooks) {
    s += std::string("  <marker id=\"") + look.marker +
         "\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"8\" markerHeight=\"8\" "
         "orient=\"auto\" markerUnits=\"userSpaceOnUse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"" +
         look.colour + "\"/></marker>\n";
  }
  s += "</defs>\n";
  s += "<rect x=\"0\" y=\"0\" width=\"" + std::to_string(width) + "\" height=\"" + std::to_string(height) +
       "\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"" + std::to_string(width / 2) + "\" y=\"" + std::to_string(kTitleY) +
       "\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">" + xml_escape(title) + "</text>\n";

  // Lifelines: a box with the name, then a vertical line (dashed for the wire).
  for (int l = 0; l < kLifelineCount; ++l) {
    const auto line = static_cast<Lifeline>(l);
    const int x = lane_x(line);
    const bool local = l <= static_cast<int>(Lifeline::kHca);
    const char* fill = line == Lifeline::kWire ? "#eeeeee" : local ? "#dde8f4" : "#f4e6dd";
    s += "<rect x=\"" + std::to_string(x - 62) + "\" y=\"" + std::to_string(kBoxTop) +
         "\" width=\"124\" height=\"" + std::to_string(kBoxHeight) + "\" rx=\"5\" fill=\"" + fill +
         "\" stroke=\"#555555\"/>\n";
    if (line == Lifeline::kMemory) {  // the long name, on two lines
      s += "<text x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(kBoxTop + 15) +
           "\" text-anchor=\"middle\" font-size=\"12\">root complex<tspan x=\"" + std::to_string(x) +
           "\" dy=\"14\">and memory</tspan></text>\n";
    } else {
      s += "<text x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(kBoxTop + 22) +
           "\" text-anchor=\"middle\" font-size=\"13\">" + xml_escape(to_string(line)) + "</text>\n";
    }
    s += "<line x1=\"" + std::to_string(x) + "\" y1=\"" + std::to_string(kBoxTop + kBoxHeight) + "\" x2=\"" +
         std::to_string(x) + "\" y2=\"" + std::to_string(bottom) + "\" stroke=\"#999999\" stroke-width=\"1\"" +
         (line == Lifeline::kWire ? " stroke-dasharray=\"5,4\"" : "") + "/>\n";
  }
  s += "<text x=\"8\" y=\"" + std::to_string(kBoxTop + 22) +
       "\" font-size=\"12\" fill=\"#555555\">time [\xc2\xb5s]</text>\n";  // [µs]

  for (const SeqArrow& a : chart.arrows) {
    const StyleLook& look = kLooks[static_cast<size_t>(a.style)];
    const int x1 = lane_x(a.from);
    const int x2 = lane_x(a.to);
    const int y1 = kFirstRowY + static_cast<int>(a.row_from) * kRowHeight;
    const int y2 = kFirstRowY + static_cast<int>(a.row_to) * kRowHeight;
    const int dir = x2 >= x1 ? 1 : -1;
    s += "<text x=\"8\" y=\"" + std::to_string(y1 + 4) + "\" font-size=\"11\" fill=\"#555555\">" +
         fmt("%.3f", static_cast<double>(a.time.count()) / 1e6) + "</text>\n";
    s += "<line x1=\"" + std::to_string(x1 + dir * 3) + "\" y1=\"" + std::to_string(y1) + "\" x2=\"" +
         std::to_string(x2 - dir * 3) + "\" y2=\"" + std::to_string(y2) + "\" stroke=\"" + look.colour +
         "\" stroke-width=\"2\" marker-end=\"url(#" + look.marker + ")\"/>\n";
    // The label sits above the middle of the arrow (above its higher end when the arrow slopes, so
    // that the line never crosses the text), on a white halo so that lifelines do not cut it.
    const int lx = (x1 + x2) / 2;
    const int ly = std::min(y1, y2) - 6;
    s += "<text x=\"" + std::to_string(lx) + "\" y=\"" + std::to_string(ly) +
         "\" text-anchor=\"middle\" font-size=\"12\" fill=\"" + look.colour +
         "\" stroke=\"#ffffff\" stroke-width=\"4\" paint-order=\"stroke\">" + xml_escape(a.label) + "</text>\n";
  }
  s += "<text x=\"8\" y=\"" + std::to_string(height - 12) + "\" font-size=\"11\" fill=\"#555555\">" +
       xml_escape(footer) + "</text>\n";
  s += "</svg>\n";
  return s;
}

}  // namespace softhca::tools
