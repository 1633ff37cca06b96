// The trace of sim mode (`softhca model --trace`, tools/model_trace.h): the one-post latency
// run's chain as Chrome trace JSON in model time. The events are the seed's steps for the feature
// set, on the resource each occupies, in time order per track, inside the modelled latency.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "tools/model_profile.h"
#include "tools/model_trace.h"
#include "tools/model_workload.h"

namespace softhca::tools {
namespace {

struct Traced {
  nlohmann::json doc;
  LatencyBreakdown latency;
  std::map<std::string, int> names;  // event name -> how many
};

Traced trace_of(const Workload& w) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  LatencyTrace t;
  Traced r;
  r.latency = measure_latency(p, w, t);
  r.doc = nlohmann::json::parse(format_sim_trace(t));
  for (const auto& e : r.doc["traceEvents"])
    if (e["ph"] == "X") ++r.names[e["name"].get<std::string>()];
  return r;
}

int tlps_of_type(const Traced& t, const std::string& type) {
  int n = 0;
  for (const auto& [name, count] : t.names)
    if (name.size() > type.size() && name.compare(name.size() - type.size(), type.size(), type) == 0) n += count;
  return n;
}

TEST(ModelTrace, AnEightByteWriteWithoutFeaturesShowsTheSeedsSteps) {
  const Traced t = trace_of(Workload{});
  // Expect: the doorbell, the WQE read and the payload read (a request and its completion each),
  // the request and its ACK on the wire, the remote payload write and the CQE write.
  EXPECT_EQ(t.names.count("doorbell MWr"), 1u);
  EXPECT_EQ(t.names.at("WQE fetch MRd"), 1);
  EXPECT_EQ(t.names.at("WQE fetch CplD"), 1);
  EXPECT_EQ(t.names.at("payload fetch MRd"), 1);
  EXPECT_EQ(t.names.at("payload fetch CplD"), 1);
  EXPECT_EQ(t.names.at("wire packet to host 1"), 1);
  EXPECT_EQ(t.names.at("ACK packet to host 0"), 1);
  EXPECT_EQ(t.names.at("remote write MWr"), 1);
  EXPECT_EQ(t.names.at("CQE write MWr"), 1);
}

TEST(ModelTrace, InlineWithBlueFlameHasNoReadsAtAll) {
  Workload w;
  w.inline_data = true;
  w.blueflame = driver::BlueFlameMode::kPrefer;  // `--blueflame on`
  const Traced t = trace_of(w);
  EXPECT_EQ(tlps_of_type(t, "MRd"), 0);
  EXPECT_EQ(tlps_of_type(t, "CplD"), 0);
  EXPECT_EQ(t.names.count("doorbell MWr"), 1u);  // Expect: the BlueFlame write (one 64-byte line)
  EXPECT_EQ(t.names.at("CQE write MWr"), 1);
}

TEST(ModelTrace, EveryTrackIsInTimeOrderAndInsideTheModelledLatency) {
  const Traced t = trace_of(Workload{});
  std::map<std::pair<int, int>, double> last;  // (pid, tid) -> latest ts
  std::map<std::pair<int, int>, bool> named;
  double end_us = 0;
  for (const auto& e : t.doc["traceEvents"]) {
    const std::pair<int, int> track{e["pid"].get<int>(), e["tid"].get<int>()};
    if (e["ph"] == "M") {
      if (e["name"] == "thread_name") named[track] = true;
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    const double ts = e["ts"].get<double>();
    const double dur = e["dur"].get<double>();
    EXPECT_GE(dur, 0.0);
    EXPECT_TRUE(named[track]) << "an event on a track with no name: " << e.dump();
    if (last.count(track) != 0) {
      EXPECT_GE(ts, last[track]);
    }
    last[track] = ts;
    end_us = std::max(end_us, ts + dur);
  }
  EXPECT_GT(end_us, 0.0);
  // Expect: everything happened before the CPU polled the CQE (the latency's end).
  EXPECT_LE(end_us, static_cast<double>(t.latency.total.count()) / 1e6);
  EXPECT_EQ(t.doc["otherData"]["clock"], "model");
}

}  // namespace
}  // namespace softhca::tools
