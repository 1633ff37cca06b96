#include "pcie/device_port.h"

#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

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

// A payload write lands in address order as far as a poller can tell: a reader that sees a
// message's last byte sees every byte before it (Open MPI's eager RDMA polls a fragment's last
// byte, then reads its header). Messages of 9 B to 4 KiB (every copy strategy of the C library's
// memmove, some of which store the first bytes last), each with a fresh sequence number in its
// first and last 8 bytes and in its last byte; the reader checks each head it sees.
TEST(DevicePort, AReaderThatSeesAPayloadsLastByteSeesEveryByteBeforeIt) {
  Counters counters;
  PcieConfig config;
  DevicePort port(counters, config);
  constexpr size_t kMax = 4096;
  alignas(64) static std::array<uint8_t, kMax + 64> slot{};
  constexpr std::array<size_t, 8> kSizes{9, 16, 40, 100, 300, 777, 2100, kMax};
  constexpr int kRounds = 4000;
  std::atomic<uint64_t> torn{0};
  std::atomic<int> ready{0};  // the writer reset the slot for this round
  std::atomic<int> seen{0};   // the reader is done with this round
  std::thread reader([&] {
    for (int r = 1; r <= kRounds * static_cast<int>(kSizes.size()); ++r) {
      const size_t len = kSizes[static_cast<size_t>(r - 1) % kSizes.size()];
      const auto want = static_cast<uint8_t>(r);
      while (ready.load(std::memory_order_acquire) != r) {
      }
      // Round r's last byte is r mod 256; the reset left r - 1 there.
      while (std::atomic_ref<uint8_t>(slot[len - 1]).load(std::memory_order_acquire) != want) {
      }
      uint64_t head = 0;
      std::memcpy(&head, slot.data(), sizeof head);
      if (head != static_cast<uint64_t>(r)) torn.fetch_add(1, std::memory_order_relaxed);
      seen.store(r, std::memory_order_release);
    }
  });
  std::array<uint8_t, kMax> msg{};
  for (int r = 1; r <= kRounds * static_cast<int>(kSizes.size()); ++r) {
    const size_t len = kSizes[static_cast<size_t>(r - 1) % kSizes.size()];
    const auto seq = static_cast<uint64_t>(r);
    std::memset(msg.data(), 0xee, len);
    std::memcpy(msg.data(), &seq, sizeof seq);
    msg[len - 1] = static_cast<uint8_t>(r);
    while (seen.load(std::memory_order_acquire) != r - 1) {
    }
    // The slot's old contents: the head of a stale round, a last byte that is not yet this one's.
    const uint64_t stale = 0;
    std::memcpy(slot.data(), &stale, sizeof stale);
    std::atomic_ref<uint8_t>(slot[len - 1]).store(static_cast<uint8_t>(r - 1), std::memory_order_release);
    ready.store(r, std::memory_order_release);
    EXPECT_TRUE(port.dma_write(addr_of(slot.data()), msg.data(), len, TlpCause::kPayloadWrite));
  }
  reader.join();
  // Expect: no round where the reader saw the last byte before the head.
  EXPECT_EQ(torn.load(), 0u);
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

// The identity bridge in pieces of at most `piece` bytes, refusing one address range; records
// the vectors raised.
class PiecewiseBridge final : public HostBridge {
 public:
  std::span<uint8_t> map(uint64_t a, size_t len) override {
    ++calls;
    if (a >= refuse_lo && a < refuse_hi) return {};
    return identity.map(a, len < piece ? len : piece);
  }
  void deliver_msi(uint64_t v) override { vectors.push_back(v); }
  IdentityBridge identity;
  size_t piece = 64;
  uint64_t refuse_lo = 0, refuse_hi = 0;
  int calls = 0;
  std::vector<uint64_t> vectors;
};

TEST(DevicePort, ADmaIsResolvedPieceByPieceAndCountedAsOneTransfer) {
  Counters counters;
  PcieConfig config;  // MRRS 512, completions of 128
  PiecewiseBridge bridge;
  DevicePort port(counters, config, bridge);
  alignas(4096) static std::array<uint8_t, 512> src{};
  std::array<uint8_t, 512> dst{};
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 3);
  EXPECT_TRUE(port.dma_read(addr_of(src.data()), dst.data(), dst.size(), TlpCause::kPayloadRead));
  EXPECT_EQ(dst, src);
  EXPECT_EQ(bridge.calls, 8);  // Expect: 512 bytes in pieces of 64
  const auto s = counters.snapshot();
  EXPECT_EQ(s.tlps(TlpType::kMRd, TlpCause::kPayloadRead), 1u);  // Expect: the TLPs of one 512-byte read
  EXPECT_EQ(s.tlps(TlpType::kCplD, TlpCause::kPayloadRead), 4u);
  // A publishing write in pieces stores every byte, the last one last.
  alignas(64) static std::array<uint8_t, 128> cqe{};
  EXPECT_TRUE(port.dma_write_publish(addr_of(cqe.data()), src.data(), cqe.size(), TlpCause::kCqeWrite));
  EXPECT_EQ(std::memcmp(cqe.data(), src.data(), cqe.size()), 0);
}

