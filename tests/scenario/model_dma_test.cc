// pcie-bench's DMA microbenchmarks on the timing model (issue 20; `softhca model --workload
// pcie-read|pcie-write`): a lone DMA read takes the PCIe round trip plus the serialization of its
// TLPs (S2), a lone write one way after its last byte left; with as many transfers in flight as
// the device allows, writes and reads reach the pcie-bench model's bandwidths (P8) unless read tags
// bound them; each transfer makes the TLPs the byte model cuts (P6). And "busiest" names a core or
// a unit, never the CPU summed over threads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/timing_params.h"
#include "tools/model_cli.h"
#include "tools/model_profile.h"
#include "tools/model_sweep.h"
#include "tools/model_workload.h"

namespace softhca::tools {
namespace {

constexpr uint32_t kMrdOverhead = 24, kMwrOverhead = 24, kCpldOverhead = 20;  // P4

Picoseconds pcie_ser(const sim::TimingParams& t, uint64_t wire_bytes) {
  return Picoseconds(static_cast<int64_t>((wire_bytes * t.pcie_fs_per_byte + 999) / 1000));
}

Workload dma(Pattern p, uint32_t size, uint64_t n = 2000) {
  Workload w;
  w.pattern = p;
  w.size_bytes = size;
  w.messages = n;
  return w;
}

const sim::ResourceUse& use(const RunResult& r, std::string_view name) {
  for (const sim::ResourceUse& u : r.resources) {
    if (u.name == name && u.host == 0) return u;
  }
  throw std::logic_error("no resource " + std::string(name));
}

TEST(ModelDma, ALoneReadTakesTheRoundTripPlusItsTlpsSerialization_S2) {
  for (const char* name : {"thunderx2-cx4-edr", "x86-gen3-cx4-edr"}) {
    SCOPED_TRACE(name);
    const sim::MachineProfile p = load_profile(name);
    const sim::TimingParams t = sim::derive_timing(p);
    const Picoseconds rtt = t.pcie_one_way * 2 + t.pcie_turnaround;
    // Expect: 64 bytes are one MRd and one CplD (P6); the request leaves, the completion comes back.
    const RunResult small = run_dma(p, dma(Pattern::kPcieRead, 64));
    EXPECT_EQ(small.dma_latency, rtt + pcie_ser(t, kMrdOverhead) + pcie_ser(t, 64 + kCpldOverhead));
    EXPECT_EQ(small.dma_latency_min, small.dma_latency);
    EXPECT_EQ(small.dma_latency_max, small.dma_latency);
    // Expect: 2048 page-aligned bytes are 4 MRds of 512 and 16 CplDs of 128 (P6, K5); the
    // completions follow each other on the down link, so the last arrives a round trip after the
    // first request left plus all sixteen.
    const RunResult big = run_dma(p, dma(Pattern::kPcieRead, 2048));
    EXPECT_EQ(big.dma_latency, rtt + pcie_ser(t, kMrdOverhead) + pcie_ser(t, 128 + kCpldOverhead) * 16);
  }
}

TEST(ModelDma, ALoneWriteIsInMemoryOneWayAfterItsLastByteLeft) {
  const sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  const sim::TimingParams t = sim::derive_timing(p);
  // Expect: one MWr of 64 bytes (88 on the wire, P4), then the link's one-way latency.
  EXPECT_EQ(run_dma(p, dma(Pattern::kPcieWrite, 64)).dma_latency, pcie_ser(t, 64 + kMwrOverhead) + t.pcie_one_way);
  // Expect: 1024 bytes are four MWrs of MPS 256 bytes, back to back.
  EXPECT_EQ(run_dma(p, dma(Pattern::kPcieWrite, 1024)).dma_latency,
            pcie_ser(t, 256 + kMwrOverhead) * 4 + t.pcie_one_way);
}

TEST(ModelDma, EachTransferMakesTheTlpsTheByteModelCuts_P6) {
  const sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  const uint64_t n = 500;
  const RunResult rd = run_dma(p, dma(Pattern::kPcieRead, 2048, n));
  // Expect: 4 MRds of 24 wire bytes up, 16 CplDs of 148 down, per transfer; nothing else.
  EXPECT_EQ(rd.messages, n);
  EXPECT_EQ(rd.requester.by_cause(pcie::TlpCause::kPayloadRead).tlps, n * (4 + 16));
  EXPECT_EQ(rd.requester.wire_bytes(pcie::Direction::kUpstream), n * 4 * kMrdOverhead);
  EXPECT_EQ(rd.requester.wire_bytes(pcie::Direction::kDownstream), n * 16 * (128 + kCpldOverhead));
  EXPECT_EQ(use(rd, "pcie_up").operations, n * 4);
  EXPECT_EQ(use(rd, "pcie_down").operations, n * 16);
  const RunResult wr = run_dma(p, dma(Pattern::kPcieWrite, 1000, n));
  // Expect: 1000 page-aligned bytes are MWrs of 256, 256, 256 and 232 bytes.
  EXPECT_EQ(wr.requester.by_cause(pcie::TlpCause::kPayloadWrite).tlps, n * 4);
  EXPECT_EQ(wr.requester.wire_bytes(pcie::Direction::kUpstream), n * (1000 + 4 * kMwrOverhead));
  EXPECT_EQ(wr.requester.wire_bytes(pcie::Direction::kDownstream), 0u);
}

// pcie-bench's model for Gen3 x16, MPS 256, MRRS 512, completions cut at MPS (P8), with read tags
// and non-posted credits enough that only the link limits.
TEST(ModelDma, StreamsOfSmallTransfersReachThePcieBenchBandwidthOfGen3x16_P8) {
  sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  apply_override(p, "pcie.completion_bytes=256");
  apply_override(p, "hca.max_outstanding_reads=4096");
  apply_override(p, "pcie.rc_nonposted_hdr_credits=4096");
  const double write = run_dma(p, dma(Pattern::kPcieWrite, 64, 20000)).dma_bandwidth_gbps;
  const double read = run_dma(p, dma(Pattern::kPcieRead, 64, 20000)).dma_bandwidth_gbps;
  EXPECT_NEAR(write, 82.7, 82.7 * 0.01);
  EXPECT_NEAR(read, 86.6, 86.6 * 0.01);
  RecordProperty("write_64_gbps", std::to_string(write));
  RecordProperty("read_64_gbps", std::to_string(read));
}

// The same through pcie-bench's own configuration of P7: Gen3 x8, MPS 256, MRRS 512, completions
// at MPS, with tags and credits enough that only the link limits. Published: the model's
// effective DMA bandwidth per transfer size.
struct P7Case {
  Pattern pattern;
  uint32_t size;
  double published_gbps;
};

class PcieWorkloadP7 : public ::testing::TestWithParam<P7Case> {};

TEST_P(PcieWorkloadP7, TheDmaWorkloadsReproducePcieBenchsGen3x8BandwidthsWithin1Percent_P7) {
  const P7Case c = GetParam();
  sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  apply_override(p, "pcie.lanes=8");
  apply_override(p, "pcie.completion_bytes=256");
  apply_override(p, "hca.max_outstanding_reads=4096");
  apply_override(p, "pcie.rc_nonposted_hdr_credits=4096");
  apply_override(p, "pcie.rc_posted_hdr_credits=4096");
  apply_override(p, "pcie.rc_posted_data_credits=65536");
  const double got = run_dma(p, dma(c.pattern, c.size, 20000)).dma_bandwidth_gbps;
  EXPECT_NEAR(got, c.published_gbps, c.published_gbps * 0.01);
  RecordProperty("modeled_gbps", std::to_string(got));
}

INSTANTIATE_TEST_SUITE_P(
    Gen3x8, PcieWorkloadP7,
    ::testing::Values(P7Case{Pattern::kPcieWrite, 64, 42.1}, P7Case{Pattern::kPcieRead, 64, 44.1},
                      P7Case{Pattern::kPcieWrite, 256, 52.9}, P7Case{Pattern::kPcieRead, 256, 53.7},
                      P7Case{Pattern::kPcieWrite, 1024, 52.9}, P7Case{Pattern::kPcieRead, 1024, 53.7}),
    [](const ::testing::TestParamInfo<P7Case>& i) {
      return std::string(i.param.pattern == Pattern::kPcieWrite ? "Write" : "Read") + std::to_string(i.param.size) + "B";
    });

TEST(ModelDma, ReadTagsBoundTheReadBandwidthByLittlesLaw) {
  sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  apply_override(p, "hca.max_outstanding_reads=16");
  const RunResult r = run_dma(p, dma(Pattern::kPcieRead, 64, 4000));
  // Expect: 16 reads in flight, each holding its tag for one read's latency: 16 x 64 B per latency.
  const double bound = 16.0 * 64 * 8 / (static_cast<double>(r.dma_latency.count()) * 1e-12) / 1e9;
  EXPECT_NEAR(r.dma_bandwidth_gbps, bound, bound * 0.01);
  EXPECT_LT(use(r, "pcie_down").busy.count(), r.elapsed.count() / 2);  // the link is far from full
  apply_override(p, "hca.max_outstanding_reads=32");
  EXPECT_GT(run_dma(p, dma(Pattern::kPcieRead, 64, 4000)).dma_bandwidth_gbps, r.dma_bandwidth_gbps * 1.9);
}

TEST(ModelDma, LargeWritesFillTheUpLinkAndBusiestSaysSo) {
  const sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  const RunResult r = run_dma(p, dma(Pattern::kPcieWrite, 4096));
  const Bottleneck b = busiest(r);
  EXPECT_EQ(b.name, "pcie_up@0");
  EXPECT_GT(b.utilization, 0.99);
  EXPECT_LE(b.utilization, 1.0);
  const double tlp_layer = sim::derive_timing(p).pcie_tlp_gbps;
  // Expect: MWrs of 256 payload bytes carry 256 of every 280 wire bytes at the TLP-layer rate.
  EXPECT_NEAR(r.dma_bandwidth_gbps, tlp_layer * 256 / 280, tlp_layer * 0.005);
}

TEST(ModelDma, BadTransfersAreRefusedAndTheJsonNamesLatencyAndBandwidth) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  EXPECT_TRUE(validate(dma(Pattern::kPcieRead, (1u << 20) + 1)).has_value());
  EXPECT_TRUE(validate(dma(Pattern::kPcieWrite, 0)).has_value());
  EXPECT_TRUE(validate(dma(Pattern::kPcieWrite, 64, 0)).has_value());
  EXPECT_THROW(run_dma(p, dma(Pattern::kPcieRead, 0)), std::invalid_argument);
  Workload w = dma(Pattern::kPcieRead, 256, 300);
  const std::vector<ModelPoint> a = run_model(p, w, std::nullopt, std::nullopt, nullptr);
  const std::vector<ModelPoint> b = run_model(p, w, std::nullopt, std::nullopt, nullptr);
  const ModelReport ra{&p, &w, nullptr, nullptr, a};
  const ModelReport rb{&p, &w, nullptr, nullptr, b};
  const std::string json = format_model_json(ra);
  EXPECT_EQ(json, format_model_json(rb));  // Expect: the same run prints the same bytes
  EXPECT_NE(json.find("\"dma_latency_ns\""), std::string::npos);
  EXPECT_NE(json.find("\"dma_bandwidth_gbps\""), std::string::npos);
  EXPECT_NE(format_model_table(ra).find("DMA Gb/s"), std::string::npos);
}

TEST(ModelBusiest, ACoreIsCountedAloneNotTheThreadsSummed) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  Workload w;
  w.qps = 4;
  w.threads = 4;
  w.messages = 20000;
  RunOptions replay;
  replay.replay = true;
  const RunResult r = run_closed_loop(p, w, replay);
  ASSERT_EQ(r.cpu.size(), 4u);
  Picoseconds sum{0};
  for (const CpuUse& c : r.cpu) {
    EXPECT_EQ(c.host, 0u);
    EXPECT_LE(c.busy, r.elapsed);  // Expect: no core is busier than the run is long
    sum += c.busy;
  }
  EXPECT_EQ(sum, r.cpu_busy);
  EXPECT_GT(sum, r.elapsed);  // four posting cores: summed, they would read over 100%
  const Bottleneck b = busiest(r);
  EXPECT_LE(b.utilization, 1.0);
  EXPECT_FALSE(b.name.empty());
  // Expect: the ping-pong's two hosts each have a core.
  Workload pp;
  pp.pattern = Pattern::kPingPong;
  pp.messages = 32;
  const RunResult ping = run_pingpong(p, pp);
  ASSERT_EQ(ping.cpu.size(), 2u);
  EXPECT_EQ(cpu_name(ping.cpu[1]), "cpu0@1");
  EXPECT_GT(ping.cpu[1].busy, Picoseconds(0));
}

