#include "tools/model_trace.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace softhca::tools {
namespace {

using sim::StepKind;

// The switch is not a host: a process id past every host's.
constexpr uint32_t kSwitchPid = 1000;

double to_us(Picoseconds t) { return static_cast<double>(t.count()) / 1e6; }

// A TLP's PCIe type from its flow-control class (atomics are non-posted reads too).
std::string_view tlp_type(const sim::Step& s) {
  switch (s.tlp_class) {
    case sim::TlpClass::kPosted: return "MWr";
    case sim::TlpClass::kNonPosted: return "MRd";
    case sim::TlpClass::kCompletion: return "CplD";
  }
  return "?";
}

struct Track {
  uint32_t pid;
  std::string thread;
};

// The resource a step occupies, as a (process, thread name) pair; nullopt for joins.
std::optional<Track> track_of(const sim::Step& s) {
  switch (s.kind) {
    case StepKind::kCpu: return Track{s.host, "CPU thread " + std::to_string(s.index)};
    case StepKind::kTlp: return Track{s.host, s.dir == sim::LinkDir::kDown ? "PCIe downstream" : "PCIe upstream"};
    case StepKind::kHcaUnit: return Track{s.host, "HCA " + std::string(sim::to_string(s.unit))};
    case StepKind::kIbLink: return Track{s.host, "IB port"};
    case StepKind::kSwitchEgress: return Track{kSwitchPid, "egress to host " + std::to_string(s.host)};
    case StepKind::kPacket: return Track{s.host, "wire"};
    case StepKind::kJoin: return std::nullopt;
  }
  return std::nullopt;
}

std::string event_name(const sim::Step& s) {
  const std::string phase(sim::to_string(s.phase));
  switch (s.kind) {
    case StepKind::kTlp: return phase + " " + std::string(tlp_type(s));
    case StepKind::kPacket: return phase + " packet to host " + std::to_string(s.index);
    case StepKind::kHcaUnit: return phase + " (" + std::string(sim::to_string(s.unit)) + " unit)";
    case StepKind::kCpu: return phase + " (CPU)";
    case StepKind::kIbLink:
    case StepKind::kSwitchEgress: return phase + " packet";
    case StepKind::kJoin: break;
  }
  return phase;
}

nlohmann::json step_args(const sim::Step& s, const sim::StepTimes& t, size_t index) {
  nlohmann::json a{{"step", index}, {"phase", std::string(sim::to_string(s.phase))},
                   {"ready_us", to_us(t.ready)}, {"arrive_us", to_us(t.arrive)}};
  if (s.kind == StepKind::kTlp) {
    a["wire_bytes"] = s.bytes;
    a["payload_bytes"] = s.payload_bytes;
  }
  if (s.kind == StepKind::kPacket || s.kind == StepKind::kIbLink || s.kind == StepKind::kSwitchEgress)
    a["wire_bytes"] = s.bytes;
  return a;
}

}  // namespace

std::string format_sim_trace(const LatencyTrace& trace) {
  // Thread ids per process in order of first use, so the tracks come out in causal order.
  std::map<std::pair<uint32_t, std::string>, uint32_t> tids;
  std::map<uint32_t, uint32_t> next_tid;
  struct Placed {
    Picoseconds start;
    size_t index;
    uint32_t pid, tid;
  };
  std::vector<Placed> placed;
  for (size_t i = 0; i < trace.steps.size() && i < trace.times.size(); ++i) {
    const std::optional<Track> tr = track_of(trace.steps[i]);
    if (!tr) continue;
    auto [it, fresh] = tids.try_emplace({tr->pid, tr->thread}, 0);
    if (fresh) it->second = ++next_tid[tr->pid];
    placed.push_back(Placed{trace.times[i].start, i, tr->pid, it->second});
  }
  // Time order (ties in chain order): every track's events are then in order too.
  std::stable_sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) { return a.start < b.start; });

  nlohmann::json events = nlohmann::json::array();
  for (const auto& [pid, count] : next_tid) {
    const std::string name = pid == kSwitchPid ? "switch" : "host " + std::to_string(pid);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", name}}}});
  }
  for (const auto& [key, tid] : tids) {
    events.push_back(
        {{"ph", "M"}, {"name", "thread_name"}, {"pid", key.first}, {"tid", tid}, {"args", {{"name", key.second}}}});
  }
  for (const Placed& p : placed) {
    const sim::Step& s = trace.steps[p.index];
    const sim::StepTimes& t = trace.times[p.index];
    events.push_back({{"name", event_name(s)},
                      {"cat", "sim"},
                      {"ph", "X"},
                      {"ts", to_us(t.start)},
                      {"dur", to_us(t.done - t.start)},
                      {"pid", p.pid},
                      {"tid", p.tid},
                      {"args", step_args(s, t, p.index)}});
  }
  nlohmann::json doc{{"traceEvents", std::move(events)},
                     {"displayTimeUnit", "ns"},
                     {"otherData", {{"clock", "model"}, {"run", "one post, idle machine (softhca model)"}}}};
  return doc.dump(1) + "\n";
}

}  // namespace softhca::tools
