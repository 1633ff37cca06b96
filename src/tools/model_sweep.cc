#include "tools/model_sweep.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "tools/model_profile.h"

namespace softhca::tools {

namespace {

constexpr size_t kMaxPoints = 10000;

double parse_number(std::string_view s, std::string_view what) {
  double v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) {
    throw std::invalid_argument(std::string(what) + ": \"" + std::string(s) + "\" is not a number");
  }
  return v;
}

uint64_t parse_count(std::string_view name, std::string_view value, uint64_t min, uint64_t max) {
  const double v = parse_number(value, name);
  if (v != std::floor(v) || v < static_cast<double>(min) || v > static_cast<double>(max)) {
    throw std::invalid_argument(std::string(name) + " must be a whole number in [" + std::to_string(min) + ", " +
                                std::to_string(max) + "], not " + std::string(value));
  }
  return static_cast<uint64_t>(v);
}

std::string number_text(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// Profile keys that change the PCIe byte model, which the process's runtime fixes at its start.
bool changes_byte_model(std::string_view key) {
  return key == "pcie.mps_bytes" || key == "pcie.mrrs_bytes" || key == "pcie.completion_bytes" ||
         key == "pcie.address_bits" || key == "pcie.ecrc";
}

}  // namespace

SweepAxis parse_axis(std::string_view spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == spec.size()) {
    throw std::invalid_argument("\"" + std::string(spec) + "\": expected NAME=VALUES, e.g. postlist=1,2,4,8");
  }
  SweepAxis a;
  a.name = std::string(spec.substr(0, eq));
  if (!is_workload_parameter(a.name) && sim::find_profile_key(a.name) == nullptr) {
    throw std::invalid_argument("\"" + a.name + "\" is neither a workload parameter (size, messages, qps, threads, "
                                "postlist, signal_period, depth, inline, blueflame, op, transport, workload) nor a profile key "
                                "(softhca model --show-profile lists them)");
  }
  if (changes_byte_model(a.name)) {
    throw std::invalid_argument(a.name + " changes the PCIe byte model, which is fixed for the run's process: "
                                "compare its values with separate `softhca model --set` runs");
  }
  const std::string_view list = spec.substr(eq + 1);
  if (list.find(':') != std::string_view::npos) {
    const size_t c1 = list.find(':');
    const size_t c2 = list.find(':', c1 + 1);
    if (c2 == std::string_view::npos) throw std::invalid_argument(a.name + ": a range is START:STOP:STEP or START:STOP:xFACTOR");
    const double start = parse_number(list.substr(0, c1), a.name);
    const double stop = parse_number(list.substr(c1 + 1, c2 - c1 - 1), a.name);
    std::string_view step_text = list.substr(c2 + 1);
    const bool geometric = !step_text.empty() && step_text[0] == 'x';
    const double step = parse_number(geometric ? step_text.substr(1) : step_text, a.name);
    if (geometric ? (step <= 1 || start <= 0) : step <= 0) {
      throw std::invalid_argument(a.name + ": the step must be > 0 (or the factor > 1, from a positive start)");
    }
    for (double v = start; v <= stop * (1 + 1e-12); v = geometric ? v * step : v + step) {
      a.values.push_back(number_text(v));
      if (a.values.size() > kMaxPoints) throw std::invalid_argument(a.name + ": more than 10000 values");
    }
  } else {
    size_t pos = 0;
    while (pos <= list.size()) {
      const size_t comma = std::min(list.find(',', pos), list.size());
      if (comma == pos) throw std::invalid_argument(a.name + ": an empty value in \"" + std::string(list) + "\"");
      a.values.emplace_back(list.substr(pos, comma - pos));
      pos = comma + 1;
    }
  }
  if (a.values.empty()) throw std::invalid_argument(a.name + ": no values");
  return a;
}

bool is_workload_parameter(std::string_view n) {
  return n == "size" || n == "messages" || n == "qps" || n == "threads" || n == "postlist" || n == "signal_period" ||
         n == "depth" || n == "inline" || n == "blueflame" || n == "op" || n == "transport" || n == "workload" ||
         n == "hosts" || n == "order";
}