TEST(ModelBusiest, MoreCoresTurnACpuBoundStreamIntoAPcieBoundOne) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  Workload w;
  w.size_bytes = 64;
  w.inline_data = true;
  w.postlist = 4;
  w.signal_period = 8;
  w.qps = 16;
  w.messages = 100000;
  RunOptions replay;
  replay.replay = true;
  w.threads = 1;
  const RunResult one = run_closed_loop(p, w, replay);
  w.threads = 8;
  const RunResult eight = run_closed_loop(p, w, replay);
  // Expect: one posting core is saturated and sets the rate.
  EXPECT_EQ(busiest(one).name, "cpu0@0");
  EXPECT_GT(busiest(one).utilization, 0.99);
  // Expect: with eight, the rate is the link's: the WQE reads' completions fill PCIe downstream,
  // and no core is full.
  EXPECT_EQ(busiest(eight).name, "pcie_down@0");
  EXPECT_GT(busiest(eight).utilization, 0.99);
  for (const CpuUse& c : eight.cpu) EXPECT_LT(c.busy, eight.elapsed);
  EXPECT_GT(eight.message_rate, one.message_rate * 3);
  // Expect: threads beyond the profile's cores are refused.
  w.threads = 16;
  sim::MachineProfile few = p;
  apply_override(few, "cpu.cores=8");
  EXPECT_THROW(run_closed_loop(few, w, replay), std::invalid_argument);
}

}  // namespace
}  // namespace softhca::tools
