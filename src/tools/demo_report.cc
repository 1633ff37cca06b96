#include "tools/demo_report.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <numeric>
#include <string_view>

#include <nlohmann/json.hpp>

namespace softhca::tools {

namespace {

using pcie::CounterSnapshot;
using pcie::Direction;
using pcie::TlpCause;
using pcie::TlpType;

constexpr std::string_view kNoteAll =
    "all: the driver never writes a postlist through BlueFlame (seed rule S3), so the 32 WQEs of a "
    "post share one doorbell and are fetched by DMA, one read per contiguous ring segment split by "
    "MRRS.";

// Greedy word wrap into lines of at most `width` characters (a longer word gets its own line).
std::string wrap(std::string_view text, size_t width, std::string_view first_indent, std::string_view indent) {
  std::string out;
  std::string line(first_indent);
  bool line_empty = true;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find(' ', pos), text.size());
    const std::string_view word = text.substr(pos, end - pos);
    if (!line_empty && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = indent;
      line_empty = true;
    }
    if (!line_empty) line += ' ';
    line += word;
    line_empty = false;
    pos = end + 1;
  }
  return out + line + "\n";
}

std::string format_bytes_per_message(uint64_t total, uint64_t messages) {
  if (total % messages == 0) return std::to_string(total / messages);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(total) / static_cast<double>(messages));
  return buf;
}

double per_message(uint64_t total, uint64_t messages) {
  return static_cast<double>(total) / static_cast<double>(messages);
}

std::string pad_left(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}
std::string pad_right(std::string_view s, size_t width) {
  std::string out(s);
  if (out.size() < width) out.append(width - out.size(), ' ');
  return out;
}

nlohmann::json totals_json(const SideTotals& t) {
  return {{"doorbells", t.doorbells},
          {"blueflame_writes", t.blueflame_writes},
          {"mmio_bytes", t.mmio_bytes},
          {"wqe_reads", t.wqe_reads},
          {"payload_reads", t.payload_reads},
          {"payload_writes", t.payload_writes},
          {"cqe_writes", t.cqe_writes},
          {"mrd_total", t.mrd_total},
          {"wire_bytes_down", t.wire_down_bytes},
          {"wire_bytes_up", t.wire_up_bytes}};
}

nlohmann::json per_message_json(const SideTotals& t, uint64_t n) {
  return {{"doorbells", per_message(t.doorbells, n)},
          {"blueflame_writes", per_message(t.blueflame_writes, n)},
          {"mmio_bytes", per_message(t.mmio_bytes, n)},
          {"wqe_reads", per_message(t.wqe_reads, n)},
          {"payload_reads", per_message(t.payload_reads, n)},
          {"payload_writes", per_message(t.payload_writes, n)},
          {"cqe_writes", per_message(t.cqe_writes, n)},
          {"wire_bytes_down", per_message(t.wire_down_bytes, n)},
          {"wire_bytes_up", per_message(t.wire_up_bytes, n)}};
}

nlohmann::json side_json(std::string_view device, const CounterSnapshot& s, uint64_t n) {
  SideTotals t = side_totals(s);
  return {{"device", device},
          {"totals", totals_json(t)},
          {"per_message", per_message_json(t, n)},
          {"counters", nlohmann::json::parse(s.to_json())}};
}

}  // namespace

SideTotals side_totals(const CounterSnapshot& s) {
  SideTotals t;
  t.doorbells = s.tlps(TlpType::kMWr, TlpCause::kDoorbell);
  t.blueflame_writes = s.tlps(TlpType::kMWr, TlpCause::kBlueFlame);
  for (int c = 0; c < pcie::kTlpCauseCount; ++c) {
    const auto cause = static_cast<TlpCause>(c);
    if (pcie::direction_of(TlpType::kMWr, cause) == Direction::kDownstream) {
      t.mmio_bytes += s.at(TlpType::kMWr, cause).payload_bytes;
    }
  }
  t.wqe_reads = s.tlps(TlpType::kMRd, TlpCause::kWqeRead);
  t.payload_reads = s.tlps(TlpType::kMRd, TlpCause::kPayloadRead);
  t.payload_writes = s.tlps(TlpType::kMWr, TlpCause::kPayloadWrite);
  t.cqe_writes = s.tlps(TlpType::kMWr, TlpCause::kCqeWrite);
  t.mrd_total = s.by_type(TlpType::kMRd).tlps;
  t.wire_down_bytes = s.wire_bytes(Direction::kDownstream);
  t.wire_up_bytes = s.wire_bytes(Direction::kUpstream);
  return t;
}