void apply_parameter(sim::MachineProfile& p, Workload& w, std::string_view name, std::string_view value) {
  constexpr uint64_t kMax32 = 0xffffffff;
  if (name == "size") {
    w.size_bytes = static_cast<uint32_t>(parse_count(name, value, 1, uint64_t{1} << 30));
  } else if (name == "messages") {
    w.messages = parse_count(name, value, 1, uint64_t{1} << 40);
  } else if (name == "qps") {
    w.qps = static_cast<uint32_t>(parse_count(name, value, 1, kMax32));
  } else if (name == "threads") {
    w.threads = static_cast<uint32_t>(parse_count(name, value, 1, kMax32));
  } else if (name == "postlist") {
    w.postlist = static_cast<uint32_t>(parse_count(name, value, 1, kMax32));
  } else if (name == "signal_period") {
    w.signal_period = static_cast<uint32_t>(parse_count(name, value, 1, kMax32));
  } else if (name == "depth") {
    w.queue_depth = static_cast<uint32_t>(parse_count(name, value, 1, kMax32));
  } else if (name == "inline") {
    if (value != "0" && value != "1" && value != "true" && value != "false" && value != "on" && value != "off") {
      throw std::invalid_argument("inline is on or off, not " + std::string(value));
    }
    w.inline_data = value == "1" || value == "true" || value == "on";
  } else if (name == "blueflame") {
    if (value == "off" || value == "0") {
      w.blueflame = driver::BlueFlameMode::kOff;
    } else if (value == "auto") {
      w.blueflame = driver::BlueFlameMode::kAuto;
    } else if (value == "on" || value == "1" || value == "prefer") {
      w.blueflame = driver::BlueFlameMode::kPrefer;
    } else {
      throw std::invalid_argument("blueflame is off, auto or on, not " + std::string(value));
    }
  } else if (name == "op") {
    const auto op = operation_from_string(value);
    if (!op) throw std::invalid_argument("op is write, read, send or atomic, not " + std::string(value));
    w.op = *op;
  } else if (name == "transport") {
    const auto t = transport_from_string(value);
    if (!t) throw std::invalid_argument("transport is rc, uc or ud, not " + std::string(value));
    w.transport = *t;
  } else if (name == "workload") {
    const auto pat = pattern_from_string(value);
    if (!pat) {
      throw std::invalid_argument("workload is stream, pingpong, pcie-read, pcie-write, incast or alltoall, not " +
                                  std::string(value));
    }
    w.pattern = *pat;
  } else if (name == "order") {
    if (value != "linear" && value != "shifted") throw std::invalid_argument("order is linear or shifted, not " + std::string(value));
    w.shifted = value == "shifted";
  } else if (name == "hosts") {
    w.hosts = static_cast<uint32_t>(parse_count(name, value, 2, 256));
  } else {
    if (auto err = sim::set_profile_what_if(p, name, value)) throw std::invalid_argument(*err);
    if (auto err = sim::validate(p)) throw std::invalid_argument(std::string(name) + "=" + std::string(value) + ": " + *err);
  }
}

std::vector<ModelPoint> run_model(const sim::MachineProfile& profile, const Workload& workload,
                                  const std::optional<SweepAxis>& sweep, const std::optional<SweepAxis>& series,
                                  const std::function<void(size_t, size_t)>& progress, const RunOptions& options) {
  const std::vector<std::string> none{""};
  const std::vector<std::string>& series_values = series ? series->values : none;
  const std::vector<std::string>& x_values = sweep ? sweep->values : none;
  const size_t total = series_values.size() * x_values.size();
  std::vector<ModelPoint> points;
  for (const std::string& sv : series_values) {
    for (const std::string& xv : x_values) {
      sim::MachineProfile p = profile;
      Workload w = workload;
      if (series) apply_parameter(p, w, series->name, sv);
      if (sweep) apply_parameter(p, w, sweep->name, xv);
      if (auto err = validate(w)) {
        throw std::invalid_argument((sweep ? sweep->name + "=" + xv + ": " : std::string()) + *err);
      }
      ModelPoint pt;
      pt.series = sv;
      pt.x = xv;
      pt.run = run_workload(p, w, options);
      // A DMA run has no post; a many-host run's flows are streams of their own (no one-post run).
      if (!is_dma(w.pattern) && !is_fanout(w.pattern)) pt.latency = measure_latency(p, w);
      points.push_back(std::move(pt));
      if (progress) progress(points.size(), total);
    }
  }
  return points;
}

Bottleneck busiest(const RunResult& r) {
  Bottleneck b;
  const double elapsed = static_cast<double>(r.elapsed.count());
  if (elapsed <= 0) return b;
  auto consider = [&b, elapsed](Picoseconds busy, const std::string& name) {
    const double util = static_cast<double>(busy.count()) / elapsed;
    if (b.name.empty() || util > b.utilization) {
      b.utilization = util;
      b.name = name;
    }
  };
  // Each CPU thread is a core of its own: a core, not the sum over them, can be saturated.
  for (const CpuUse& c : r.cpu) consider(c.busy, cpu_name(c));
  for (const sim::ResourceUse& u : r.resources) {
    if (u.name == "cpu") continue;  // the post steps only; the generator's account (r.cpu) has the polls too
    consider(u.busy, std::string(u.name) + "@" + std::to_string(u.host));
  }
  return b;
}

std::string cpu_name(const CpuUse& c) { return "cpu" + std::to_string(c.thread) + "@" + std::to_string(c.host); }

}  // namespace softhca::tools
