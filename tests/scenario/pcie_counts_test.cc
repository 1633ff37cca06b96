// The seed's cases (figures.md S1, S3) measured exactly: 8-byte RDMA WRITEs on an RC QP from
// softhca_0 to softhca_1 in this process, through the verbs C API, with the code `softhca demo`
// runs. Every count is a total over kMessages writes, checked against messages x per-message cost.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>
#include <vector>

#include "pcie/counters.h"
#include "tools/demo_workload.h"

namespace softhca::tools {
namespace {

using driver::BlueFlameMode;
using pcie::CounterSnapshot;
using pcie::Direction;
using pcie::TlpCause;
using pcie::TlpType;

constexpr uint64_t kMessages = 1024;  // a multiple of the postlist (32) and signal period (16)
constexpr uint64_t kBytes = 8;
constexpr uint64_t kWqeBbBytes = 64;   // a small RDMA WRITE WQE is one basic block (K2, K3)
constexpr uint64_t kCqeBytes = 64;
constexpr uint64_t kMrrsBytes = 512;   // pcie::PcieConfig default (P7)
// Default per-TLP overheads with 64-bit addresses (P4).
constexpr uint64_t kMwrOverhead = 24;
constexpr uint64_t kMrdOverhead = 24;
constexpr uint64_t kCpldOverhead = 20;

class SeedCounts : public ::testing::Test {
 protected:
  // Before the runtime's first use in this process (each test runs in its own process).
  static void SetUpTestSuite() { setenv("SOFTHCA_NUM_DEVICES", "2", 1); }

  static RowOutcome run(const FeatureRow& row) {
    WorkloadParams p;
    p.messages = kMessages;
    p.message_bytes = kBytes;
    return run_live_row(row, p);
  }
};

TEST_F(SeedCounts, AWriteWithNoFeaturesIsOneDoorbellOneWqeReadOnePayloadReadAndOneCqe_S1) {
  const RowOutcome o = run(FeatureRow{"none", 1, false, 1, BlueFlameMode::kOff});
  ASSERT_TRUE(o.ok()) << o.error;
  const CounterSnapshot& req = o.measurement.requester;
  const uint64_t n = kMessages;
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kDoorbell), n);
  EXPECT_EQ(req.at(TlpType::kMWr, TlpCause::kDoorbell).payload_bytes, 8 * n);
  EXPECT_EQ(req.tlps(TlpType::kMRd, TlpCause::kWqeRead), n);
  EXPECT_EQ(req.tlps(TlpType::kCplD, TlpCause::kWqeRead), n);
  EXPECT_EQ(req.at(TlpType::kCplD, TlpCause::kWqeRead).payload_bytes, kWqeBbBytes * n);
  EXPECT_EQ(req.tlps(TlpType::kMRd, TlpCause::kPayloadRead), n);
  EXPECT_EQ(req.tlps(TlpType::kCplD, TlpCause::kPayloadRead), n);
  EXPECT_EQ(req.at(TlpType::kCplD, TlpCause::kPayloadRead).payload_bytes, kBytes * n);
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kCqeWrite), n);
  EXPECT_EQ(req.at(TlpType::kMWr, TlpCause::kCqeWrite).payload_bytes, kCqeBytes * n);
  // Expect: nothing else (no BlueFlame, no doorbell-record read, no interrupt).
  EXPECT_EQ(req.by_type(TlpType::kMWr).tlps, 2 * n);
  EXPECT_EQ(req.by_type(TlpType::kMRd).tlps, 2 * n);
  EXPECT_EQ(req.by_type(TlpType::kCplD).tlps, 2 * n);
  // Expect: down = doorbell (8+24) + WQE CplD (64+20) + payload CplD (8+20) = 144 B per message;
  //         up = two MRd (24 each) + CQE MWr (64+24) = 136 B per message (P4).
  EXPECT_EQ(req.wire_bytes(Direction::kDownstream),
            n * ((8 + kMwrOverhead) + (kWqeBbBytes + kCpldOverhead) + (kBytes + kCpldOverhead)));
  EXPECT_EQ(req.wire_bytes(Direction::kUpstream), n * (2 * kMrdOverhead + kCqeBytes + kMwrOverhead));
}

