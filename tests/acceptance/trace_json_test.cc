// Acceptance of SOFTHCA_TRACE: observe_workload (every operation, RC/UC/UD) runs with a trace and
// the counters dump, and the Chrome/Perfetto trace-event JSON it leaves at exit must
//   - load, with every event well-formed (name, ph, pid, tid; ts, cat, args for instant events);
//   - name one process per device and its four tracks (metadata events);
//   - have timestamps that never decrease along each track;
//   - have a track per CPU thread that called into the library, whose post_send events come before
//     the doorbell rings and doorbell TLPs they cause;
//   - hold exactly the TLPs the counters counted: per device, type and cause, the same number of
//     TLP events, payload bytes and wire bytes as SOFTHCA_STATS reports; and one packet event per
//     packet sent (wire track) and received (HCA track);
// and with SOFTHCA_TRACE_MAX_EVENTS=N keep only the last N events and say how many it dropped.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "observe_run.h"

namespace softhca::acceptance {
namespace {

using nlohmann::json;

constexpr int kTrackDownstream = 1;
constexpr int kTrackUpstream = 2;
constexpr int kTrackHca = 3;
constexpr int kTrackWire = 4;
constexpr int kCpuThreadsPid = 1'000'000;  // chrome_trace.h

json load(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// The instant events of a trace (metadata left out).
std::vector<json> instant_events(const json& trace) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("ph", "") == "i") out.push_back(e);
  }
  return out;
}

class TraceJson : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_ = new ObserveRun(run_observe_workload(OBSERVE_WORKLOAD));
    trace_ = load(run_->trace);
    stats_ = load(run_->stats);
  }
  static void TearDownTestSuite() {
    if (!keep_files_) remove_run_files(*run_);
    delete run_;
  }
  void TearDown() override {
    if (HasFailure()) keep_files_ = true;
  }

  void SetUp() override {
    ASSERT_EQ(run_->exit_code, 0) << "observe_workload failed:\n" << run_->output;
    ASSERT_FALSE(trace_.is_discarded()) << run_->trace << " is not JSON";
    ASSERT_FALSE(stats_.is_discarded()) << run_->stats << " is not JSON";
    ASSERT_TRUE(trace_.contains("traceEvents") && trace_["traceEvents"].is_array());
  }

  static inline ObserveRun* run_ = nullptr;
  static inline bool keep_files_ = false;  // a failed check leaves the run's files for inspection
  static inline json trace_;
  static inline json stats_;
};

TEST_F(TraceJson, EveryEventIsWellFormed) {
  size_t instants = 0;
  for (const json& e : trace_["traceEvents"]) {
    SCOPED_TRACE(e.dump());
    ASSERT_TRUE(e.is_object());
    ASSERT_TRUE(e.contains("name") && e["name"].is_string() && !e["name"].get<std::string>().empty());
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string());
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer());
    ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer());
    ASSERT_TRUE(e.contains("args") && e["args"].is_object());
    const std::string ph = e["ph"];
    ASSERT_TRUE(ph == "M" || ph == "i") << "unexpected phase " << ph;
    if (ph == "i") {
      ++instants;
      ASSERT_TRUE(e.contains("ts") && e["ts"].is_number());
      EXPECT_GE(e["ts"].get<double>(), 0.0);
      EXPECT_EQ(e.value("s", ""), "t");
      const std::string cat = e.value("cat", "");
      ASSERT_TRUE(cat == "pcie" || cat == "packet" || cat == "cpu") << cat;
      const json& a = e["args"];
      if (cat == "cpu") {
        EXPECT_EQ(e["pid"], kCpuThreadsPid);
      } else if (cat == "pcie") {
        EXPECT_TRUE(a.contains("type") && a.contains("cause") && a.contains("direction") && a.contains("wire_bytes"));
        EXPECT_EQ(e["name"], a["cause"].get<std::string>() + " " + a["type"].get<std::string>());
      } else {
        EXPECT_TRUE(a.contains("psn") && a.contains("dest_qp") && a.contains("opcode") && a.contains("wire_bytes"));
      }
    }
  }
  EXPECT_GT(instants, 100u);
  EXPECT_EQ(trace_["otherData"]["dropped_events"], 0);
}

