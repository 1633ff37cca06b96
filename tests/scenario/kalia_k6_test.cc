// Reference K6 (Kalia et al., ATC 2016; figures.md K1, K2, K5, K6): PCIe bytes from CPU to NIC for
// 10 WQEs of 65 bytes, written by BlueFlame versus rung with a doorbell and read by DMA, with
// their header accounting (26 B per request TLP, 22 B per completion, 128-byte completions).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "base/units.h"
#include "hwif/uar.h"
#include "pcie/counters.h"
#include "pcie/device_port.h"
#include "pcie/host_port.h"
#include "pcie/pcie_config.h"

namespace softhca::pcie {
namespace {

constexpr uint32_t kWqes = 10;
constexpr uint32_t kWqeBytes = 65;
// A 65-byte WQE spans two 64-byte basic blocks (K2): BlueFlame writes both lines, and in the ring
// it occupies 128 bytes.
constexpr uint64_t kWqeLines = ceil_div(kWqeBytes, 64);
constexpr uint64_t kWqeSlotBytes = kWqeLines * 64;

class NullBar : public hwif::MmioTarget {
 public:
  void mmio_write(uint64_t, const void*, size_t len) override { bytes += len; }
  uint64_t bytes = 0;
};

TEST(KaliaK6, TenWqesOf65BytesWrittenByBlueFlameCost1800BytesTowardsTheNic) {
  Counters counters;
  const PcieConfig config = kalia_atc16_config();
  NullBar bar;
  HostPort host(bar, counters, config);
  alignas(64) std::array<uint8_t, kWqeSlotBytes> wqe{};
  for (uint32_t i = 0; i < kWqes; ++i) {
    host.write_combined(hwif::uar_page_offset(0) + hwif::bfreg_offset(1), wqe.data(), wqe.size(),
                        TlpCause::kBlueFlame);
  }
  const CounterSnapshot s = counters.snapshot();
  // Expect: 10 x ceil(65/64) x (64 + 26) = 1800.
  EXPECT_EQ(s.tlps(TlpType::kMWr, TlpCause::kBlueFlame), kWqes * kWqeLines);
  EXPECT_EQ(s.wire_bytes(Direction::kDownstream), 1800u);
  EXPECT_EQ(s.wire_bytes(Direction::kUpstream), 0u);
  EXPECT_EQ(bar.bytes, kWqes * kWqeSlotBytes);
}

TEST(KaliaK6, ADoorbellThenADmaReadOfTenWqesCosts1534BytesTowardsTheNic) {
  Counters counters;
  const PcieConfig config = kalia_atc16_config();
  NullBar bar;
  HostPort host(bar, counters, config);
  DevicePort device(counters, config);
  alignas(4096) static std::array<uint8_t, kWqes * kWqeSlotBytes> ring{};
  std::array<uint8_t, kWqes * kWqeSlotBytes> fetched{};
  const uint64_t doorbell = 0;
  host.write_doorbell(hwif::uar_page_offset(0) + hwif::bfreg_offset(1), &doorbell, TlpCause::kDoorbell);
  device.dma_read(reinterpret_cast<uintptr_t>(ring.data()), fetched.data(), fetched.size(),
                  TlpCause::kWqeRead);
  const CounterSnapshot s = counters.snapshot();
  // Expect: (8 + 26) + 10 x (128 + 22) = 1534: one completion of 128 B per WQE (K5).
  EXPECT_EQ(s.tlps(TlpType::kMWr, TlpCause::kDoorbell), 1u);
  EXPECT_EQ(s.tlps(TlpType::kCplD, TlpCause::kWqeRead), kWqes);
  EXPECT_EQ(s.wire_bytes(Direction::kDownstream), 1534u);
  // Not part of K6 (it counts CPU to NIC only): the read requests go up, 1280 B by MRRS 512.
  EXPECT_EQ(s.tlps(TlpType::kMRd, TlpCause::kWqeRead), 3u);
  EXPECT_EQ(s.wire_bytes(Direction::kUpstream), 3u * 26u);
}

}  // namespace
}  // namespace softhca::pcie