std::string format_per_message(uint64_t total, uint64_t messages) {
  if (messages == 0) return "-";
  const uint64_t g = std::gcd(total, messages);
  const uint64_t p = g == 0 ? 0 : total / g;
  const uint64_t q = g == 0 ? 1 : messages / g;
  if (q == 1) return std::to_string(p);
  constexpr uint64_t kLargestShownDenominator = 64;
  if (q <= kLargestShownDenominator) return std::to_string(p) + "/" + std::to_string(q);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", per_message(total, messages));
  return buf;
}

namespace {

struct Column {
  std::string_view title;
  size_t width;
};

// Extra columns after the responder's, with one line of cells per row (the sim demo's modeled
// latency and message rate).
struct ExtraColumns {
  std::string_view group;
  std::span<const Column> columns;
  std::vector<std::vector<std::string>> cells;
};

constexpr size_t kNameWidth = 19;

// A rule of `width` characters: a space, then dashes.
std::string ruler(size_t width) {
  std::string r(width, '-');
  if (!r.empty()) r[0] = ' ';
  return r;
}
constexpr size_t kFootnoteWidth = 96;
constexpr std::string_view kGap = "   ";

size_t span_width(std::span<const Column> cols) {
  size_t w = 0;
  for (const Column& c : cols) w += c.width;
  return w;
}

// A group title centred in dashes over its columns.
std::string group_title(std::string_view title, size_t width) {
  constexpr size_t kIndent = 3;
  const std::string t = " " + std::string(title) + " ";
  const size_t dashes = width > t.size() + kIndent ? width - t.size() - kIndent : 0;
  return std::string(kIndent, ' ') + std::string(dashes / 2, '-') + t + std::string(dashes - dashes / 2, '-');
}

// The per-message counts table, `intro` lines first; `extra` adds columns on the right.
std::string counts_table(std::span<const RowMeasurement> rows, const std::string& intro, const ExtraColumns* extra) {
  static constexpr Column kRequester[] = {{"doorbells", 11}, {"MMIO B", 8}, {"WQE rd", 8}, {"data rd", 9},
                                          {"CQE wr", 8},     {"down B", 9}, {"up B", 8}};
  static constexpr Column kResponder[] = {{"data wr", 12}, {"down B", 9}, {"up B", 8}};
  const size_t req_width = span_width(kRequester);
  const size_t resp_width = span_width(kResponder);
  const size_t extra_width = extra != nullptr ? kGap.size() + span_width(extra->columns) : 0;
  const size_t total_width = 1 + kNameWidth + req_width + kGap.size() + resp_width + extra_width;
  const std::string rule = ruler(total_width);

  std::string out = intro;
  out += rule + "\n";
  std::string groups = " " + std::string(kNameWidth, ' ') +
                       group_title("requester " + std::string(kRequesterName), req_width) + std::string(kGap) +
                       group_title("responder " + std::string(kResponderName), resp_width);
  if (extra != nullptr) groups += std::string(kGap) + group_title(extra->group, span_width(extra->columns));
  out += groups + "\n";
  std::string header = " " + pad_right("features", kNameWidth);
  for (const Column& c : kRequester) header += pad_left(std::string(c.title), c.width);
  header += kGap;
  for (const Column& c : kResponder) header += pad_left(std::string(c.title), c.width);
  if (extra != nullptr) {
    header += kGap;
    for (const Column& c : extra->columns) header += pad_left(std::string(c.title), c.width);
  }
  out += header + "\n" + rule + "\n";

  for (size_t r = 0; r < rows.size(); ++r) {
    const RowMeasurement& m = rows[r];
    const SideTotals req = side_totals(m.requester);
    const SideTotals resp = side_totals(m.responder);
    const uint64_t n = m.messages;
    const std::string req_cells[] = {
        format_per_message(req.doorbells, n),          format_bytes_per_message(req.mmio_bytes, n),
        format_per_message(req.wqe_reads, n),          format_per_message(req.payload_reads, n),
        format_per_message(req.cqe_writes, n),         format_bytes_per_message(req.wire_down_bytes, n),
        format_bytes_per_message(req.wire_up_bytes, n)};
    const std::string resp_cells[] = {format_per_message(resp.payload_writes, n),
                                      format_bytes_per_message(resp.wire_down_bytes, n),
                                      format_bytes_per_message(resp.wire_up_bytes, n)};
    std::string name(m.row.name);
    if (m.row.name == "all") name += " *";  // the footnote
    std::string line(1, ' ');
    line += pad_right(name, kNameWidth);
    for (size_t i = 0; i < std::size(kRequester); ++i) line += pad_left(req_cells[i], kRequester[i].width);
    line += kGap;
    for (size_t i = 0; i < std::size(kResponder); ++i) line += pad_left(resp_cells[i], kResponder[i].width);
    if (extra != nullptr) {
      line += kGap;
      for (size_t i = 0; i < extra->columns.size(); ++i) line += pad_left(extra->cells[r][i], extra->columns[i].width);
    }
    out += line + "\n";
  }
  out += rule + "\n";
  out += wrap("doorbells: 8-byte doorbell writes (MWr). MMIO B: CPU->device write payload, doorbells "
              "and 64-byte BlueFlame chunks. WQE rd, data rd: DMA read requests (MRd, each answered by "
              "CplD) for WQEs and payload. CQE wr: 64-byte CQE writes. data wr: payload writes at the "
              "responder. down B, up B: PCIe wire bytes towards the device and towards host memory, "
              "TLP headers and framing included (figures.md P2-P4).",
              kFootnoteWidth, " ", " ");
  out += wrap(kNoteAll, kFootnoteWidth, " * ", "   ");
  return out;
}

std::string title_line(const WorkloadParams& params, std::string_view mode) {
  return " softhca demo: " + std::to_string(params.messages) + " RDMA WRITEs of " +
         std::to_string(params.message_bytes) + " B per feature set, RC, " + std::string(kRequesterName) + " -> " +
         std::string(kResponderName) + ", " + std::string(mode) + "\n";
}

}  // namespace