TEST_F(SeedCounts, InlineRemovesThePayloadRead_S3) {
  const RowOutcome o = run(FeatureRow{"inline", 1, true, 1, BlueFlameMode::kOff});
  ASSERT_TRUE(o.ok()) << o.error;
  const CounterSnapshot& req = o.measurement.requester;
  const uint64_t n = kMessages;
  EXPECT_EQ(req.by_cause(TlpCause::kPayloadRead).tlps, 0u);
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kDoorbell), n);
  EXPECT_EQ(req.tlps(TlpType::kMRd, TlpCause::kWqeRead), n);
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kCqeWrite), n);
  EXPECT_EQ(req.by_type(TlpType::kMRd).tlps, n);
}

TEST_F(SeedCounts, BlueFlamePlusInlineLeavesNoDmaReadAtAll_S3) {
  const RowOutcome o = run(FeatureRow{"inline+BlueFlame", 1, true, 1, BlueFlameMode::kAuto});
  ASSERT_TRUE(o.ok()) << o.error;
  const CounterSnapshot& req = o.measurement.requester;
  const uint64_t n = kMessages;
  EXPECT_EQ(req.by_type(TlpType::kMRd).tlps, 0u);
  EXPECT_EQ(req.by_type(TlpType::kCplD).tlps, 0u);
  // Expect: the WQE (36 + 8 bytes, K3) goes down as one 64-byte write-combined line, no doorbell.
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kBlueFlame), n);
  EXPECT_EQ(req.at(TlpType::kMWr, TlpCause::kBlueFlame).payload_bytes, 64 * n);
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kDoorbell), 0u);
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kCqeWrite), n);
}

TEST_F(SeedCounts, BlueFlameWithoutInlineSkipsTheWqeReadButStillReadsThePayload_S3) {
  const RowOutcome o = run(FeatureRow{"BlueFlame", 1, false, 1, BlueFlameMode::kPrefer});
  ASSERT_TRUE(o.ok()) << o.error;
  const CounterSnapshot& req = o.measurement.requester;
  const uint64_t n = kMessages;
  EXPECT_EQ(req.tlps(TlpType::kMRd, TlpCause::kWqeRead), 0u);
  EXPECT_EQ(req.tlps(TlpType::kMRd, TlpCause::kPayloadRead), n);
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kBlueFlame), n);
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kDoorbell), 0u);
}

TEST_F(SeedCounts, APostlistOf32RingsOneDoorbellFor32Wqes_S3) {
  const RowOutcome o = run(FeatureRow{"postlist", 32, false, 1, BlueFlameMode::kOff});
  ASSERT_TRUE(o.ok()) << o.error;
  const CounterSnapshot& req = o.measurement.requester;
  const uint64_t n = kMessages;
  const uint64_t doorbells = n / 32;
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kDoorbell), doorbells);
  // Expect: each WQE is fetched once, the 32 of a doorbell as one contiguous 2048-byte read of
  // the page-aligned ring, cut into 2048 / MRRS = 4 read requests (docs/model.md).
  EXPECT_EQ(req.at(TlpType::kCplD, TlpCause::kWqeRead).payload_bytes, kWqeBbBytes * n);
  EXPECT_EQ(req.tlps(TlpType::kMRd, TlpCause::kWqeRead), doorbells * (32 * kWqeBbBytes / kMrrsBytes));
  EXPECT_EQ(req.tlps(TlpType::kMRd, TlpCause::kPayloadRead), n);
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kCqeWrite), n);
  // Expect: never BlueFlame for a postlist.
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kBlueFlame), 0u);
}

