// The PCIe byte model and the timing model's link together reproduce the pcie-bench model's
// figures (Neugebauer et al., SIGCOMM 2018; figures.md P4, P7): a 64-byte DMA write costs 88 wire
// bytes, and streams of DMA writes and reads of one size reach the model's effective bandwidths on
// Gen3 x8 with MPS 256 and MRRS 512. The TLPs come from pcie::DevicePort, as in the device; the
// timing model serializes them at the TLP-layer rate (after encoding and DLLP overhead).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "pcie/counters.h"
#include "pcie/device_port.h"
#include "sim/link_rate.h"
#include "sim/timing_model.h"
#include "tools/model_workload.h"

namespace softhca {
namespace {

// Collects the TLPs of the transfers, as the recorder would.
class TlpList final : public pcie::TlpSink {
 public:
  void on_tlp(const pcie::Tlp& t) override { tlps.push_back(t); }
  std::vector<pcie::Tlp> tlps;
};

sim::MachineProfile gen3_x8() {
  sim::MachineProfile p;
  p.pcie.generation = 3;
  p.pcie.lanes = 8;
  p.pcie.mps_bytes = 256;
  p.pcie.mrrs_bytes = 512;
  // pcie-bench cuts read completions at MPS (its rcb_chunks = False).
  p.pcie.completion_bytes = 256;
  // Plenty of credits and tags: the link is what limits.
  p.pcie.rc_posted_hdr_credits = 1u << 20;
  p.pcie.rc_posted_data_credits = 1u << 20;
  p.pcie.rc_nonposted_hdr_credits = 1u << 20;
  p.hca.max_outstanding_reads = 4096;
  return p;
}

alignas(4096) std::array<uint8_t, 1 << 16> g_memory{};

// Effective bandwidth [Gb/s] of `count` back-to-back DMA writes (or reads) of `size` bytes.
double effective_gbps(bool write, uint32_t size, uint32_t count) {
  const sim::MachineProfile profile = gen3_x8();
  const pcie::PcieConfig config = tools::pcie_config_of(profile);
  TlpList sink;
  pcie::DevicePort port(sink, config);
  std::array<uint8_t, 4096> buf{};
  const auto base = reinterpret_cast<uintptr_t>(g_memory.data());
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t addr = base + (static_cast<uint64_t>(i) * size) % (g_memory.size() - 4096);
    if (write) {
      port.dma_write(addr, buf.data(), size, pcie::TlpCause::kPayloadWrite);
    } else {
      port.dma_read(addr, buf.data(), size, pcie::TlpCause::kPayloadRead);
    }
  }
  sim::Scheduler sched;
  const sim::TimingParams params = sim::derive_timing(profile);
  sim::TimingModel model(sched, params, 1);
  sim::ChainBuilder chain;
  uint32_t mrd = sim::kNoStep;
  for (const pcie::Tlp& t : sink.tlps) {
    sim::Step s;
    s.kind = sim::StepKind::kTlp;
    s.dir = t.dir == pcie::Direction::kUpstream ? sim::LinkDir::kUp : sim::LinkDir::kDown;
    s.tlp_class = t.type == pcie::TlpType::kMWr   ? sim::TlpClass::kPosted
                  : t.type == pcie::TlpType::kMRd ? sim::TlpClass::kNonPosted
                                                  : sim::TlpClass::kCompletion;
    s.bytes = t.wire_bytes;
    s.payload_bytes = t.payload_bytes;
    if (t.type == pcie::TlpType::kMRd) {
      mrd = chain.add(s);
    } else if (t.type == pcie::TlpType::kCplD) {
      chain.add(s, mrd);
    } else {
      chain.add(s);
    }
  }
  std::vector<sim::StepTimes> times;
  model.submit(chain, Picoseconds(0), nullptr, &times);
  model.run();
  // The data direction's link: busy from its first TLP's start to its last TLP's end.
  Picoseconds first = Picoseconds::max();
  Picoseconds last{0};
  for (size_t i = 0; i < sink.tlps.size(); ++i) {
    const bool data = write ? sink.tlps[i].type == pcie::TlpType::kMWr : sink.tlps[i].type == pcie::TlpType::kCplD;
    if (!data) continue;
    first = std::min(first, times[i].start);
    last = std::max(last, times[i].done);
  }
  const double seconds = static_cast<double>((last - first).count()) * 1e-12;
  return static_cast<double>(size) * count * 8 / seconds / 1e9;
}

TEST(PcieBandwidth, ASingle64ByteDmaWriteOnGen3x8Mps256Costs88WireBytes_P4) {
  pcie::Counters counters;
  const pcie::PcieConfig config = tools::pcie_config_of(gen3_x8());
  pcie::DevicePort port(counters, config);
  std::array<uint8_t, 64> data{};
  port.dma_write(reinterpret_cast<uintptr_t>(g_memory.data()), data.data(), data.size(), pcie::TlpCause::kPayloadWrite);
  const pcie::CounterSnapshot s = counters.snapshot();
  EXPECT_EQ(s.tlps(pcie::TlpType::kMWr, pcie::TlpCause::kPayloadWrite), 1u);
  EXPECT_EQ(s.wire_bytes(pcie::Direction::kUpstream), 88u);  // Expect: 64 + 16 header + 8 framing.
}

TEST(PcieBandwidth, TheLinkCarriesTlpsAt57_88GbpsOnGen3x8_P7) {
  const sim::TimingParams t = sim::derive_timing(gen3_x8());
  EXPECT_NEAR(t.pcie_raw_gbps, 63.02, 0.005);
  EXPECT_NEAR(t.pcie_tlp_gbps, 57.88, 0.005);
}

struct Case {
  bool write;
  uint32_t size;
  double expected_gbps;  // P7
};

class P7Sweep : public ::testing::TestWithParam<Case> {};

TEST_P(P7Sweep, DmaStreamsReachThePcieBenchEffectiveBandwidthWithin1Percent_P7) {
  const Case c = GetParam();
  const double got = effective_gbps(c.write, c.size, 20000);
  EXPECT_NEAR(got, c.expected_gbps, c.expected_gbps * 0.01) << (c.write ? "write " : "read ") << c.size << " B";
  RecordProperty("effective_gbps", std::to_string(got));
}

INSTANTIATE_TEST_SUITE_P(Gen3x8Mps256Mrrs512, P7Sweep,
                         ::testing::Values(Case{true, 64, 42.1}, Case{false, 64, 44.1}, Case{true, 256, 52.9},
                                           Case{false, 256, 53.7}, Case{true, 1024, 52.9}, Case{false, 1024, 53.7}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.write ? "Write" : "Read") + std::to_string(i.param.size) + "B";
                         });

}  // namespace
}  // namespace softhca