TEST_F(TraceJson, EachDeviceIsAProcessWithFourNamedTracks) {
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::string> threads;
  for (const json& e : trace_["traceEvents"]) {
    if (e["ph"] != "M") continue;
    if (e["name"] == "process_name") processes[e["pid"]] = e["args"]["name"];
    if (e["name"] == "thread_name") threads[{e["pid"], e["tid"]}] = e["args"]["name"];
  }
  EXPECT_EQ(processes,
            (std::map<int, std::string>{{1, "softhca_0"}, {2, "softhca_1"}, {kCpuThreadsPid, "CPU threads"}}));
  for (int pid : {1, 2}) {
    EXPECT_EQ(threads[std::make_pair(pid, kTrackDownstream)], "PCIe downstream");
    EXPECT_EQ(threads[std::make_pair(pid, kTrackUpstream)], "PCIe upstream");
    EXPECT_EQ(threads[std::make_pair(pid, kTrackHca)], "HCA");
    EXPECT_EQ(threads[std::make_pair(pid, kTrackWire)], "wire");
  }
  for (const json& e : instant_events(trace_)) {
    const auto track = std::make_pair(e["pid"].get<int>(), e["tid"].get<int>());
    EXPECT_TRUE(processes.contains(track.first) && threads.contains(track)) << e.dump();
  }
}

TEST_F(TraceJson, TimestampsNeverDecreaseAlongATrack) {
  std::map<std::pair<int, int>, double> last;
  for (const json& e : instant_events(trace_)) {
    const std::pair<int, int> track{e["pid"], e["tid"]};
    const double ts = e["ts"];
    if (last.contains(track)) {
      EXPECT_GE(ts, last[track]) << e.dump();
    }
    last[track] = ts;
  }
  size_t cpu_tracks = 0;
  for (const auto& [track, ts] : last) cpu_tracks += track.first == kCpuThreadsPid ? 1 : 0;
  EXPECT_EQ(cpu_tracks, 1u) << "the workload calls verbs from one thread";
  EXPECT_EQ(last.size(), 8u + cpu_tracks) << "every track of both devices has events";
}

TEST_F(TraceJson, TlpEventsEqualTheCountersPerDeviceTypeAndCause) {
  // (device, type, cause) -> {tlps, payload bytes, wire bytes}
  using Key = std::tuple<std::string, std::string, std::string>;
  using Cell = std::tuple<uint64_t, uint64_t, uint64_t>;
  std::map<int, std::string> names;
  for (const json& e : trace_["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") names[e["pid"]] = e["args"]["name"];
  }
  std::map<Key, Cell> traced;
  std::map<std::string, std::pair<uint64_t, uint64_t>> packets;  // device -> {sent, received}
  for (const json& e : instant_events(trace_)) {
    const std::string dev = names[e["pid"]];
    const json& a = e["args"];
    if (e["cat"] == "cpu") continue;
    if (e["cat"] == "pcie") {
      Cell& c = traced[{dev, a["type"], a["cause"]}];
      std::get<0>(c) += 1;
      std::get<1>(c) += a["payload_bytes"].get<uint64_t>();
      std::get<2>(c) += a["wire_bytes"].get<uint64_t>();
      EXPECT_EQ(e["tid"], a["direction"] == "downstream" ? kTrackDownstream : kTrackUpstream) << e.dump();
    } else {
      const bool sent = a["direction"] == "sent";
      EXPECT_EQ(e["tid"], sent ? kTrackWire : kTrackHca) << e.dump();
      (sent ? packets[dev].first : packets[dev].second) += 1;
    }
  }
  std::map<Key, Cell> counted;
  std::set<std::string> causes;
  for (const json& d : stats_["devices"]) {
    const std::string dev = d["device"];
    for (const json& t : d["pcie"]["tlps"]) {
      counted[{dev, t["type"], t["cause"]}] = {t["tlps"], t["payload_bytes"], t["wire_bytes"]};
      causes.insert(t["cause"]);
    }
    EXPECT_EQ(packets[dev].first, d["packets"]["sent"].get<uint64_t>()) << dev << " packets sent";
    EXPECT_EQ(packets[dev].second, d["packets"]["received"].get<uint64_t>()) << dev << " packets received";
  }
  EXPECT_EQ(traced, counted);
  for (const char* cause : {"doorbell", "wqe_read", "payload_read", "recv_wqe_read", "payload_write", "atomic",
                            "cqe_write"}) {
    EXPECT_TRUE(causes.contains(cause)) << "the workload makes no " << cause << " TLP";
  }
}

