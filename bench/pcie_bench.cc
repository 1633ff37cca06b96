// Cost of counting PCIe transactions: what every doorbell, DMA read and DMA write pays in live
// mode on top of moving its bytes. Items are TLPs (on_tlp) or transfers (ports).
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>

#include "pcie/counters.h"
#include "pcie/device_port.h"
#include "pcie/host_port.h"
#include "pcie/pcie_config.h"

namespace softhca::pcie {
namespace {

// Host memory the "device" reads and writes: page-aligned, as large as the largest transfer.
constexpr size_t kMaxTransferBytes = 4096;
alignas(4096) std::array<uint8_t, kMaxTransferBytes> g_host_memory{};
uint64_t host_addr() { return reinterpret_cast<uintptr_t>(g_host_memory.data()); }

void BM_CountersOnTlp(benchmark::State& state) {
  Counters counters;
  const Tlp tlp{TlpType::kMWr, Direction::kUpstream, TlpCause::kCqeWrite, 0x1000, 64, 0, 88};
  for (auto _ : state) {
    counters.on_tlp(tlp);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CountersOnTlp);

void BM_CountersSnapshot(benchmark::State& state) {
  Counters counters;
  for (auto _ : state) benchmark::DoNotOptimize(counters.snapshot());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CountersSnapshot);

// A DMA read of range(0) <= kMaxTransferBytes bytes: split by MRRS and completion size, counted, then copied.
void BM_DevicePortDmaRead(benchmark::State& state) {
  Counters counters;
  const PcieConfig config;
  DevicePort port(counters, config);
  const auto len = static_cast<size_t>(state.range(0));
  std::array<uint8_t, kMaxTransferBytes> dst{};
  for (auto _ : state) {
    port.dma_read(host_addr(), dst.data(), len, TlpCause::kPayloadRead);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(len));
}
BENCHMARK(BM_DevicePortDmaRead)->Arg(8)->Arg(64)->Arg(512)->Arg(4096);

// A DMA write of range(0) <= kMaxTransferBytes bytes: split by MPS, counted, then copied.
void BM_DevicePortDmaWrite(benchmark::State& state) {
  Counters counters;
  const PcieConfig config;
  DevicePort port(counters, config);
  const auto len = static_cast<size_t>(state.range(0));
  std::array<uint8_t, kMaxTransferBytes> src{};
  src.fill(0x5a);
  for (auto _ : state) {
    port.dma_write(host_addr(), src.data(), len, TlpCause::kPayloadWrite);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(len));
}
BENCHMARK(BM_DevicePortDmaWrite)->Arg(8)->Arg(64)->Arg(4096);

class NullBar : public hwif::MmioTarget {
 public:
  void mmio_write(uint64_t, const void*, size_t) override {}
};

void BM_HostPortDoorbell(benchmark::State& state) {
  Counters counters;
  const PcieConfig config;
  NullBar bar;
  HostPort port(bar, counters, config);
  const uint64_t value = 0;
  for (auto _ : state) port.write_doorbell(0x1800, &value, TlpCause::kDoorbell);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HostPortDoorbell);

void BM_HostPortBlueFlame64(benchmark::State& state) {
  Counters counters;
  const PcieConfig config;
  NullBar bar;
  HostPort port(bar, counters, config);
  alignas(64) const std::array<uint8_t, 64> wqe{};
  for (auto _ : state) port.write_combined(0x1800, wqe.data(), wqe.size(), TlpCause::kBlueFlame);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HostPortBlueFlame64);

}  // namespace
}  // namespace softhca::pcie