TEST_F(SeedCounts, SignalingOneWriteIn16WritesOneCqePer16_S3) {
  const RowOutcome o = run(FeatureRow{"unsignaled", 1, false, 16, BlueFlameMode::kOff});
  ASSERT_TRUE(o.ok()) << o.error;
  const CounterSnapshot& req = o.measurement.requester;
  const uint64_t n = kMessages;
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kCqeWrite), n / 16);
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kDoorbell), n);
  EXPECT_EQ(req.tlps(TlpType::kMRd, TlpCause::kWqeRead), n);
  EXPECT_EQ(req.tlps(TlpType::kMRd, TlpCause::kPayloadRead), n);
}

TEST_F(SeedCounts, AllFeaturesTogetherUseNoBlueFlameBecauseOfThePostlist_S3) {
  const RowOutcome o = run(FeatureRow{"all", 32, true, 16, BlueFlameMode::kPrefer});
  ASSERT_TRUE(o.ok()) << o.error;
  const CounterSnapshot& req = o.measurement.requester;
  const uint64_t n = kMessages;
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kDoorbell), n / 32);
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kBlueFlame), 0u);
  EXPECT_EQ(req.by_cause(TlpCause::kPayloadRead).tlps, 0u);
  EXPECT_EQ(req.tlps(TlpType::kMRd, TlpCause::kWqeRead), (n / 32) * (32 * kWqeBbBytes / kMrrsBytes));
  EXPECT_EQ(req.tlps(TlpType::kMWr, TlpCause::kCqeWrite), n / 16);
}

TEST_F(SeedCounts, TheResponderWritesEachPayloadOnceAndNoCqeForAnRdmaWrite) {
  for (const FeatureRow& row : demo_rows()) {
    SCOPED_TRACE(row.name);
    const RowOutcome o = run(row);
    ASSERT_TRUE(o.ok()) << o.error;
    const CounterSnapshot& resp = o.measurement.responder;
    EXPECT_EQ(resp.tlps(TlpType::kMWr, TlpCause::kPayloadWrite), kMessages);
    EXPECT_EQ(resp.at(TlpType::kMWr, TlpCause::kPayloadWrite).payload_bytes, kBytes * kMessages);
    EXPECT_EQ(resp.at(TlpType::kMWr, TlpCause::kPayloadWrite).wire_bytes,
              (kBytes + kMwrOverhead) * kMessages);
    // Expect: no CQE, no receive WQE read: an RDMA WRITE does not involve the target's queues.
    EXPECT_EQ(resp.by_cause(TlpCause::kCqeWrite).tlps, 0u);
    EXPECT_EQ(resp.by_type(TlpType::kMRd).tlps, 0u);
    EXPECT_EQ(resp.by_type(TlpType::kMWr).tlps, kMessages);
  }
}

TEST_F(SeedCounts, RunningTheSameRowTwiceGivesIdenticalCounts) {
  const FeatureRow row{"all", 32, true, 16, BlueFlameMode::kPrefer};
  const RowOutcome first = run(row);
  const RowOutcome second = run(row);
  ASSERT_TRUE(first.ok()) << first.error;
  ASSERT_TRUE(second.ok()) << second.error;
  EXPECT_EQ(first.measurement.requester.to_json(), second.measurement.requester.to_json());
  EXPECT_EQ(first.measurement.responder.to_json(), second.measurement.responder.to_json());
}

TEST_F(SeedCounts, TheDemoHasTheSeedsSevenRowsInOrder) {
  std::vector<std::string_view> names;
  for (const FeatureRow& row : demo_rows()) names.emplace_back(row.name);
  EXPECT_EQ(names, (std::vector<std::string_view>{"none", "postlist", "inline", "unsignaled", "BlueFlame",
                                                  "inline+BlueFlame", "all"}));
}

}  // namespace
}  // namespace softhca::tools
