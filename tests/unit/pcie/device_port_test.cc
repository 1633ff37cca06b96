#include "pcie/device_port.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "pcie/counters.h"
#include "pcie/host_port.h"

namespace softhca::pcie {
namespace {

uint64_t addr_of(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(DevicePort, A64ByteDmaWriteOnMps256CostsOneMwrOf88WireBytes_P4) {
  Counters counters;
  PcieConfig config;  // MPS 256, 24-byte MWr overhead (P4)
  DevicePort port(counters, config);
  alignas(64) std::array<uint8_t, 64> dst{};
  std::array<uint8_t, 64> src{};
  src.fill(0xab);
  port.dma_write(addr_of(dst.data()), src.data(), src.size(), TlpCause::kCqeWrite);
  auto s = counters.snapshot();
  EXPECT_EQ(s.tlps(TlpType::kMWr, TlpCause::kCqeWrite), 1u);
  EXPECT_EQ(s.at(TlpType::kMWr, TlpCause::kCqeWrite).wire_bytes, 88u);
  EXPECT_EQ(dst, src);
}

TEST(DevicePort, AReadIsSplitByMrrsAndItsCompletionsByCompletionSize) {
  Counters counters;
  PcieConfig config;  // MRRS 512, completions of 128
  DevicePort port(counters, config);
  alignas(4096) static std::array<uint8_t, 2048> src{};
  std::array<uint8_t, 2048> dst{};
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i);
  port.dma_read(addr_of(src.data()), dst.data(), dst.size(), TlpCause::kPayloadRead);
  auto s = counters.snapshot();
  EXPECT_EQ(s.tlps(TlpType::kMRd, TlpCause::kPayloadRead), 4u);
  EXPECT_EQ(s.tlps(TlpType::kCplD, TlpCause::kPayloadRead), 16u);
  EXPECT_EQ(s.at(TlpType::kCplD, TlpCause::kPayloadRead).payload_bytes, 2048u);
  EXPECT_EQ(s.at(TlpType::kCplD, TlpCause::kPayloadRead).wire_bytes, 2048u + 16u * 20u);
  EXPECT_EQ(dst, src);
}

class RecordingBar : public hwif::MmioTarget {
 public:
  void mmio_write(uint64_t off, const void*, size_t len) override {
    last_offset = off;
    total += len;
  }
  uint64_t last_offset = 0;
  size_t total = 0;
};

TEST(HostPort, ABlueFlameWriteOf128BytesIsTwoWriteCombinedMwrs) {
  Counters counters;
  PcieConfig config;
  RecordingBar bar;
  HostPort port(bar, counters, config);
  std::array<uint8_t, 128> wqe{};
  port.write_combined(0x1a00, wqe.data(), wqe.size(), TlpCause::kBlueFlame);
  auto s = counters.snapshot();
  EXPECT_EQ(s.tlps(TlpType::kMWr, TlpCause::kBlueFlame), 2u);
  EXPECT_EQ(s.wire_bytes(Direction::kDownstream), 2u * (64u + 24u));
  EXPECT_EQ(bar.total, 128u);
  EXPECT_EQ(bar.last_offset, 0x1a00u);
}

}  // namespace
}  // namespace softhca::pcie
