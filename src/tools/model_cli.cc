#include "tools/model_cli.h"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "tools/demo_report.h"
#include "tools/model_profile.h"
#include "tools/model_svg.h"
#include "tools/model_trace.h"

namespace softhca::tools {

namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

struct PhaseName {
  sim::Phase phase;
  std::string_view key;
};
constexpr PhaseName kPhases[] = {
    {sim::Phase::kCpuBuild, "cpu_build"},   {sim::Phase::kDoorbell, "doorbell"},
    {sim::Phase::kWqeFetch, "wqe_fetch"},   {sim::Phase::kPayloadFetch, "payload_fetch"},
    {sim::Phase::kWire, "wire"},            {sim::Phase::kRemoteWrite, "remote_write"},
    {sim::Phase::kAck, "ack"},              {sim::Phase::kCqeWrite, "cqe_write"},
    {sim::Phase::kPoll, "poll"},
};

double ns(Picoseconds p) { return static_cast<double>(p.count()) / 1000.0; }

std::string fixed(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

double per_msg(uint64_t total, uint64_t n) { return n == 0 ? 0 : static_cast<double>(total) / static_cast<double>(n); }

std::string pad(const std::string& s, size_t w, bool left_align = false) {
  if (s.size() >= w) return s;
  return left_align ? s + std::string(w - s.size(), ' ') : std::string(w - s.size(), ' ') + s;
}

std::string blueflame_text(driver::BlueFlameMode m) {
  switch (m) {
    case driver::BlueFlameMode::kOff: return "off";
    case driver::BlueFlameMode::kAuto: return "auto";
    case driver::BlueFlameMode::kPrefer: return "on";
  }
  return "?";
}

// The workload in words, leaving out the parameters named in `skip` (swept ones).
std::string workload_text(const Workload& w, const std::vector<std::string_view>& skip = {}) {
  auto shown = [&skip](std::string_view name) { return std::find(skip.begin(), skip.end(), name) == skip.end(); };
  if (is_dma(w.pattern)) {  // no QP, no CPU: only the transfers' size and count apply
    std::string out(to_string(w.pattern));
    if (shown("size")) out += " " + std::to_string(w.size_bytes) + " B";
    if (shown("messages")) out += " x " + std::to_string(w.messages);
    return out;
  }
  std::string out = std::string(to_string(w.pattern)) + " " + std::string(to_string(w.transport)) + " " +
                    std::string(to_string(w.op));
  if (is_fanout(w.pattern) && shown("hosts")) out += ", " + std::to_string(w.hosts) + " hosts";
  if (w.pattern == Pattern::kAllToAll && shown("order")) out += w.shifted ? ", shifted" : ", linear";
  if (shown("size")) out += " " + std::to_string(w.size_bytes) + " B";
  if (shown("messages")) out += " x " + std::to_string(w.messages);
  if (shown("qps")) out += ", " + std::to_string(w.qps) + " QP";
  if (shown("threads")) out += ", " + std::to_string(w.threads) + " thread";
  if (shown("postlist")) out += ", postlist " + std::to_string(w.postlist);
  if (shown("inline")) out += std::string(", inline ") + (w.inline_data ? "on" : "off");
  if (shown("signal_period")) out += ", signal 1/" + std::to_string(w.signal_period);
  if (shown("blueflame")) out += ", BlueFlame " + blueflame_text(w.blueflame);
  if (shown("depth")) out += ", depth " + std::to_string(w.queue_depth);
  return out;
}

struct Row {
  std::string series;
  std::string x;
  std::string rate;
  std::string gbps;
  std::string latency;
  std::string doorbells;
  std::string down;
  std::string up;
  std::string busiest;
  std::string util;
  std::string half_rtt;
  std::string dma_latency;
  std::string dma_gbps;
};

Row row_of(const ModelPoint& p) {
  const SideTotals t = side_totals(p.run.requester);
  const uint64_t n = p.run.messages;
  const Bottleneck b = busiest(p.run);
  return Row{p.series,
             p.x,
             fixed(p.run.message_rate / 1e6, 2),
             fixed(p.run.goodput_gbps, 2),
             fixed(ns(p.latency.total), 1),
             format_per_message(t.doorbells + t.blueflame_writes, n),
             fixed(per_msg(t.wire_down_bytes, n), 1),
             fixed(per_msg(t.wire_up_bytes, n), 1),
             b.name,
             fixed(b.utilization * 100, 1),
             fixed(ns(p.run.half_rtt), 1),
             fixed(ns(p.run.dma_latency), 1),
             fixed(p.run.dma_bandwidth_gbps, 2)};
}

}  // namespace

std::string format_model_table(const ModelReport& r) {
  std::string out = " softhca model: " + r.profile->name + ": " + r.profile->description + "\n";
  out += " workload: " + workload_text(*r.workload) + "\n";
  if (r.sweep != nullptr) out += " sweep: " + r.sweep->name + (r.series != nullptr ? ", series: " + r.series->name : "") + "\n";
  const std::string series_title = r.series != nullptr ? r.series->name : "";
  const std::string x_title = r.sweep != nullptr ? r.sweep->name : "";
  std::vector<Row> rows;
  size_t sw = series_title.size();
  size_t xw = x_title.size();
  size_t bw = 7;
  for (const ModelPoint& p : r.points) {
    rows.push_back(row_of(p));
    sw = std::max(sw, rows.back().series.size());
    xw = std::max(xw, rows.back().x.size());
    bw = std::max(bw, rows.back().busiest.size());
  }
  struct Col {
    std::string title;
    size_t width;
  };
  const Col cols[] = {{"Mmsg/s", 9}, {"Gb/s", 8}, {"post ns", 9}, {"MMIO/msg", 10}, {"down B/msg", 11}, {"up B/msg", 10}};
  // A ping-pong's half round trip, when the workload (or a sweep of it) has one.
  bool pingpong = r.workload->pattern == Pattern::kPingPong;
  for (const ModelPoint& p : r.points) pingpong = pingpong || p.run.workload.pattern == Pattern::kPingPong;
  // DMA latency and bandwidth, when the workload (or a sweep of it) is pcie-read or pcie-write.
  bool dma = is_dma(r.workload->pattern);
  for (const ModelPoint& p : r.points) dma = dma || is_dma(p.run.workload.pattern);
  std::string header = " ";
  if (r.series != nullptr) header += pad(series_title, sw + 2, true);
  if (r.sweep != nullptr) header += pad(x_title, xw, false);
  for (const Col& c : cols) header += pad(c.title, c.width);
  if (pingpong) header += pad("half RTT ns", 13);
  if (dma) header += pad("DMA lat ns", 12) + pad("DMA Gb/s", 10);
  header += "   " + pad("busiest", bw, true) + pad("busy %", 7);
  std::string rule(header.size(), '-');
  rule[0] = ' ';
  out += rule + "\n" + header + "\n" + rule + "\n";
  for (const Row& row : rows) {
    std::string line = " ";
    if (r.series != nullptr) line += pad(row.series, sw + 2, true);
    if (r.sweep != nullptr) line += pad(row.x, xw, false);
    const std::string cells[] = {row.rate, row.gbps, row.latency, row.doorbells, row.down, row.up};
    for (size_t i = 0; i < std::size(cols); ++i) line += pad(cells[i], cols[i].width);
    if (pingpong) line += pad(row.half_rtt, 13);
    if (dma) line += pad(row.dma_latency, 12) + pad(row.dma_gbps, 10);
    line += "   " + pad(row.busiest, bw, true) + pad(row.util, 7);
    out += line + "\n";
  }
  out += rule + "\n";
  out += " Mmsg/s: closed-loop message rate (modeled time). post ns: one post on an idle machine, to the CPU\n"
         " having polled its CQE. MMIO/msg: doorbells and BlueFlame lines per message. down/up B/msg: PCIe wire\n"
         " bytes of the requester per message. busiest: the resource with the most busy time (name@host).\n";
  if (pingpong) {
    out += " half RTT ns: ping-pong, half of the median round trip from one of host 0's posts to its next\n"
           " (perftest's t_typical); Mmsg/s there counts round trips.\n";
  }
  if (dma) {
    out += " DMA lat ns: pcie-read/pcie-write, one transfer at a time, from its first TLP to its last byte (read:\n"
           " at the device; write: in memory), the median. DMA Gb/s: as many transfers in flight as the device's\n"
           " read tags (posted credits) allow, steady state; Mmsg/s there counts transfers (pcie-bench's\n"
           " LAT_RD, BW_RD, BW_WR).\n";
  }
  if (r.points.size() == 1) {
    const ModelPoint& p = r.points[0];
    if (is_fanout(p.run.workload.pattern)) {
      out += "\n Per host, messages sent/received, packets out/in, PCIe TLPs down/up:";
      constexpr uint32_t kShown = 8;
      for (uint32_t h = 0; h < p.run.traffic.size() && h < kShown; ++h) {
        const HostTraffic& ht = p.run.traffic[h];
        const uint64_t down = ht.tlps[0][0] + ht.tlps[0][1] + ht.tlps[0][2];
        const uint64_t up = ht.tlps[1][0] + ht.tlps[1][1] + ht.tlps[1][2];
        out += (h == 0 ? " " : ", ") + std::to_string(h) + ": " + std::to_string(ht.messages_sent) + "/" +
               std::to_string(ht.messages_received) + " " + std::to_string(ht.packets_sent) + "/" +
               std::to_string(ht.packets_received) + " " + std::to_string(down) + "/" + std::to_string(up);
      }
      if (p.run.traffic.size() > kShown) out += ", ... (--format json lists every host)";
      Picoseconds queued{0};
      for (const sim::ResourceUse& u : p.run.resources) {
        if (u.name == "switch_egress") queued += u.queued;
      }
      out += "\n Waiting in the switch's output queues, summed over packets: " + fixed(ns(queued) / 1000.0, 2) + " us\n";
    } else if (!is_dma(p.run.workload.pattern)) {
      out += "\n Latency of one post along the seed's steps (ns):";
      for (const PhaseName& ph : kPhases) {
        out += " " + std::string(ph.key) + " " + fixed(ns(p.latency.phase[static_cast<size_t>(ph.phase)]), 1) + ",";
      }
      out += " total " + fixed(ns(p.latency.total), 1) + "\n";
    } else {
      out += "\n";
    }
    const double elapsed = static_cast<double>(p.run.elapsed.count());
    auto share = [elapsed](Picoseconds busy) { return fixed(100.0 * static_cast<double>(busy.count()) / elapsed, 1) + "%"; };
    out += " Busy share of the run (" + fixed(ns(p.run.elapsed) / 1000.0, 2) + " us), per core and unit:";
    std::string sep = " ";
    for (const CpuUse& c : p.run.cpu) {
      out += sep + cpu_name(c) + " " + share(c.busy);
      sep = ", ";
    }
    for (const sim::ResourceUse& u : p.run.resources) {
      if (u.name == "cpu" || u.busy.count() == 0) continue;
      out += sep + std::string(u.name) + "@" + std::to_string(u.host) + " " + share(u.busy);
      sep = ", ";
    }
    out += "\n";
  }
  return out;
}

std::string format_model_csv(const ModelReport& r) {
  std::string out = "series,x,messages,elapsed_ns,message_rate_per_s,goodput_gbps,post_latency_ns";
  for (const PhaseName& ph : kPhases) out += "," + std::string(ph.key) + "_ns";
  out += ",doorbells_per_msg,blueflame_lines_per_msg,wqe_reads_per_msg,payload_reads_per_msg,cqe_writes_per_msg,"
         "pcie_down_bytes_per_msg,pcie_up_bytes_per_msg,busiest,busiest_utilization\n";
  for (const ModelPoint& p : r.points) {
    const SideTotals t = side_totals(p.run.requester);
    const uint64_t n = p.run.messages;
    const Bottleneck b = busiest(p.run);
    out += p.series + "," + p.x + "," + std::to_string(n) + "," + fixed(ns(p.run.elapsed), 3) + "," +
           fixed(p.run.message_rate, 1) + "," + fixed(p.run.goodput_gbps, 4) + "," + fixed(ns(p.latency.total), 3);
    for (const PhaseName& ph : kPhases) {
      out += ',';
      out += fixed(ns(p.latency.phase[static_cast<size_t>(ph.phase)]), 3);
    }
    out += "," + fixed(per_msg(t.doorbells, n), 6) + "," + fixed(per_msg(t.blueflame_writes, n), 6) + "," +
           fixed(per_msg(t.wqe_reads, n), 6) + "," + fixed(per_msg(t.payload_reads, n), 6) + "," +
           fixed(per_msg(t.cqe_writes, n), 6) + "," + fixed(per_msg(t.wire_down_bytes, n), 3) + "," +
           fixed(per_msg(t.wire_up_bytes, n), 3) + "," + b.name + "," + fixed(b.utilization, 4) + "\n";
  }
  return out;
}

std::string format_model_json(const ModelReport& r) {
  nlohmann::json params = nlohmann::json::object();
  for (const sim::ProfileKey& k : sim::profile_keys()) {
    params[std::string(k.key)] = nlohmann::json::parse(sim::profile_value_text(*r.profile, k));
  }
  const Workload& w = *r.workload;
  nlohmann::json points = nlohmann::json::array();
  for (const ModelPoint& p : r.points) {
    const SideTotals t = side_totals(p.run.requester);
    const uint64_t n = p.run.messages;
    nlohmann::json breakdown = nlohmann::json::object();
    for (const PhaseName& ph : kPhases) breakdown[std::string(ph.key)] = ns(p.latency.phase[static_cast<size_t>(ph.phase)]);
    nlohmann::json resources = nlohmann::json::array();
    for (const sim::ResourceUse& u : p.run.resources) {
      if (u.name == "cpu") continue;
      resources.push_back({{"name", u.name},
                           {"host", u.host},
                           {"busy_ns", ns(u.busy)},
                           {"queued_ns", ns(u.queued)},
                           {"operations", u.operations},
                           {"bytes", u.bytes}});
    }
    nlohmann::json cores = nlohmann::json::array();
    for (const CpuUse& c : p.run.cpu) {
      cores.push_back({{"host", c.host},
                       {"thread", c.thread},
                       {"busy_ns", ns(c.busy)},
                       {"utilization", p.run.elapsed.count() > 0 ? static_cast<double>(c.busy.count()) /
                                                                       static_cast<double>(p.run.elapsed.count())
                                                                 : 0.0}});
    }
    const Bottleneck b = busiest(p.run);
    points.push_back({{"series", p.series},
                      {"x", p.x},
                      {"messages", n},
                      {"elapsed_ns", ns(p.run.elapsed)},
                      {"message_rate_per_s", p.run.message_rate},
                      {"goodput_gbps", p.run.goodput_gbps},
                      {"post_latency_ns", ns(p.latency.total)},
                      {"post_latency_breakdown_ns", breakdown},
                      {"per_message",
                       {{"doorbells", per_msg(t.doorbells, n)},
                        {"blueflame_lines", per_msg(t.blueflame_writes, n)},
                        {"wqe_reads", per_msg(t.wqe_reads, n)},
                        {"payload_reads", per_msg(t.payload_reads, n)},
                        {"cqe_writes", per_msg(t.cqe_writes, n)},
                        {"pcie_down_bytes", per_msg(t.wire_down_bytes, n)},
                        {"pcie_up_bytes", per_msg(t.wire_up_bytes, n)}}},
                      {"cpu_busy_ns", ns(p.run.cpu_busy)},
                      {"cpu", cores},
                      {"resources", resources},
                      {"busiest", {{"name", b.name}, {"utilization", b.utilization}}},
                      {"scheduler_events", p.run.scheduler_events},
                      {"replayed_posts", p.run.replayed_posts}});
    if (p.run.workload.pattern == Pattern::kPingPong) {
      points.back()["half_rtt_ns"] = ns(p.run.half_rtt);
      points.back()["half_rtt_min_ns"] = ns(p.run.half_rtt_min);
      points.back()["half_rtt_max_ns"] = ns(p.run.half_rtt_max);
    }
    if (is_fanout(p.run.workload.pattern)) {
      nlohmann::json hosts = nlohmann::json::array();
      for (uint32_t h = 0; h < p.run.traffic.size(); ++h) {
        const HostTraffic& ht = p.run.traffic[h];
        auto tlps = [&ht](size_t dir) {
          return nlohmann::json{
              {"posted", ht.tlps[dir][0]}, {"non_posted", ht.tlps[dir][1]}, {"completion", ht.tlps[dir][2]}};
        };
        hosts.push_back({{"host", h},
                         {"messages_sent", ht.messages_sent},
                         {"messages_received", ht.messages_received},
                         {"packets_sent", ht.packets_sent},
                         {"packets_received", ht.packets_received},
                         {"packet_bytes_sent", ht.packet_bytes_sent},
                         {"tlps_down", tlps(0)},
                         {"tlps_up", tlps(1)},
                         {"pcie_down_bytes", ht.tlp_wire_bytes[0]},
                         {"pcie_up_bytes", ht.tlp_wire_bytes[1]}});
      }
      points.back()["hosts"] = hosts;
    }
    if (is_dma(p.run.workload.pattern)) {
      points.back()["dma_latency_ns"] = ns(p.run.dma_latency);
      points.back()["dma_latency_min_ns"] = ns(p.run.dma_latency_min);
      points.back()["dma_latency_max_ns"] = ns(p.run.dma_latency_max);
      points.back()["dma_bandwidth_gbps"] = p.run.dma_bandwidth_gbps;
    }
  }
  nlohmann::json j = {
      {"tool", "softhca model"},
      {"profile", {{"name", r.profile->name}, {"description", r.profile->description}, {"parameters", params}}},
      {"workload",
       {{"pattern", to_string(w.pattern)},
        {"transport", to_string(w.transport)},
        {"op", to_string(w.op)},
        {"size_bytes", w.size_bytes},
        {"messages", w.messages},
        {"qps", w.qps},
        {"threads", w.threads},
        {"postlist", w.postlist},
        {"inline", w.inline_data},
        {"signal_period", w.signal_period},
        {"blueflame", blueflame_text(w.blueflame)},
        {"queue_depth", w.queue_depth},
        {"hosts", w.hosts},
        {"order", w.shifted ? "shifted" : "linear"}}},
      {"points", points}};
  if (r.sweep != nullptr) j["sweep"] = {{"name", r.sweep->name}, {"values", r.sweep->values}};
  if (r.series != nullptr) j["series"] = {{"name", r.series->name}, {"values", r.series->values}};
  return j.dump(2) + "\n";
}

std::string format_model_svg(const ModelReport& r, std::string_view metric) {
  Plot plot;
  const bool latency = metric == "latency";
  plot.title = std::string(latency ? "One-post latency" : "Message rate") + " vs " +
               (r.sweep != nullptr ? r.sweep->name : std::string("run"));
  std::vector<std::string_view> swept;
  if (r.sweep != nullptr) swept.push_back(r.sweep->name);
  if (r.series != nullptr) swept.push_back(r.series->name);
  plot.subtitle = r.profile->name + ": " + workload_text(*r.workload, swept);
  plot.x_label = r.sweep != nullptr ? r.sweep->name : "run";
  plot.y_label = latency ? "latency of one post [ns]" : "message rate [millions per second]";
  bool positive = true;
  std::vector<double> xs;
  for (const ModelPoint& p : r.points) {
    double x = 0;
    try {
      x = std::stod(p.x);
    } catch (const std::exception&) {
      x = static_cast<double>(xs.size());  // a non-numeric sweep (op=...): points in order
    }
    xs.push_back(x);
    positive = positive && x > 0;
  }
  for (size_t i = 0; i < r.points.size(); ++i) {
    const ModelPoint& p = r.points[i];
    const std::string name = r.series != nullptr ? r.series->name + "=" + p.series : std::string(latency ? "latency" : "rate");
    if (plot.series.empty() || plot.series.back().name != name) plot.series.push_back(PlotSeries{name, {}});
    plot.series.back().points.emplace_back(xs[i], latency ? ns(p.latency.total) : p.run.message_rate / 1e6);
  }
  // Sweeps over powers of two (postlist 1, 2, 4, ...) read best on a log2 axis.
  bool powers = positive && xs.size() >= 3;
  for (double x : xs) powers = powers && x == std::floor(x) && x < 1e15 && std::has_single_bit(static_cast<uint64_t>(x));
  plot.log2_x = powers;
  return render_svg(plot);
}

namespace {

struct ModelOptions {
  std::string profile{kDefaultProfileName};
  std::vector<std::string> overrides;
  std::string op = "write";
  std::string pattern = "stream";
  std::string transport = "rc";
  std::string order = "linear";
  Workload w;
  bool inline_data = false;
  std::string blueflame = "off";
  std::string sweep;
  std::string series;
  std::string format = "table";
  std::string svg;
  std::string trace;
  std::string plot = "rate";
  bool show_profile = false;
  bool list_profiles = false;
  bool no_replay = false;
};

// The one-post latency run of workload `w` (the base workload of a sweep) as a trace in model time.
bool write_trace(const sim::MachineProfile& profile, const Workload& w, const std::string& path) {
  if (is_dma(w.pattern)) {
    std::fprintf(stderr, "softhca model: --trace draws a post's chain: stream and pingpong only\n");
    return false;
  }
  LatencyTrace trace;
  try {
    measure_latency(profile, w, trace);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "softhca model: the latency run for --trace failed: %s\n", e.what());
    return false;
  }
  std::ofstream f(path);
  f << format_sim_trace(trace);
  if (!f) {
    std::fprintf(stderr, "softhca model: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

int run(const ModelOptions& o) {
  sim::MachineProfile profile;
  Workload w = o.w;
  std::optional<SweepAxis> sweep;
  std::optional<SweepAxis> series;
  try {
    profile = load_profile(o.profile);
    for (const std::string& s : o.overrides) apply_override(profile, s);
    if (o.list_profiles) {
      for (std::string_view n : embedded_profile_names()) std::cout << n << "\n";
      return 0;
    }
    if (o.show_profile) {
      std::cout << describe_profile(profile);
      return 0;
    }
    apply_parameter(profile, w, "op", o.op);
    apply_parameter(profile, w, "workload", o.pattern);
    apply_parameter(profile, w, "transport", o.transport);
    apply_parameter(profile, w, "blueflame", o.blueflame);
    apply_parameter(profile, w, "order", o.order);
    w.inline_data = o.inline_data;
    if (!o.sweep.empty()) sweep = parse_axis(o.sweep);
    if (!o.series.empty()) series = parse_axis(o.series);
    if (!sweep) {
      if (auto err = validate(w)) throw std::invalid_argument(*err);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "softhca model: %s\n", e.what());
    return kExitUsage;
  }
  const bool tty = isatty(STDERR_FILENO) != 0;
  auto progress = [tty](size_t done, size_t total) {
    if (!tty || total < 2) return;
    std::fprintf(stderr, "\r\033[Ksofthca model: run %zu of %zu", done, total);
    if (done == total) std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  };
  std::vector<ModelPoint> points;
  try {
    RunOptions ro;
    ro.replay = !o.no_replay;
    points = run_model(profile, w, sweep, series, progress, ro);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "softhca model: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "softhca model: %s\n", e.what());
    return kExitFailed;
  }
  ModelReport r{&profile, &w, sweep ? &*sweep : nullptr, series ? &*series : nullptr, points};
  if (o.format == "csv") {
    std::cout << format_model_csv(r);
  } else if (o.format == "json") {
    std::cout << format_model_json(r);
  } else {
    std::cout << format_model_table(r);
  }
  if (!o.svg.empty()) {
    std::ofstream f(o.svg);
    f << format_model_svg(r, o.plot);
    if (!f) {
      std::fprintf(stderr, "softhca model: cannot write %s\n", o.svg.c_str());
      return kExitFailed;
    }
  }
  if (!o.trace.empty() && !write_trace(profile, w, o.trace)) return kExitFailed;
  std::cout.flush();
  return std::cout ? 0 : kExitFailed;
}

}  // namespace

void add_model_command(CLI::App& app) {
  auto o = std::make_shared<ModelOptions>();
  CLI::App* m = app.add_subcommand("model", "What-ifs on the timing model: any profile, workload, override or sweep");
  m->footer(
      "Runs a closed-loop workload from softhca_0 to softhca_1 in virtual time through the real verbs\n"
      "API and device model, and a one-post latency run, on a machine profile. Sweep one parameter with\n"
      "--sweep NAME=VALUES (a workload parameter: size, messages, qps, threads, postlist, signal_period,\n"
      "depth, inline, blueflame, op, transport, workload; or a profile key such as pcie.rtt_ns or pcie.generation), and cross it\n"
      "with --series NAME=VALUES. VALUES: a,b,c or START:STOP:STEP or START:STOP:xFACTOR.\n"
      "Examples:\n"
      "  softhca model --postlist 32 --inline --signal-period 16\n"
      "  softhca model --workload pingpong --op send --profile x86-gen3-cx4-edr\n"
      "  softhca model --transport ud --op send --size 64\n"
      "  softhca model --workload pcie-read --sweep size=64:2048:x2 --profile x86-gen3-cx4-edr\n"
      "  softhca model --sweep postlist=1:64:x2 --series inline=off,on --svg rate.svg\n"
      "  softhca model --profile x86-gen3-cx4-edr --set pcie.rtt_ns=250 --format json\n"
      "docs/timing-model.md describes the model and every parameter.");
  m->add_option("--profile", o->profile, "Machine profile: a built-in name or a TOML file")->capture_default_str();
  m->add_option("--set", o->overrides, "Override one profile value, KEY=VALUE (repeatable)");
  m->add_option("--workload", o->pattern,
                "stream (host 0 posts closed-loop), pingpong (both hosts post and poll, perftest's _lat: "
                "reports half the round trip), pcie-read or pcie-write (host 0's device DMA-reads or writes "
                "--size bytes of host memory: latency one at a time, bandwidth with as many in flight as it "
                "allows, pcie-bench's LAT_RD, BW_RD, BW_WR), incast (hosts 1..N-1 each send -n messages to "
                "host 0) or alltoall (every host sends -n messages to every other), through the switch")
      ->check(CLI::IsMember({"stream", "pingpong", "pcie-read", "pcie-write", "incast", "alltoall"}))
      ->capture_default_str();
  m->add_option("--transport", o->transport, "QP transport: rc, uc (write, send) or ud (send, with a GRH)")
      ->check(CLI::IsMember({"rc", "uc", "ud"}))
      ->capture_default_str();
  m->add_option("--op", o->op, "Operation: write, read, send or atomic")->capture_default_str();
  m->add_option("--size", o->w.size_bytes, "Message size [bytes]")->capture_default_str();
  m->add_option("-n,--messages", o->w.messages, "Messages in the closed loop (over all QPs; incast, alltoall: per flow)")->capture_default_str();
  m->add_option("--qps", o->w.qps, "QPs")->capture_default_str();
  m->add_option("--hosts", o->w.hosts, "Hosts on the switch (incast, alltoall: 2..256)")->capture_default_str();
  m->add_option("--order", o->order,
                "alltoall: each host's peers in ascending order (linear: all start with the same one) or "
                "shifted (host h sends to h+1, h+2, ...)")
      ->check(CLI::IsMember({"linear", "shifted"}))
      ->capture_default_str();
  m->add_option("--threads", o->w.threads, "CPU threads posting (QP q on thread q % threads)")->capture_default_str();
  m->add_option("--postlist", o->w.postlist, "WRs per ibv_post_send")->capture_default_str();
  m->add_flag("--inline", o->inline_data, "Send the payload inline (write, send)");
  m->add_option("--signal-period", o->w.signal_period, "One signaled WR in this many")->capture_default_str();
  m->add_option("--blueflame", o->blueflame, "BlueFlame: off, auto (inline single WQEs) or on")->capture_default_str();
  m->add_option("--depth", o->w.queue_depth, "Send queue depth per QP")->capture_default_str();
  m->add_option("--sweep", o->sweep, "Sweep one parameter, NAME=VALUES");
  m->add_option("--series", o->series, "A second parameter, one line per value, NAME=VALUES");
  m->add_option("--format", o->format, "Output: table, csv or json")
      ->check(CLI::IsMember({"table", "csv", "json"}))
      ->capture_default_str();
  m->add_option("--svg", o->svg, "Also write a plot of the sweep to this SVG file");
  m->add_option("--trace", o->trace,
                "Also write the one-post latency run as Chrome/Perfetto trace JSON in model time "
                "(the base workload of a sweep)");
  m->add_option("--plot", o->plot, "What the SVG shows: rate or latency")
      ->check(CLI::IsMember({"rate", "latency"}))
      ->capture_default_str();
  m->add_flag("--no-replay", o->no_replay,
              "Run every post through the device; by default, after each QP's first period of posts "
              "(lcm of depth, signal period, postlist WRs) their recorded chains are replayed: same "
              "results, much faster");
  m->add_flag("--show-profile", o->show_profile, "Print the profile's parameters (after --set) and exit");
  m->add_flag("--list-profiles", o->list_profiles, "List the built-in profiles and exit");
  m->callback([o] { std::exit(run(*o)); });
}

}  // namespace softhca::tools