std::string format_table(std::span<const RowMeasurement> rows, const WorkloadParams& params) {
  const std::string intro = title_line(params, "live mode") + " PCIe transactions per message, from each device's counters\n";
  return counts_table(rows, intro, nullptr);
}

std::string format_json(std::span<const RowMeasurement> rows, const WorkloadParams& params) {
  nlohmann::json jrows = nlohmann::json::array();
  for (const RowMeasurement& m : rows) {
    jrows.push_back({{"features", m.row.name},
                     {"postlist", m.row.postlist},
                     {"inline", m.row.inline_data},
                     {"signal_period", m.row.signal_period},
                     {"blueflame", to_string(m.row.blueflame)},
                     {"messages", m.messages},
                     {"requester", side_json(kRequesterName, m.requester, m.messages)},
                     {"responder", side_json(kResponderName, m.responder, m.messages)}});
  }
  nlohmann::json j = {{"tool", "softhca demo"},
                      {"mode", "live"},
                      {"operation", "RDMA_WRITE"},
                      {"transport", "RC"},
                      {"message_bytes", params.message_bytes},
                      {"messages_per_row", params.messages},
                      {"sq_depth", params.sq_depth},
                      {"rows", jrows},
                      {"notes", {std::string(kNoteAll)}}};
  return j.dump(2) + "\n";
}

}  // namespace softhca::tools

namespace softhca::tools {

namespace {

constexpr std::string_view kSimNote =
    "post ns: one post of the row's shape (postlist rows: 32 WRs, only the last signaled) on an idle "
    "machine, from the start of ibv_post_send to the CPU having polled its CQE. Mmsg/s: the closed "
    "loop above (one QP, one thread, queue depth as shown), millions of messages per second of modeled "
    "time. docs/timing-model.md has the rules and parameters.";

// Steps of the breakdown, in the seed's order (DESIGN.md steps 0-5), with their labels.
struct PhaseLabel {
  sim::Phase phase;
  std::string_view label;
};
constexpr PhaseLabel kPhaseLabels[] = {
    {sim::Phase::kCpuBuild, "0  CPU builds the WQE"},   {sim::Phase::kDoorbell, "1  doorbell / BlueFlame"},
    {sim::Phase::kWqeFetch, "2  WQE fetch + parse"},    {sim::Phase::kPayloadFetch, "3  payload fetch"},
    {sim::Phase::kWire, "4  request on the wire"},      {sim::Phase::kRemoteWrite, "4  remote DMA write"},
    {sim::Phase::kAck, "4  ACK back"},                  {sim::Phase::kCqeWrite, "5  CQE write"},
    {sim::Phase::kPoll, "5  CPU polls the CQE"},
};

std::string ns_text(Picoseconds p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(p.count()) / 1000.0);
  return buf;
}

std::string rate_text(double msgs_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", msgs_per_s / 1e6);
  return buf;
}

std::string breakdown_table(std::span<const SimRow> rows) {
  constexpr size_t kLabelWidth = 25;
  std::vector<size_t> widths;
  for (const SimRow& r : rows) widths.push_back(std::max<size_t>(10, r.measurement.row.name.size() + 2));
  size_t total = 1 + kLabelWidth;
  for (size_t w : widths) total += w;
  const std::string rule = ruler(total);
  std::string out = " Latency of one post along the seed's steps 0-5 (ns, critical path)\n" + rule + "\n";
  std::string header(1, ' ');
  header += pad_right("step", kLabelWidth);
  for (size_t i = 0; i < rows.size(); ++i) header += pad_left(std::string(rows[i].measurement.row.name), widths[i]);
  out += header + "\n" + rule + "\n";
  for (const PhaseLabel& p : kPhaseLabels) {
    std::string line(1, ' ');
    line += pad_right(p.label, kLabelWidth);
    for (size_t i = 0; i < rows.size(); ++i) {
      line += pad_left(ns_text(rows[i].latency.phase[static_cast<size_t>(p.phase)]), widths[i]);
    }
    out += line + "\n";
  }
  out += rule + "\n";
  std::string line(1, ' ');
  line += pad_right("   total", kLabelWidth);
  for (size_t i = 0; i < rows.size(); ++i) line += pad_left(ns_text(rows[i].latency.total), widths[i]);
  out += line + "\n";
  out += wrap("Each step is charged the time from the result it waited for to its own result, queueing "
              "included, so the column sums to the total. Without postlist a WQE fetch and a payload "
              "fetch each cost a PCIe round trip; BlueFlame removes the first, inline the second (S3). "
              "The postlist rows show the last of 32 WRs.",
              kFootnoteWidth, " ", " ");
  return out;
}

}  // namespace

