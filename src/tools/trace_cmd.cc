#include "tools/trace_cmd.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>

#include "runtime/chrome_trace.h"
#include "runtime/runtime.h"
#include "runtime/tap_fanout.h"
#include "runtime/trace_recorder.h"
#include "tools/trace_svg.h"

namespace softhca::tools {

namespace {

// What `--features` accepts, and the demo row each names.
struct FeatureName {
  std::string_view option;
  std::string_view row;
};
constexpr FeatureName kFeatureNames[] = {
    {"none", "none"},           {"inline", "inline"},         {"blueflame", "BlueFlame"},
    {"inline+blueflame", "inline+BlueFlame"}, {"postlist", "postlist"}, {"unsignaled", "unsignaled"},
    {"all", "all"},
};

// The recorder of this process's runtime; made once, never destroyed (the runtime is not either).
struct Recording {
  runtime::SteadyTapClock clock;
  runtime::TraceRecorder recorder{clock};
  runtime::TapFanout fanout;
  bool installed = false;
};

Recording& recording() {
  static Recording* const r = [] {
    auto* rec = new Recording();
    rec->fanout.add(static_cast<runtime::TlpTap*>(&rec->recorder));
    rec->fanout.add(static_cast<runtime::PacketTap*>(&rec->recorder));
    runtime::RuntimeOptions o;
    o.num_devices = 2;
    o.tlp_tap = &rec->fanout;
    o.packet_tap = &rec->fanout;
    o.device_seed = 0;  // a demonstration on devices of its own: the same keys and QPNs every run
    rec->installed = runtime::Runtime::install_process(runtime::Runtime::create(o));
    return rec;
  }();
  return *r;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

struct TraceOptions {
  std::string svg;
  std::string json;
  std::string features = "none";
  uint64_t ops = 1;
};

int run_trace(const TraceOptions& o) {
  const FeatureRow* row = feature_row(o.features);
  if (row == nullptr) {
    std::fprintf(stderr, "softhca trace: unknown feature set '%s'\n", o.features.c_str());
    return EXIT_FAILURE;
  }
  const RecordedOperations rec = record_demo_writes(*row, o.ops);
  if (!rec.error.empty()) {
    std::fprintf(stderr, "softhca trace: %s\n", rec.error.c_str());
    return EXIT_FAILURE;
  }
  const SequenceChart chart = build_sequence_chart(rec.events, rec.requester, rec.responder);
  const std::string title = std::to_string(o.ops) + " x 8-byte RDMA WRITE, softhca_0 -> softhca_1, features: " +
                            std::string(row->name);
  if (!o.svg.empty()) {
    std::ofstream out(o.svg);
    out << render_svg(chart, title,
                      "softhca trace: one arrow per PCIe TLP or packet, in the order the devices made them; "
                      "times are live wall time.");
    out.flush();
    if (!out) {
      std::fprintf(stderr, "softhca trace: cannot write %s\n", o.svg.c_str());
      return EXIT_FAILURE;
    }
  }
  if (!o.json.empty()) {
    runtime::ChromeTraceInfo info;
    info.device_names = {std::string(kRequesterName), std::string(kResponderName)};
    if (!runtime::write_chrome_trace(o.json, rec.events, info)) {
      std::fprintf(stderr, "softhca trace: cannot write %s\n", o.json.c_str());
      return EXIT_FAILURE;
    }
  }
  // The arrows as text, one a line: what the chart shows.
  std::cout << title << "\n";
  for (const SeqArrow& a : chart.arrows) {
    std::printf("%10.3f us  %s\n", static_cast<double>(a.time.count()) / 1e6, describe(a).c_str());
  }
  std::cout.flush();
  return std::cout ? EXIT_SUCCESS : EXIT_FAILURE;
}

}  // namespace

const FeatureRow* feature_row(std::string_view name) {
  const std::string want = lower(name);
  for (const FeatureName& f : kFeatureNames) {
    if (f.option != want) continue;
    for (const FeatureRow& row : demo_rows()) {
      if (row.name == f.row) return &row;
    }
  }
  return nullptr;
}

RecordedOperations record_demo_writes(const FeatureRow& row, uint64_t ops) {
  RecordedOperations out;
  Recording& r = recording();
  if (!r.installed) {
    out.error = "the process runtime was made before softhca trace could attach its recorder";
    return out;
  }
  // Two devices in a fresh runtime: softhca_0 is device 0, softhca_1 device 1.
  out.requester = 0;
  out.responder = 1;
  static std::mutex one_run_at_a_time;
  std::lock_guard<std::mutex> g(one_run_at_a_time);
  WorkloadParams params;
  params.messages = ops;
  // Only the posting loop makes TLPs and packets (commands are not PCIe traffic, docs/model.md),
  // so what is recorded from here on is the operations themselves.
  r.recorder.clear();
  const RowOutcome outcome = run_live_row(row, params);
  out.events = r.recorder.events();
  if (!outcome.ok()) out.error = outcome.error;
  if (out.error.empty() && r.recorder.dropped() != 0) {
    out.error = "more events than the recorder keeps; ask for fewer operations";
  }
  return out;
}

void add_trace_command(CLI::App& app) {
  auto opts = std::make_shared<TraceOptions>();
  CLI::App* sub = app.add_subcommand(
      "trace", "Draw what the CPU, PCIe and the wire do for the demo's RDMA WRITEs (sequence chart)");
  sub->footer(
      "Runs N 8-byte RDMA WRITEs from softhca_0 to softhca_1 (two devices in this process, live mode)\n"
      "with the chosen features, records every PCIe TLP and packet, prints them one a line and, with\n"
      "--svg, draws them as a message sequence chart: lifelines CPU, memory, HCA, wire, remote HCA,\n"
      "remote memory; one arrow per TLP or packet. --json writes the same run as Chrome/Perfetto\n"
      "trace-event JSON. See docs/observability.md.");
  sub->add_option("--svg", opts->svg, "Write the sequence chart to this SVG file");
  sub->add_option("--json", opts->json, "Write the run as Chrome/Perfetto trace-event JSON to this file");
  sub->add_option("-n,--ops", opts->ops, "RDMA WRITEs to run and draw")
      ->check(CLI::Range(uint64_t{1}, uint64_t{64}))
      ->capture_default_str();
  sub->add_option("--features", opts->features,
                  "Feature set: none, inline, blueflame, inline+blueflame, postlist, unsignaled, all")
      ->capture_default_str();
  sub->callback([opts] {
    const int rc = run_trace(*opts);
    std::cout.flush();
    std::exit(rc);
  });
}

}  // namespace softhca::tools
