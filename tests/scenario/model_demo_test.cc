// `softhca demo` in sim mode (tools/demo_sim.h): the PCIe counts of every feature row are the
// seed's statements (figures.md S1, S3) and the live ones, the output is the same bytes on every
// run, and the modeled latencies show what each feature removes.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pcie/counters.h"
#include "tools/demo_report.h"
#include "tools/demo_sim.h"
#include "tools/demo_workload.h"
#include "tools/model_profile.h"

namespace softhca::tools {
namespace {

using pcie::CounterSnapshot;
using pcie::TlpCause;
using pcie::TlpType;

constexpr uint64_t kMessages = 1024;
constexpr uint64_t kWqeReadsPerPostlist = 32 * 64 / 512;  // 32 one-block WQEs, MRRS 512

const std::vector<SimRow>& sim_rows() {
  static const std::vector<SimRow> rows = [] {
    WorkloadParams p;
    p.messages = kMessages;
    return run_sim_demo(load_profile(kDefaultProfileName), p);
  }();
  return rows;
}

const SimRow& row(std::string_view name) {
  for (const SimRow& r : sim_rows()) {
    if (r.measurement.row.name == name) return r;
  }
  throw std::runtime_error("no row " + std::string(name));
}

TEST(SimDemo, AWriteWithNoFeaturesIsOneDoorbellTwoDmaReadsAndOneCqe_S1) {
  const CounterSnapshot& c = row("none").measurement.requester;
  const uint64_t n = kMessages;
  EXPECT_EQ(c.tlps(TlpType::kMWr, TlpCause::kDoorbell), n);
  EXPECT_EQ(c.tlps(TlpType::kMRd, TlpCause::kWqeRead), n);
  EXPECT_EQ(c.tlps(TlpType::kMRd, TlpCause::kPayloadRead), n);
  EXPECT_EQ(c.tlps(TlpType::kMWr, TlpCause::kCqeWrite), n);
  EXPECT_EQ(c.by_type(TlpType::kMWr).tlps, 2 * n);  // Expect: nothing else written.
  EXPECT_EQ(c.by_type(TlpType::kMRd).tlps, 2 * n);
}

TEST(SimDemo, EachFeatureRemovesWhatTheSeedSays_S3) {
  const uint64_t n = kMessages;
  const CounterSnapshot& postlist = row("postlist").measurement.requester;
  EXPECT_EQ(postlist.tlps(TlpType::kMWr, TlpCause::kDoorbell), n / 32);
  EXPECT_EQ(postlist.tlps(TlpType::kMRd, TlpCause::kWqeRead), n / 32 * kWqeReadsPerPostlist);
  const CounterSnapshot& inl = row("inline").measurement.requester;
  EXPECT_EQ(inl.by_cause(TlpCause::kPayloadRead).tlps, 0u);
  EXPECT_EQ(inl.tlps(TlpType::kMRd, TlpCause::kWqeRead), n);
  const CounterSnapshot& unsignaled = row("unsignaled").measurement.requester;
  EXPECT_EQ(unsignaled.tlps(TlpType::kMWr, TlpCause::kCqeWrite), n / 16);
  const CounterSnapshot& bf = row("BlueFlame").measurement.requester;
  EXPECT_EQ(bf.tlps(TlpType::kMWr, TlpCause::kDoorbell), 0u);
  EXPECT_EQ(bf.tlps(TlpType::kMWr, TlpCause::kBlueFlame), n);
  EXPECT_EQ(bf.tlps(TlpType::kMRd, TlpCause::kWqeRead), 0u);
  EXPECT_EQ(bf.tlps(TlpType::kMRd, TlpCause::kPayloadRead), n);
  const CounterSnapshot& both = row("inline+BlueFlame").measurement.requester;
  EXPECT_EQ(both.by_type(TlpType::kMRd).tlps, 0u);  // Expect: no DMA read at all.
  const CounterSnapshot& all = row("all").measurement.requester;
  EXPECT_EQ(all.tlps(TlpType::kMWr, TlpCause::kDoorbell), n / 32);
  EXPECT_EQ(all.tlps(TlpType::kMWr, TlpCause::kBlueFlame), 0u);  // never BlueFlame for a postlist
  EXPECT_EQ(all.by_cause(TlpCause::kPayloadRead).tlps, 0u);
  EXPECT_EQ(all.tlps(TlpType::kMWr, TlpCause::kCqeWrite), n / 16);
  for (const SimRow& r : sim_rows()) {
    EXPECT_EQ(r.measurement.responder.tlps(TlpType::kMWr, TlpCause::kPayloadWrite), n) << r.measurement.row.name;
  }
}

TEST(SimDemo, SimCountsEqualTheLiveLoopsCountsForEveryRow) {
  for (const SimRow& r : sim_rows()) {
    SCOPED_TRACE(r.measurement.row.name);
    WorkloadParams p;
    p.messages = kMessages;
    const RowOutcome live = run_live_row(r.measurement.row, p);
    ASSERT_TRUE(live.ok()) << live.error;
    EXPECT_EQ(live.measurement.requester.to_json(), r.measurement.requester.to_json());
    EXPECT_EQ(live.measurement.responder.to_json(), r.measurement.responder.to_json());
  }
}

TEST(SimDemo, TheSameRunPrintsTheSameBytes) {
  WorkloadParams p;
  p.messages = 256;
  const sim::MachineProfile profile = load_profile(kDefaultProfileName);
  const std::vector<SimRow> a = run_sim_demo(profile, p);
  const std::vector<SimRow> b = run_sim_demo(profile, p);
  EXPECT_EQ(format_sim_table(a, p, profile), format_sim_table(b, p, profile));
  EXPECT_EQ(format_sim_json(a, p, profile), format_sim_json(b, p, profile));
}

TEST(SimDemo, EachLatencyBreakdownSumsToItsTotal) {
  for (const SimRow& r : sim_rows()) {
    Picoseconds sum{0};
    for (Picoseconds ph : r.latency.phase) sum += ph;
    EXPECT_EQ(sum, r.latency.total) << r.measurement.row.name;
    EXPECT_GT(r.message_rate, 0) << r.measurement.row.name;
  }
}

TEST(SimDemo, BlueFlameAndInlineEachRemoveAPcieRoundTripFromTheLatency_S2_S3) {
  const double rtt = 125'000;  // ps, S2
  const auto none = static_cast<double>(row("none").latency.total.count());
  const auto inl = static_cast<double>(row("inline").latency.total.count());
  const auto bf = static_cast<double>(row("BlueFlame").latency.total.count());
  const auto both = static_cast<double>(row("inline+BlueFlame").latency.total.count());
  // Expect: each saves at least a round trip; together at least two.
  EXPECT_LT(inl, none - rtt);
  EXPECT_LT(bf, none - rtt);
  EXPECT_LT(both, none - 2 * rtt);
  EXPECT_EQ(row("inline").latency.phase[static_cast<size_t>(sim::Phase::kPayloadFetch)], Picoseconds(0));
}

TEST(SimDemo, PostlistAndUnsignaledCompletionsRaiseTheMessageRate_K7) {
  EXPECT_GT(row("postlist").message_rate, 1.5 * row("none").message_rate);
  EXPECT_GT(row("unsignaled").message_rate, row("none").message_rate);
  EXPECT_GT(row("all").message_rate, row("postlist").message_rate);
  // Expect: batching costs latency (K7: a batch's WQEs come in one larger DMA read).
  EXPECT_GT(row("postlist").latency.total, row("none").latency.total);
}

#ifdef SOFTHCA_BIN
// The binary's live mode (a live runtime with its agent) and its sim mode, in two processes.
nlohmann::json run_demo(const std::string& args) {
  const std::string cmd = std::string(SOFTHCA_BIN) + " demo --json -n 256 " + args;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("cannot run " + cmd);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  return nlohmann::json::parse(out);
}

TEST(SimDemo, TheBinarysSimAndLiveModesCountTheSameTransactions) {
  const nlohmann::json sim = run_demo("");
  const nlohmann::json live = run_demo("--live");
  ASSERT_EQ(sim["rows"].size(), live["rows"].size());
  for (size_t i = 0; i < sim["rows"].size(); ++i) {
    SCOPED_TRACE(sim["rows"][i]["features"].get<std::string>());
    EXPECT_EQ(sim["rows"][i]["requester"]["counters"], live["rows"][i]["requester"]["counters"]);
    EXPECT_EQ(sim["rows"][i]["responder"]["counters"], live["rows"][i]["responder"]["counters"]);
  }
}
#endif

}  // namespace
}  // namespace softhca::tools