TEST_F(TraceJson, EachCpuThreadHasATrackWhosePostSendsPrecedeTheDoorbellsTheyCause) {
  std::map<int, std::string> thread_names;
  for (const json& e : trace_["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == kCpuThreadsPid) thread_names[e["tid"]] = e["args"]["name"];
  }
  ASSERT_EQ(thread_names.size(), 1u);
  const int tid = thread_names.begin()->first;
  EXPECT_EQ(thread_names.begin()->second, "thread " + std::to_string(tid));

  // In file order (the order the recorder saw them): every doorbell TLP comes right after its
  // thread's "ring doorbell" (same seq), which comes after a post_send of that thread not yet
  // used by an earlier ring, no later in time.
  std::map<std::string, size_t> counts;
  const json* last_post = nullptr;
  bool post_used = true;
  const json* pending_ring = nullptr;
  for (const json& e : instant_events(trace_)) {
    const std::string name = e["name"];
    if (e["cat"] == "cpu") {
      ++counts[name];
      EXPECT_EQ(e["tid"], tid);
      if (name == "post_send") {
        last_post = &e;
        post_used = false;
      } else if (name == "ring doorbell") {
        ASSERT_NE(last_post, nullptr) << "a doorbell before any post_send: " << e.dump();
        EXPECT_FALSE(post_used) << "two doorbells for one post_send: " << e.dump();
        EXPECT_LE((*last_post)["ts"].get<double>(), e["ts"].get<double>());
        post_used = true;
        pending_ring = &e;
      }
      continue;
    }
    if (name == "doorbell MWr") {
      ++counts[name];
      ASSERT_NE(pending_ring, nullptr) << "a doorbell TLP without its ring: " << e.dump();
      EXPECT_EQ((*pending_ring)["args"]["seq"], e["args"]["seq"]);
      EXPECT_LE((*pending_ring)["ts"].get<double>(), e["ts"].get<double>());
    }
    pending_ring = nullptr;  // the TLP follows its ring at once
  }
  EXPECT_GT(counts["post_send"], 10u);
  EXPECT_GT(counts["poll_cq hit"], 10u);
  EXPECT_EQ(counts["ring doorbell"], counts["doorbell MWr"]);
  EXPECT_GT(counts["doorbell MWr"], 0u);
}

TEST_F(TraceJson, WithMaxEventsTheTraceKeepsTheLastEventsAndCountsTheDropped) {
  constexpr uint64_t kMax = 50;
  const ObserveRun run = run_observe_workload(OBSERVE_WORKLOAD, "SOFTHCA_TRACE_MAX_EVENTS=" + std::to_string(kMax));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const json trace = load(run.trace);
  const json stats = load(run.stats);
  ASSERT_FALSE(trace.is_discarded());
  ASSERT_FALSE(stats.is_discarded());
  uint64_t total = 0;  // every TLP and packet event the run made
  for (const json& d : stats["devices"]) {
    for (const json& t : d["pcie"]["tlps"]) total += t["tlps"].get<uint64_t>();
    total += d["packets"]["sent"].get<uint64_t>() + d["packets"]["received"].get<uint64_t>();
  }
  // ... and the CPU events: as many as the unbounded run of the same (single-threaded) workload.
  const std::vector<json> all = instant_events(trace_);
  uint64_t cpu = 0;
  for (const json& e : all) cpu += e["cat"] == "cpu" ? 1 : 0;
  const std::vector<json> events = instant_events(trace);
  EXPECT_EQ(events.size(), kMax);
  EXPECT_EQ(trace["otherData"]["max_events"], kMax);
  EXPECT_EQ(trace["otherData"]["dropped_events"], total + cpu - kMax);
  // The last event of the run is the poll that found the UD receive completion, whose CQE on
  // softhca_1 is the last TLP.
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["name"], all.back()["name"]);
  EXPECT_EQ(events.back()["name"], "poll_cq hit");
  const json* last_tlp = nullptr;
  for (const json& e : events)
    if (e["cat"] == "pcie") last_tlp = &e;
  ASSERT_NE(last_tlp, nullptr);
  EXPECT_EQ((*last_tlp)["name"], "cqe_write MWr");
  EXPECT_EQ((*last_tlp)["pid"], 2);
  if (!HasFailure()) remove_run_files(run);
}

}  // namespace
}  // namespace softhca::acceptance