std::string format_sim_table(std::span<const SimRow> rows, const WorkloadParams& params, const sim::MachineProfile& profile) {
  std::vector<RowMeasurement> measurements;
  ExtraColumns extra;
  static constexpr Column kModeled[] = {{"post ns", 9}, {"Mmsg/s", 8}};
  extra.group = "modeled";
  extra.columns = kModeled;
  for (const SimRow& r : rows) {
    measurements.push_back(r.measurement);
    extra.cells.push_back({ns_text(r.latency.total), rate_text(r.message_rate)});
  }
  std::string intro = title_line(params, "sim mode");
  intro += " machine " + profile.name + ": " + profile.description + "\n";
  intro += " PCIe transactions per message from each device's counters (identical in live mode), and\n";
  intro += " the timing model's latency and message rate (queue depth " + std::to_string(params.sq_depth) + ")\n";
  std::string out = counts_table(measurements, intro, &extra);
  out += wrap(kSimNote, kFootnoteWidth, " ", " ");
  out += "\n" + breakdown_table(rows);
  return out;
}

std::string format_sim_json(std::span<const SimRow> rows, const WorkloadParams& params, const sim::MachineProfile& profile) {
  nlohmann::json jrows = nlohmann::json::array();
  for (const SimRow& r : rows) {
    const RowMeasurement& m = r.measurement;
    nlohmann::json phases = nlohmann::json::object();
    for (const PhaseLabel& p : kPhaseLabels) {
      phases[std::string(sim::to_string(p.phase))] =
          static_cast<double>(r.latency.phase[static_cast<size_t>(p.phase)].count()) / 1000.0;
    }
    jrows.push_back({{"features", m.row.name},
                     {"postlist", m.row.postlist},
                     {"inline", m.row.inline_data},
                     {"signal_period", m.row.signal_period},
                     {"blueflame", to_string(m.row.blueflame)},
                     {"messages", m.messages},
                     {"requester", side_json(kRequesterName, m.requester, m.messages)},
                     {"responder", side_json(kResponderName, m.responder, m.messages)},
                     {"post_latency_ns", static_cast<double>(r.latency.total.count()) / 1000.0},
                     {"post_latency_breakdown_ns", phases},
                     {"message_rate_per_s", r.message_rate},
                     {"elapsed_ns", static_cast<double>(r.elapsed.count()) / 1000.0}});
  }
  nlohmann::json j = {{"tool", "softhca demo"},
                      {"mode", "sim"},
                      {"profile", {{"name", profile.name}, {"description", profile.description}}},
                      {"operation", "RDMA_WRITE"},
                      {"transport", "RC"},
                      {"message_bytes", params.message_bytes},
                      {"messages_per_row", params.messages},
                      {"sq_depth", params.sq_depth},
                      {"rows", jrows},
                      {"notes", {std::string(kNoteAll), std::string(kSimNote)}}};
  return j.dump(2) + "\n";
}

}  // namespace softhca::tools