TEST(DevicePort, AnAddressTheBridgeRefusesIsAFaultNotACrash) {
  Counters counters;
  PcieConfig config;
  PiecewiseBridge bridge;
  DevicePort port(counters, config, bridge);
  alignas(64) static std::array<uint8_t, 256> mem{};
  bridge.refuse_lo = addr_of(mem.data()) + 128;
  bridge.refuse_hi = addr_of(mem.data()) + 256;
  std::array<uint8_t, 256> buf{};
  buf.fill(0x5a);
  EXPECT_FALSE(port.dma_write(addr_of(mem.data()), buf.data(), buf.size(), TlpCause::kPayloadWrite));
  EXPECT_EQ(mem[127], 0x5a);  // Expect: the pieces before the fault were written
  EXPECT_FALSE(port.dma_read(addr_of(mem.data()) + 128, buf.data(), 8, TlpCause::kPayloadRead));
  EXPECT_FALSE(port.read_dbrec(addr_of(mem.data()) + 128, TlpCause::kDbRecRead, true).has_value());
  EXPECT_FALSE(port.atomic_fetch_add(addr_of(mem.data()) + 136, 1).has_value());
  EXPECT_FALSE(port.atomic_compare_swap(addr_of(mem.data()) + 136, 0, 1).has_value());
  EXPECT_EQ(port.atomic_fetch_add(addr_of(mem.data()) + 8, 5).value_or(99), 0x5a5a5a5a5a5a5a5aull);
  // The identity bridge maps no null address and no address of another process's slot.
  IdentityBridge identity;
  EXPECT_TRUE(identity.map(0, 8).empty());
  EXPECT_TRUE(identity.map(dma_address(1, addr_of(mem.data())), 8).empty());
}

TEST(DevicePort, AnInterruptIsOneFourByteMwrAndTheVectorGoesToTheBridge) {
  Counters counters;
  PcieConfig config;
  PiecewiseBridge bridge;
  DevicePort port(counters, config, bridge);
  port.raise_interrupt(42);
  EXPECT_EQ(counters.snapshot().tlps(TlpType::kMWr, TlpCause::kInterrupt), 1u);
  EXPECT_EQ(bridge.vectors, std::vector<uint64_t>{42});
}

TEST(IdentityBridge, AVectorIsTheSendingEndOfADatagramSocketPairAndRaisingItSendsOneDatagram) {
  int ends[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, ends), 0);
  IdentityBridge bridge;
  bridge.deliver_msi(static_cast<uint64_t>(ends[1]));
  bridge.deliver_msi(~uint64_t{0});  // Expect: "no vector" raises nothing and does not fail
  char buf[16];
  EXPECT_EQ(::recv(ends[0], buf, sizeof buf, MSG_DONTWAIT), 1);
  EXPECT_EQ(::recv(ends[0], buf, sizeof buf, MSG_DONTWAIT), -1);  // Expect: one datagram, no more
  EXPECT_EQ(errno, EAGAIN);
  ::close(ends[0]);
  ::close(ends[1]);
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

// Counts TLP by TLP, as a sink that looks at single TLPs would see them.
class PerTlpCounters final : public TlpSink {
 public:
  void on_tlp(const Tlp& tlp) override { counters.on_tlp(tlp); }
  Counters counters;
};

TEST(DevicePort, ABatchOfDmasCountsWhatEachDmaCountedOneByOneWould) {
  // DMAs at every alignment and size around the TLP boundaries (MPS 256, MRRS 512, completions
  // of 128): added up by a batch and held at once, against each one cut into its TLPs.
  PcieConfig config;
  Counters batched;
  PerTlpCounters one_by_one;
  DevicePort batch_port(batched, config);
  DevicePort reference(one_by_one, config);
  batch_port.defer_counts(true);
  ASSERT_TRUE(batch_port.batches_counts());
  DevicePort::DmaBatch batch = batch_port.batch();
  for (uint64_t addr = 0x10000 - 300; addr < 0x10000 + 300; addr += 7) {
    for (const uint64_t len : {1u, 8u, 64u, 127u, 128u, 129u, 255u, 256u, 257u, 511u, 512u, 513u, 4096u}) {
      batch.add_write(addr, len);
      batch.add_read(addr + 3, len);
      reference.count_write(addr, len, TlpCause::kPayloadWrite);
      reference.count_read(addr + 3, len, TlpCause::kPayloadRead);
    }
  }
  batch_port.hold_batch(batch, TlpCause::kPayloadRead, TlpCause::kPayloadWrite);
  batch_port.flush_counts();
  const CounterSnapshot want = one_by_one.counters.snapshot();
  EXPECT_GT(want.tlps(TlpType::kCplD, TlpCause::kPayloadRead), 0u);
  EXPECT_EQ(batched.snapshot().to_json(), want.to_json());
}

}  // namespace
}  // namespace softhca::pcie
