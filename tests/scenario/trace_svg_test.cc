// `softhca trace --svg`: the sequence chart drawn from the real transactions of the demo's 8-byte
// RDMA WRITE (two devices in this process), checked arrow by arrow for the seed's two headline
// cases, then rendered to PNG with rsvg-convert to prove the SVG is a valid picture.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sys/wait.h>

#include <iterator>
#include <string>
#include <vector>

#include "tools/trace_cmd.h"
#include "tools/trace_svg.h"

namespace softhca::tools {
namespace {

std::vector<std::string> arrows_of(const SequenceChart& chart) {
  std::vector<std::string> out;
  for (const SeqArrow& a : chart.arrows) out.push_back(describe(a));
  return out;
}

SequenceChart chart_for(std::string_view features, uint64_t ops) {
  const FeatureRow* row = feature_row(features);
  EXPECT_NE(row, nullptr) << features;
  if (row == nullptr) return {};
  const RecordedOperations rec = record_demo_writes(*row, ops);
  EXPECT_EQ(rec.error, "");
  return build_sequence_chart(rec.events, rec.requester, rec.responder);
}

TEST(TraceSvg, OneWriteWithoutFeaturesIsDoorbellWqeReadPayloadReadPacketRemoteWriteAckCqe) {
  const SequenceChart chart = chart_for("none", 1);
  const std::vector<std::string> want = {
      "CPU->HCA doorbell MWr 8B",
      "HCA->memory WQE MRd 64B",
      "memory->HCA CplD 64B",
      "HCA->memory payload MRd 8B",
      "memory->HCA CplD 8B",
      "HCA->remote HCA RC RDMA WRITE Only PSN 0",
      "remote HCA->remote memory payload MWr 8B",
      "remote HCA->HCA ACK PSN 0 MSN 1",
      "HCA->memory CQE MWr 64B",
  };
  EXPECT_EQ(arrows_of(chart), want);
  // One row per event: the packet and the ACK each end one row below where they start.
  EXPECT_EQ(chart.rows, want.size() + 2);
  for (size_t i = 1; i < chart.arrows.size(); ++i) EXPECT_GE(chart.arrows[i].time, chart.arrows[i - 1].time);
}

TEST(TraceSvg, OneWriteWithInlineAndBlueFlameIsOnlyBlueFlamePacketRemoteWriteAckCqe) {
  const std::vector<std::string> want = {
      "CPU->HCA BlueFlame MWr 64B",
      "HCA->remote HCA RC RDMA WRITE Only PSN 0",
      "remote HCA->remote memory payload MWr 8B",
      "remote HCA->HCA ACK PSN 0 MSN 1",
      "HCA->memory CQE MWr 64B",
  };
  EXPECT_EQ(arrows_of(chart_for("inline+blueflame", 1)), want);
}

TEST(TraceSvg, APostlistOfThreeRingsOneDoorbellAndReadsTheWqesInOneRequest) {
  const std::vector<std::string> got = arrows_of(chart_for("postlist", 3));
  ASSERT_GE(got.size(), 2u);
  EXPECT_EQ(got[0], "CPU->HCA doorbell MWr 8B");
  EXPECT_EQ(got[1], "HCA->memory WQE MRd 192B");
  size_t doorbells = 0;
  size_t cqes = 0;
  size_t packets = 0;
  for (const std::string& a : got) {
    doorbells += a.find("doorbell") != std::string::npos;
    cqes += a.find("CQE MWr") != std::string::npos;
    packets += a.find("RDMA WRITE Only") != std::string::npos;
  }
  EXPECT_EQ(doorbells, 1u);
  EXPECT_EQ(cqes, 3u);
  EXPECT_EQ(packets, 3u);
}

TEST(TraceSvg, FeatureNamesAreTheDemoRows) {
  EXPECT_EQ(feature_row("none")->name, "none");
  EXPECT_EQ(feature_row("BlueFlame")->name, "BlueFlame");
  EXPECT_EQ(feature_row("inline+blueflame")->name, "inline+BlueFlame");
  EXPECT_EQ(feature_row("all")->name, "all");
  EXPECT_EQ(feature_row("bogus"), nullptr);
}

runtime::TraceEvent packet_event(uint32_t device, runtime::PacketDirection dir, uint32_t psn) {
  runtime::TraceEvent e;
  e.kind = runtime::TraceEventKind::kPacket;
  e.device = device;
  e.packet_dir = dir;
  e.packet.valid = true;
  e.packet.opcode = 0x0a;  // RC RDMA WRITE Only
  e.packet.psn = psn;
  return e;
}

TEST(TraceSvg, PacketsWithoutTheirOtherHalfEndOrStartAtTheWire) {
  using runtime::PacketDirection;
  std::vector<runtime::TraceEvent> ev = {
      packet_event(0, PacketDirection::kSent, 1),      // never received
      packet_event(1, PacketDirection::kReceived, 2),  // sent before the chart
      packet_event(2, PacketDirection::kSent, 3),      // another device: left out
  };
  runtime::TraceEvent db;
  db.device = 1;
  db.tlp.type = pcie::TlpType::kMWr;
  db.tlp.cause = pcie::TlpCause::kDoorbell;
  db.tlp.payload_bytes = 8;
  ev.push_back(db);
  const SequenceChart chart = build_sequence_chart(ev, 0, 1);
  const std::vector<std::string> want = {
      "HCA->wire RC RDMA WRITE Only PSN 1",
      "wire->remote HCA RC RDMA WRITE Only PSN 2",
      "remote memory->remote HCA doorbell MWr 8B",  // the remote CPU starts at its memory
  };
  EXPECT_EQ(arrows_of(chart), want);
  EXPECT_EQ(chart.rows, 3u);
}

// Width and height of a PNG from its IHDR chunk; {0, 0} if the bytes are not a PNG.
std::pair<uint32_t, uint32_t> png_size(const std::string& path) {
  // Only the first 24 bytes matter: signature, IHDR length and type, width, height.
  std::string b(24, '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(b.data(), static_cast<std::streamsize>(b.size()));
  b.resize(static_cast<size_t>(in.gcount()));
  static const std::string kSignature("\x89PNG\r\n\x1a\n", 8);
  if (b.size() < 24 || b.compare(0, 8, kSignature) != 0 || b.compare(12, 4, "IHDR") != 0) return {0, 0};
  auto be32 = [&b](size_t at) {
    return (uint32_t{static_cast<uint8_t>(b[at])} << 24) | (uint32_t{static_cast<uint8_t>(b[at + 1])} << 16) |
           (uint32_t{static_cast<uint8_t>(b[at + 2])} << 8) | uint32_t{static_cast<uint8_t>(b[at + 3])};
  };
  return {be32(16), be32(20)};
}

int run(const std::string& command) {
  const int status = std::system(("timeout 60 " + command).c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool have_rsvg_convert() { return run("sh -c 'command -v rsvg-convert' >/dev/null 2>&1") == 0; }

TEST(TraceSvg, TheSvgRendersToAPngOfItsOwnSize) {
  if (!have_rsvg_convert()) GTEST_SKIP() << "rsvg-convert (librsvg2-bin) not installed";
  for (const char* features : {"none", "inline+blueflame"}) {
    SCOPED_TRACE(features);
    const SequenceChart chart = chart_for(features, 1);
    const std::string svg = render_svg(chart, "title & <escaped>", "footer");
    // One arrowhead line per arrow; the markers are defined once per style.
    size_t lines_with_heads = 0;
    for (size_t at = svg.find("marker-end="); at != std::string::npos; at = svg.find("marker-end=", at + 1)) {
      ++lines_with_heads;
    }
    EXPECT_EQ(lines_with_heads, chart.arrows.size());
    EXPECT_NE(svg.find("title &amp; &lt;escaped&gt;"), std::string::npos);

    const std::string base = std::string(::testing::TempDir()) + "softhca-trace-" +
                             (std::string(features) == "none" ? "none" : "inline-blueflame");
    std::ofstream(base + ".svg") << svg;
    ASSERT_EQ(run("rsvg-convert -o '" + base + ".png' '" + base + ".svg'"), 0) << base << ".svg";
    const auto [w, h] = png_size(base + ".png");
    // The SVG says its size in its root element; the PNG is that size.
    uint32_t sw = 0;
    uint32_t sh = 0;
    std::sscanf(svg.c_str() + svg.find("width=\"") + 7, "%u", &sw);
    std::sscanf(svg.c_str() + svg.find("height=\"") + 8, "%u", &sh);
    EXPECT_EQ(w, sw);
    EXPECT_EQ(h, sh);
    EXPECT_GT(h, 200u);
  }
}

TEST(TraceSvg, AMalformedSvgIsRejectedByTheRenderer) {
  // Proves the check above can fail: rsvg-convert refuses XML that is not well-formed.
  if (!have_rsvg_convert()) GTEST_SKIP() << "rsvg-convert (librsvg2-bin) not installed";
  const std::string base = std::string(::testing::TempDir()) + "softhca-trace-broken";
  std::ofstream(base + ".svg") << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\"><g></svg>";
  EXPECT_NE(run("rsvg-convert -o '" + base + ".png' '" + base + ".svg' 2>/dev/null"), 0);
}

}  // namespace
}  // namespace softhca::tools
