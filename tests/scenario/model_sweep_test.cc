// `softhca model` what-ifs (tools/model_sweep.h, model_cli.h): sweeps over workload parameters and
// profile keys move the results the way the model's rules say, and the same sweep prints the same
// bytes twice.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/model_cli.h"
#include "tools/model_profile.h"
#include "tools/model_sweep.h"

namespace softhca::tools {
namespace {

Workload small() {
  Workload w;
  w.messages = 256;
  return w;
}

TEST(ModelSweep, ALongerPcieRoundTripLengthensAPostByTwoRoundTripsOfDifference_S2) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  const SweepAxis rtt = parse_axis("pcie.rtt_ns=125,250");
  const std::vector<ModelPoint> pts = run_model(p, small(), rtt, std::nullopt, nullptr);
  ASSERT_EQ(pts.size(), 2u);
  // Expect: doorbell (one way), WQE read, payload read (two round trips) and CQE (one way): three
  // round trips' worth of PCIe latency, so 125 ns more round trip costs 375 ns more per post.
  EXPECT_EQ(pts[1].latency.total - pts[0].latency.total, Picoseconds(375'000));
}

TEST(ModelSweep, AFasterPcieGenerationShortensSerializationOnly) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  const std::vector<ModelPoint> pts = run_model(p, small(), parse_axis("pcie.generation=2,3,4"), std::nullopt, nullptr);
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_GT(pts[0].latency.total, pts[1].latency.total);
  EXPECT_GT(pts[1].latency.total, pts[2].latency.total);
  EXPECT_LT(pts[1].latency.total - pts[2].latency.total, Picoseconds(20'000));  // serialization only
}

TEST(ModelSweep, MoreQpsOnMoreThreadsRaiseTheMessageRate) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  Workload w = small();
  w.threads = 1;
  const std::vector<ModelPoint> one = run_model(p, w, std::nullopt, std::nullopt, nullptr);
  w.qps = 2;
  w.threads = 2;
  const std::vector<ModelPoint> two = run_model(p, w, std::nullopt, std::nullopt, nullptr);
  EXPECT_GT(two[0].run.message_rate, 1.5 * one[0].run.message_rate);
}

TEST(ModelSweep, EveryOperationRunsClosedLoop) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  const std::vector<ModelPoint> pts = run_model(p, small(), parse_axis("op=write,read,send,atomic"), std::nullopt, nullptr);
  ASSERT_EQ(pts.size(), 4u);
  for (const ModelPoint& pt : pts) {
    EXPECT_EQ(pt.run.messages, 256u) << pt.x;
    EXPECT_GT(pt.run.message_rate, 0) << pt.x;
  }
  // Expect: a READ's data comes back in the response: the requester writes it to memory.
  EXPECT_GT(pts[1].run.requester.by_cause(pcie::TlpCause::kPayloadWrite).tlps, 0u);
}

TEST(ModelSweep, LargeMessagesAreCutByTheMtuAndBoundByTheLinks) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  Workload w = small();
  w.size_bytes = 65536;
  w.messages = 64;
  const std::vector<ModelPoint> pts = run_model(p, w, std::nullopt, std::nullopt, nullptr);
  // Expect: close to EDR's 100 Gb/s (W5) minus headers, never above it.
  EXPECT_LT(pts[0].run.goodput_gbps, 100.0);
  EXPECT_GT(pts[0].run.goodput_gbps, 80.0);
}

TEST(ModelSweep, TheSameSweepPrintsTheSameBytes) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  const Workload w = small();
  const SweepAxis axis = parse_axis("postlist=1,4");
  const SweepAxis series = parse_axis("inline=off,on");
  const std::vector<ModelPoint> a = run_model(p, w, axis, series, nullptr);
  const std::vector<ModelPoint> b = run_model(p, w, axis, series, nullptr);
  const ModelReport ra{&p, &w, &axis, &series, a};
  const ModelReport rb{&p, &w, &axis, &series, b};
  EXPECT_EQ(format_model_csv(ra), format_model_csv(rb));
  EXPECT_EQ(format_model_json(ra), format_model_json(rb));
  EXPECT_EQ(format_model_table(ra), format_model_table(rb));
  EXPECT_EQ(format_model_svg(ra, "rate"), format_model_svg(rb, "rate"));
  EXPECT_NE(format_model_svg(ra, "rate").find("<polyline"), std::string::npos);
}

}  // namespace
}  // namespace softhca::tools

namespace softhca::tools {
namespace {

// Replay mode (RunOptions::replay) reuses the chains of each QP's first period: it must give the
// very results of a run where every post goes through the device.
void expect_same(const RunResult& a, const RunResult& b) {
  EXPECT_EQ(a.elapsed, b.elapsed);
  EXPECT_EQ(a.messages, b.messages);
  EXPECT_EQ(a.cpu_busy, b.cpu_busy);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.requester.to_json(), b.requester.to_json());
  EXPECT_EQ(a.responder.to_json(), b.responder.to_json());
}

TEST(ModelReplay, ReplayingRecordedChainsGivesTheSameResultsAsRunningEveryPost) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  struct Case {
    const char* name;
    Workload w;
  };
  std::vector<Case> cases;
  Workload base;
  base.messages = 1000;  // not a multiple of the period: a tail runs on the device again
  cases.push_back({"none", base});
  Workload all = base;
  all.postlist = 32;
  all.inline_data = true;
  all.signal_period = 16;
  cases.push_back({"all", all});
  Workload bf = base;
  bf.blueflame = driver::BlueFlameMode::kPrefer;
  bf.signal_period = 4;
  cases.push_back({"BlueFlame, 1 in 4 signaled", bf});
  Workload multi = base;
  multi.qps = 3;
  multi.threads = 2;
  multi.postlist = 4;
  multi.queue_depth = 64;
  cases.push_back({"3 QPs on 2 threads", multi});
  Workload send = base;
  send.op = Operation::kSend;
  send.size_bytes = 100;
  cases.push_back({"send", send});
  Workload read = base;
  read.op = Operation::kRead;
  read.size_bytes = 5000;  // two packets at MTU 4096
  read.messages = 300;
  cases.push_back({"read", read});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RunOptions replay;
    replay.replay = true;
    const RunResult full = run_closed_loop(p, c.w);
    const RunResult fast = run_closed_loop(p, c.w, replay);
    expect_same(full, fast);
    EXPECT_EQ(full.replayed_posts, 0u);
    EXPECT_GT(fast.replayed_posts, 0u);
  }
}

}  // namespace
}  // namespace softhca::tools
