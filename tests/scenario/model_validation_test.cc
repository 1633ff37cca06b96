// The timing model against published measurements (issue 20): pcie-bench's DMA read latency and
// DMA read/write bandwidth measured on an NFP6000 in a Broadwell Xeon E5-2630 v4 server
// (docs/published-figures.md P9, P10; profile nfp6000-bdw-e5-2630v4), each within 15%. The published numbers are the
// measurements themselves, typed in from the source; the profile's round trip and completion gap
// were fitted to the 64 and 2048-byte latencies (P9), every other point is a prediction.
#include <gtest/gtest.h>

#include <cmath>

#include "tools/model_profile.h"
#include "tools/model_workload.h"

namespace softhca::tools {
namespace {

constexpr double kTolerance = 0.15;  // issue 20: within 15%
constexpr const char* kProfile = "nfp6000-bdw-e5-2630v4";

struct Published {
  uint32_t size_bytes;
  double value;
};

// P9: LAT_DMA_RD, sequential, host-warm cache, 8 KB window, median [ns].
constexpr Published kReadLatencyNs[] = {{64, 546},   {128, 573},  {256, 626},  {512, 706}, {768, 773},
                                        {1024, 853}, {1280, 920}, {1520, 986}, {2048, 1133}};
// P10: BW_DMA_RD and BW_DMA_WR, random, host-warm cache, 8 KB window [Gb/s]. Below 256 bytes the
// NFP's DMA engine (62 M reads/s, 47 M writes/s) limits the rate, not PCIe: not compared.
constexpr Published kReadGbps[] = {{256, 47.670}, {512, 55.034}, {1024, 55.413}, {2048, 55.579}};
constexpr Published kWriteGbps[] = {{256, 50.488}, {512, 53.013}, {1024, 53.013}, {2048, 53.013}};

RunResult dma(const sim::MachineProfile& p, Pattern pattern, uint32_t size) {
  Workload w;
  w.pattern = pattern;
  w.size_bytes = size;
  w.messages = 400;
  return run_dma(p, w);
}

double ns(Picoseconds t) { return static_cast<double>(t.count()) / 1000.0; }
double error(double modeled, double published) { return std::abs(modeled - published) / published; }

TEST(ModelValidation, DmaReadLatencyMatchesPcieBenchOnAXeonE5_P9) {
  const sim::MachineProfile p = load_profile(kProfile);
  for (const Published& m : kReadLatencyNs) {
    const double modeled = ns(dma(p, Pattern::kPcieRead, m.size_bytes).dma_latency);
    EXPECT_LT(error(modeled, m.value), kTolerance) << m.size_bytes << " B: modeled " << modeled << " ns, published "
                                                   << m.value << " ns";
  }
}

TEST(ModelValidation, WithoutTheRootComplexsCompletionGapLargeReadsComeOutTooFast_P9) {
  sim::MachineProfile p = load_profile(kProfile);
  p.pcie.rc_completion_gap_ns = 0;
  // Expect: link serialization alone grows a 2048-byte read's latency by about half of what
  // pcie-bench measured, outside the tolerance; the 64-byte one (one completion) is unaffected.
  const double big = ns(dma(p, Pattern::kPcieRead, 2048).dma_latency);
  EXPECT_GT(error(big, 1133), kTolerance) << big;
  EXPECT_LT(big, 1133);
  const double small = ns(dma(p, Pattern::kPcieRead, 64).dma_latency);
  EXPECT_LT(error(small, 546), kTolerance) << small;
}

TEST(ModelValidation, DmaReadAndWriteBandwidthMatchPcieBenchOnAXeonE5_P10) {
  const sim::MachineProfile p = load_profile(kProfile);
  for (const Published& m : kReadGbps) {
    const double modeled = dma(p, Pattern::kPcieRead, m.size_bytes).dma_bandwidth_gbps;
    EXPECT_LT(error(modeled, m.value), kTolerance) << "read " << m.size_bytes << " B: modeled " << modeled;
  }
  for (const Published& m : kWriteGbps) {
    const double modeled = dma(p, Pattern::kPcieWrite, m.size_bytes).dma_bandwidth_gbps;
    EXPECT_LT(error(modeled, m.value), kTolerance) << "write " << m.size_bytes << " B: modeled " << modeled;
  }
}

}  // namespace
}  // namespace softhca::tools
