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

std::string format_table(std::span<const RowMeasurement> rows, const WorkloadParams& params) {
  constexpr size_t kNameWidth = 19;
  struct Column {
    std::string_view title;
    size_t width;
  };
  static constexpr Column kRequester[] = {{"doorbells", 11}, {"MMIO B", 8}, {"WQE rd", 8}, {"data rd", 9},
                                          {"CQE wr", 8},     {"down B", 9}, {"up B", 8}};
  static constexpr Column kResponder[] = {{"data wr", 12}, {"down B", 9}, {"up B", 8}};
  constexpr size_t kFootnoteWidth = 96;
  constexpr std::string_view kGap = "   ";
  auto span_width = [](std::span<const Column> cols) {
    size_t w = 0;
    for (const Column& c : cols) w += c.width;
    return w;
  };
  // A group title centred in dashes over its columns.
  auto group = [](std::string_view title, size_t width) {
    constexpr size_t kIndent = 3;
    const std::string t = " " + std::string(title) + " ";
    const size_t dashes = width > t.size() + kIndent ? width - t.size() - kIndent : 0;
    return std::string(kIndent, ' ') + std::string(dashes / 2, '-') + t + std::string(dashes - dashes / 2, '-');
  };

  const size_t req_width = span_width(kRequester);
  const size_t resp_width = span_width(kResponder);
  const size_t total_width = 1 + kNameWidth + req_width + kGap.size() + resp_width;
  const std::string rule = " " + std::string(total_width - 1, '-');

  std::string out;
  out += " softhca demo: " + std::to_string(params.messages) + " RDMA WRITEs of " +
         std::to_string(params.message_bytes) + " B per feature set, RC, " + std::string(kRequesterName) +
         " -> " + std::string(kResponderName) + ", live mode\n";
  out += " PCIe transactions per message, from each device's counters\n";
  out += rule + "\n";
  out += " " + std::string(kNameWidth, ' ') + group("requester " + std::string(kRequesterName), req_width) +
         std::string(kGap) + group("responder " + std::string(kResponderName), resp_width) + "\n";
  std::string header = " " + pad_right("features", kNameWidth);
  for (const Column& c : kRequester) header += pad_left(std::string(c.title), c.width);
  header += kGap;
  for (const Column& c : kResponder) header += pad_left(std::string(c.title), c.width);
  out += header + "\n" + rule + "\n";

  for (const RowMeasurement& m : rows) {
    const SideTotals r = side_totals(m.requester);
    const SideTotals s = side_totals(m.responder);
    const uint64_t n = m.messages;
    const std::string req_cells[] = {
        format_per_message(r.doorbells, n),          format_bytes_per_message(r.mmio_bytes, n),
        format_per_message(r.wqe_reads, n),          format_per_message(r.payload_reads, n),
        format_per_message(r.cqe_writes, n),         format_bytes_per_message(r.wire_down_bytes, n),
        format_bytes_per_message(r.wire_up_bytes, n)};
    const std::string resp_cells[] = {format_per_message(s.payload_writes, n),
                                      format_bytes_per_message(s.wire_down_bytes, n),
                                      format_bytes_per_message(s.wire_up_bytes, n)};
    std::string name(m.row.name);
    if (m.row.name == "all") name += " *";  // the footnote
    std::string line(1, ' ');
    line += pad_right(name, kNameWidth);
    for (size_t i = 0; i < std::size(kRequester); ++i) line += pad_left(req_cells[i], kRequester[i].width);
    line += kGap;
    for (size_t i = 0; i < std::size(kResponder); ++i) line += pad_left(resp_cells[i], kResponder[i].width);
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
