// The device's internal loopback (Device::set_internal_loopback, docs/live-mode.md): packets to
// its own LID go to the receive side as fields, never serialised; WRITEs and SENDs go express. Each test runs one workload
// twice — on the wire (every packet through the port, every TLP reported one by one) and looped
// back inside (nothing through the port, TLPs reported as runs) — and expects the same packet
// counters, the same PCIe counters, the same completions and the same bytes in memory.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "hca/device.h"
#include "loopback_bench.h"
#include "runtime/stats_json.h"

namespace softhca {
namespace {

using test::CqeSeen;
using test::Loopback;
using hwif::WqeOpcode;

// Counts TLP by TLP (a sink that also traces would need that): the reference for runs.
class PerTlpCounters final : public pcie::TlpSink {
 public:
  void on_tlp(const pcie::Tlp& tlp) override { counters.on_tlp(tlp); }
  pcie::Counters counters;
};

struct Outcome {
  hca::DeviceStats stats;
  std::string pcie_json;
  std::string qps_json;  // every QP's counters (packets, bytes, NAKs, ...) as the stats dump has them
  std::vector<CqeSeen> cqes0, cqes1;
  std::vector<uint8_t> memory;
  size_t packets_through_port = 0;
};

// Both QPs on one device, connected through its own LID; `work` posts on the bench.
Outcome run(bool internal, const std::function<void(Loopback&, hca::Device&)>& work,
            hwif::QpType type = hwif::QpType::kRc) {
  Loopback lb(type);
  PerTlpCounters per_tlp;
  pcie::TlpSink& sink = internal ? static_cast<pcie::TlpSink&>(lb.counters()) : per_tlp;
  hca::Device dev(hca::default_device_config(0), sink, lb, lb);
  dev.set_internal_loopback(internal);
  lb.create(dev, 0, 0);
  lb.create(dev, 1, 0);
  lb.connect(dev);
  for (size_t i = 0; i < 16 * 1024; ++i) lb.buf()[i] = static_cast<uint8_t>(i * 7 + 1);
  const pcie::CounterSnapshot before = (internal ? lb.counters() : per_tlp.counters).snapshot();
  Outcome o;
  work(lb, dev);
  o.packets_through_port = lb.queued();
  lb.pump(dev);
  o.stats = dev.stats();
  o.qps_json = runtime::qp_stats_json(dev.region()).dump();
  o.pcie_json = ((internal ? lb.counters() : per_tlp.counters).snapshot() - before).to_json();
  o.cqes0 = lb.take_cqes(0);
  o.cqes1 = lb.take_cqes(1);
  o.memory.assign(lb.buf(), lb.buf() + Loopback::kBufBytes);
  return o;
}

void expect_same(const Outcome& wire, const Outcome& inside) {
  EXPECT_GT(wire.packets_through_port, 0u);
  EXPECT_EQ(inside.packets_through_port, 0u);  // Expect: nothing left through the port
  EXPECT_EQ(inside.stats.packets_sent, wire.stats.packets_sent);
  EXPECT_EQ(inside.stats.packets_received, wire.stats.packets_received);
  EXPECT_EQ(inside.stats.bytes_sent, wire.stats.bytes_sent);
  EXPECT_EQ(inside.stats.bytes_received, wire.stats.bytes_received);
  EXPECT_EQ(inside.stats.acks_sent, wire.stats.acks_sent);
  EXPECT_EQ(inside.stats.naks_sent, wire.stats.naks_sent);
  EXPECT_EQ(inside.stats.cqes_written, wire.stats.cqes_written);
  EXPECT_EQ(inside.stats.total_dropped(), wire.stats.total_dropped());
  EXPECT_EQ(inside.pcie_json, wire.pcie_json);
  EXPECT_EQ(inside.qps_json, wire.qps_json);
  ASSERT_EQ(inside.cqes0.size(), wire.cqes0.size());
  for (size_t i = 0; i < wire.cqes0.size(); ++i) {
    EXPECT_EQ(inside.cqes0[i].opcode, wire.cqes0[i].opcode);
    EXPECT_EQ(inside.cqes0[i].syndrome, wire.cqes0[i].syndrome);
    EXPECT_EQ(inside.cqes0[i].wqe_counter, wire.cqes0[i].wqe_counter);
  }
  ASSERT_EQ(inside.cqes1.size(), wire.cqes1.size());
  for (size_t i = 0; i < wire.cqes1.size(); ++i) {
    EXPECT_EQ(inside.cqes1[i].opcode, wire.cqes1[i].opcode);
    EXPECT_EQ(inside.cqes1[i].syndrome, wire.cqes1[i].syndrome);
    EXPECT_EQ(inside.cqes1[i].wqe_counter, wire.cqes1[i].wqe_counter);
  }
  EXPECT_TRUE(inside.memory == wire.memory);
}

// The workload run both ways, checked the same (expect_same()).
struct BothWays {
  Outcome wire, inside;
};
BothWays run_both_ways(const std::function<void(Loopback&, hca::Device&)>& work,
                       hwif::QpType type = hwif::QpType::kRc) {
  BothWays b{run(false, work, type), run(true, work, type)};
  expect_same(b.wire, b.inside);
  return b;
}

TEST(InternalLoopback, AThreePacketWriteIsCountedAsOnTheWireAndLandsInOneCopy) {
  // 3000 bytes at a 1024-byte path MTU: first, middle, last; one ACK.
  const auto work = [](Loopback& lb, hca::Device& dev) { lb.post(dev, 0, WqeOpcode::kRdmaWrite, 3000, 100, 20000); };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.packets_sent, 4u);  // Expect: 3 requests + 1 ACK
  EXPECT_EQ(inside.stats.acks_sent, 1u);
  EXPECT_EQ(wire.stats.express_writes, 0u);
  EXPECT_EQ(inside.stats.express_writes, 1u);  // Expect: placed at once, as a whole
  ASSERT_EQ(inside.cqes0.size(), 1u);
  EXPECT_EQ(std::memcmp(inside.memory.data() + 20000, inside.memory.data() + 100, 3000), 0);
}

TEST(InternalLoopback, ABurstOfWritesReadsAndAtomicsCompletesInOrderWithTheSameCounts) {
  // Eight WQEs, READ responses and atomic ACKs among the ACKs. Looped back, each doorbell runs to
  // completion before the next WQE is posted (on the wire all are posted first), so no WQE reads
  // memory another one writes: the result is the same either way.
  const auto work = [](Loopback& lb, hca::Device& dev) {
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 8, 0, 30000);
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 2048, 64, 31000);
    lb.post(dev, 0, WqeOpcode::kRdmaRead, 1500, 40000, 200);
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 8, 8, 30008);
    lb.post(dev, 0, WqeOpcode::kAtomicFa, 8, 48000, 5200, 3);
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 1024, 4096, 34000);
    lb.post(dev, 1, WqeOpcode::kRdmaWrite, 100, 6000, 50000);
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 0, 0, 30000);
  };
  const auto [wire, inside] = run_both_ways(work);
  ASSERT_EQ(inside.cqes0.size(), 7u);
  for (size_t i = 0; i < inside.cqes0.size(); ++i) {
    EXPECT_EQ(inside.cqes0[i].syndrome, 0u) << "WQE " << i;
    if (i > 0) {
      EXPECT_GT(inside.cqes0[i].wqe_counter, inside.cqes0[i - 1].wqe_counter);  // Expect: in order
    }
  }
}

TEST(InternalLoopback, APostListOfUnsignaledWritesIsAckedAndCountedAsOnTheWire) {
  // 32 single-packet WRITEs behind one doorbell, only the last signaled: on the wire 32 requests
  // and 32 ACKs. Looped back, the requester takes a run of queued ACKs at once (the last one
  // acknowledges them all); the counters must not show it.
  constexpr int kList = 32;
  const auto work = [](Loopback& lb, hca::Device& dev) {
    for (int i = 0; i < kList; ++i)
      lb.post(dev, 0, WqeOpcode::kRdmaWrite, 8, 8 * i, 30000 + 8 * i, 0, /*signaled=*/i == kList - 1, /*ring=*/false);
    lb.ring(dev, 0);
  };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.packets_sent, 2u * kList);  // Expect: 32 requests + 32 ACKs
  EXPECT_EQ(inside.stats.acks_sent, static_cast<uint64_t>(kList));
  EXPECT_EQ(inside.stats.express_writes, static_cast<uint64_t>(kList));
  ASSERT_EQ(inside.cqes0.size(), 1u);
  EXPECT_EQ(inside.cqes0[0].wqe_counter, kList - 1);
  EXPECT_EQ(std::memcmp(inside.memory.data() + 30000, inside.memory.data(), 8 * kList), 0);
}

TEST(InternalLoopback, AWriteToAnInvalidRkeyIsNakedAndFailsAsOnTheWire) {
  const auto work = [](Loopback& lb, hca::Device& dev) {
    // Beyond the memory key's end: the responder refuses it with a remote access NAK.
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 64, 0, Loopback::kBufBytes - 8);
  };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.naks_sent, 1u);
  EXPECT_EQ(inside.stats.express_writes, 0u);  // Expect: refused, so it took the packet path
  ASSERT_EQ(inside.cqes0.size(), 1u);
  EXPECT_EQ(inside.cqes0[0].opcode, hwif::CqeOpcode::kReqErr);
}

TEST(InternalLoopback, AWriteWhoseDoorbellEndsInALocalErrorIsFlushedAndItsAckDroppedAsOnTheWire) {
  // One doorbell: a good WRITE, then one whose local buffer runs past its memory key. The second
  // fails before any ACK comes back, so the QP is in error when the first one's ACK arrives: that
  // ACK is dropped and the first WRITE completes with a flush, as on the wire.
  const auto work = [](Loopback& lb, hca::Device& dev) {
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 64, 0, 90000, 0, /*signaled=*/true, /*ring=*/false);
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 64, Loopback::kBufBytes - 8, 91000, 0, /*signaled=*/true, /*ring=*/false);
    lb.ring(dev, 0);
  };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.express_writes, 1u);
  EXPECT_EQ(inside.stats.dropped[static_cast<size_t>(hca::DropReason::kUnknownQp)], 1u);  // Expect: the ACK
  ASSERT_EQ(inside.cqes0.size(), 2u);
  EXPECT_NE(inside.cqes0[0].syndrome, 0u);  // Expect: flushed, not a success
  EXPECT_NE(inside.cqes0[1].syndrome, 0u);
}

TEST(InternalLoopback, AWriteOfAHundredPacketsAsksForAnAckInsideTheMessageAsOnTheWire) {
  // 100 packets at a 1024-byte MTU: the 64th asks for an ACK too (every 64 packets), so 2 ACKs.
  const auto work = [](Loopback& lb, hca::Device& dev) { lb.post(dev, 0, WqeOpcode::kRdmaWrite, 100 * 1024, 0, 128 * 1024); };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.packets_sent, 102u);
  EXPECT_EQ(inside.stats.acks_sent, 2u);
  EXPECT_EQ(inside.stats.express_writes, 1u);
  EXPECT_EQ(std::memcmp(inside.memory.data() + 128 * 1024, inside.memory.data(), 100 * 1024), 0);
}

TEST(InternalLoopback, AWriteLongerThanTheWindowTakesThePacketPathWithTheSameOutcome) {
  // 140 packets: more than the 128 PSNs the requester keeps in flight, so never placed at once.
  const auto work = [](Loopback& lb, hca::Device& dev) { lb.post(dev, 0, WqeOpcode::kRdmaWrite, 140 * 1024, 0, 160 * 1024); };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.express_writes, 0u);
  ASSERT_EQ(inside.cqes0.size(), 1u);
  EXPECT_EQ(inside.cqes0[0].syndrome, 0u);
}

TEST(InternalLoopback, AWriteBehindAQueuedReadRequestWaitsItsTurn) {
  // One doorbell for a READ and a WRITE: the READ request is still queued when the WRITE runs, so
  // the WRITE goes behind it as packets (requests keep their order), with the wire's outcome.
  const auto work = [](Loopback& lb, hca::Device& dev) {
    lb.post(dev, 0, WqeOpcode::kRdmaRead, 512, 60000, 2000, 0, /*signaled=*/true, /*ring=*/false);
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 512, 2000, 70000, 0, /*signaled=*/true, /*ring=*/false);
    lb.ring(dev, 0);
  };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.express_writes, 0u);
  ASSERT_EQ(inside.cqes0.size(), 2u);
  EXPECT_EQ(inside.cqes0[1].syndrome, 0u);
}

TEST(InternalLoopback, RunsOfSmallWritesAmongOtherWorkAreCountedAsOnTheWire) {
  // Small WRITEs, inline and from one SGE, run together (SendPipeline::run_writes); a 3-packet
  // WRITE, a READ, and an inline WQE that wraps the ring's end each break the run and take their
  // own path. Three doorbells, the later two going around the 64-block ring: the last doorbell's
  // eighth WQE (3 blocks from block 62) wraps its end.
  const auto work = [](Loopback& lb, hca::Device& dev) {
    lb.post_inline_write(dev, 0, 8, 0, 100000, false, false);
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 8, 8, 100008, 0, false, false);
    lb.post_inline_write(dev, 0, 40, 16, 100016, true, false);  // two basic blocks
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 1000, 100, 101000, 0, false, false);
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 3000, 2000, 103000, 0, false, false);  // 3 packets
    lb.post_inline_write(dev, 0, 8, 56, 100056, false, false);
    lb.post(dev, 0, WqeOpcode::kRdmaRead, 512, 110000, 6000, 0, false, false);
    lb.post_inline_write(dev, 0, 8, 64, 100064, false, false);
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 8, 72, 100072, 0, true, false);
    lb.ring(dev, 0);
    lb.pump(dev);
    for (int i = 0; i < 31; ++i) lb.post_inline_write(dev, 0, 20, 200 + 20 * i, 120000 + 20 * i, i % 7 == 0, false);
    lb.ring(dev, 0);
    lb.pump(dev);
    for (int i = 0; i < 15; ++i) lb.post_inline_write(dev, 0, 100, 1000 + 100 * i, 130000 + 100 * i, i == 14, false);
    lb.ring(dev, 0);
  };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.express_writes, 52u);  // Expect: all but the two WRITEs behind the READ
  ASSERT_EQ(inside.cqes0.size(), 8u);
  for (const CqeSeen& c : inside.cqes0) EXPECT_EQ(c.syndrome, 0u);
  const uint8_t* m = inside.memory.data();
  EXPECT_EQ(std::memcmp(m + 100000, m, 80), 0);
  EXPECT_EQ(std::memcmp(m + 101000, m + 100, 1000), 0);
  EXPECT_EQ(std::memcmp(m + 103000, m + 2000, 3000), 0);
  EXPECT_EQ(std::memcmp(m + 6000, m + 110000, 512), 0);
  EXPECT_EQ(std::memcmp(m + 120000, m + 200, 620), 0);
  EXPECT_EQ(std::memcmp(m + 130000, m + 1000, 1500), 0);
}

TEST(InternalLoopback, ARunThatMeetsABadRemoteKeyStopsThereAsOnTheWire) {
  // Three small WRITEs go as a run; the fourth's target lies beyond the key (a NAK, the QP fails),
  // and the two after it are flushed.
  const auto work = [](Loopback& lb, hca::Device& dev) {
    for (int i = 0; i < 3; ++i) lb.post_inline_write(dev, 0, 8, 8 * i, 100000 + 8 * i, true, false);
    lb.post_inline_write(dev, 0, 8, 0, Loopback::kBufBytes - 4, true, false);
    for (int i = 0; i < 2; ++i) lb.post(dev, 0, WqeOpcode::kRdmaWrite, 8, 8 * i, 100100 + 8 * i, 0, true, false);
    lb.ring(dev, 0);
  };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.express_writes, 3u);
  EXPECT_EQ(inside.stats.naks_sent, 1u);
  ASSERT_EQ(inside.cqes0.size(), 6u);
  EXPECT_EQ(inside.cqes0[3].syndrome, static_cast<uint8_t>(hwif::CqeSyndrome::kRemAccessErr));
}

TEST(InternalLoopback, ARunThatMeetsABadLocalBufferStopsThereAsOnTheWire) {
  // The third WRITE gathers past its local key: a local protection error, found when it is
  // prepared; the first two went as a run and their ACK is dropped by the failed QP.
  const auto work = [](Loopback& lb, hca::Device& dev) {
    for (int i = 0; i < 2; ++i) lb.post(dev, 0, WqeOpcode::kRdmaWrite, 8, 8 * i, 100000 + 8 * i, 0, true, false);
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 64, Loopback::kBufBytes - 8, 100100, 0, true, false);
    lb.post_inline_write(dev, 0, 8, 0, 100200, true, false);
    lb.ring(dev, 0);
  };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.express_writes, 2u);
  ASSERT_EQ(inside.cqes0.size(), 4u);
  EXPECT_EQ(inside.cqes0[2].syndrome, static_cast<uint8_t>(hwif::CqeSyndrome::kLocProtErr));
}

// Whether the memory of `o` holds at `to` the `len` bytes it holds at `from`.
bool copied(const Outcome& o, size_t to, size_t from, size_t len) {
  return std::memcmp(o.memory.data() + to, o.memory.data() + from, len) == 0;
}

// ---- SENDs ----------------------------------------------------------------------------------------

TEST(InternalLoopback, ASendIntoAPostedReceiveIsPlacedWholeAndCountedAsOnTheWire) {
  // 3000 bytes at a 1024-byte MTU: three packets, one ACK; the receive WQE and doorbell record
  // are read once, the receive CQE written once.
  const auto work = [](Loopback& lb, hca::Device& dev) {
    lb.post_recv(1, 4096, 200000);
    lb.post(dev, 0, WqeOpcode::kSend, 3000, 100, 0);
  };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.packets_sent, 4u);  // Expect: 3 requests + 1 ACK
  EXPECT_EQ(wire.stats.express_sends, 0u);
  EXPECT_EQ(inside.stats.express_sends, 1u);
  ASSERT_EQ(inside.cqes1.size(), 1u);
  EXPECT_EQ(inside.cqes1[0].opcode, hwif::CqeOpcode::kRespSend);
  ASSERT_EQ(inside.cqes0.size(), 1u);
  EXPECT_EQ(inside.cqes0[0].syndrome, 0u);
  EXPECT_TRUE(copied(inside, 200000, 100, 3000));
}

TEST(InternalLoopback, APostListOfSendsTakesOneReceiveEachAsOnTheWire) {
  // Twelve SENDs (some with an immediate, one empty) behind one doorbell into twelve receives
  // posted at once: one doorbell-record read for all of them, twelve receive CQEs in order.
  constexpr int kList = 12;
  const auto work = [](Loopback& lb, hca::Device& dev) {
    for (int i = 0; i < kList; ++i) lb.post_recv(1, 256, 210000 + 256 * i);
    for (int i = 0; i < kList; ++i) {
      const WqeOpcode op = i % 3 == 1 ? WqeOpcode::kSendImm : WqeOpcode::kSend;
      lb.post(dev, 0, op, i == 5 ? 0 : 8 + 16 * i, 64 * i, 0, 0, /*signaled=*/i == kList - 1, /*ring=*/false);
    }
    lb.ring(dev, 0);
  };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.express_sends, static_cast<uint64_t>(kList));
  ASSERT_EQ(inside.cqes1.size(), static_cast<size_t>(kList));
  for (int i = 0; i < kList; ++i) {
    EXPECT_EQ(inside.cqes1[i].wqe_counter, i);
    EXPECT_EQ(inside.cqes1[i].opcode, i % 3 == 1 ? hwif::CqeOpcode::kRespSendImm : hwif::CqeOpcode::kRespSend);
  }
  EXPECT_TRUE(copied(inside, 210000 + 256 * 11, 64 * 11, 8 + 16 * 11));
}

TEST(InternalLoopback, ASendWithNoReceivePostedIsRnrNakedThenDeliveredAsOnTheWire) {
  // Nothing posted: the doorbell record is read (counted once), the SEND takes the packet path
  // and is RNR NAKed; once a receive is posted, the resend after the RNR timer lands.
  const auto work = [](Loopback& lb, hca::Device& dev) {
    lb.post(dev, 0, WqeOpcode::kSend, 64, 300, 0);
    lb.pump(dev);
    lb.post_recv(1, 128, 220000);
    lb.tick(dev, Picoseconds(int64_t{1'000'000'000}));  // the resend is left queued for run()
  };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.rnr_naks_sent, 1u);
  EXPECT_EQ(inside.stats.express_sends, 0u);  // Expect: neither the first try nor the resend
  ASSERT_EQ(inside.cqes1.size(), 1u);
  EXPECT_EQ(inside.cqes1[0].syndrome, 0u);
  ASSERT_EQ(inside.cqes0.size(), 1u);
  EXPECT_EQ(inside.cqes0[0].syndrome, 0u);
  EXPECT_TRUE(copied(inside, 220000, 300, 64));
}

TEST(InternalLoopback, ASendLongerThanItsReceiveFailsBothSidesAsOnTheWire) {
  // 200 bytes into a 100-byte receive: a local length error on the receive, a NAK (invalid
  // request), and the sender's WQE fails with a remote invalid request error.
  const auto work = [](Loopback& lb, hca::Device& dev) {
    lb.post_recv(1, 100, 230000);
    lb.post(dev, 0, WqeOpcode::kSend, 200, 0, 0);
  };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.express_sends, 0u);
  EXPECT_EQ(inside.stats.naks_sent, 1u);
  ASSERT_EQ(inside.cqes1.size(), 1u);
  EXPECT_EQ(inside.cqes1[0].syndrome, static_cast<uint8_t>(hwif::CqeSyndrome::kLocLenErr));
  ASSERT_EQ(inside.cqes0.size(), 1u);
  EXPECT_EQ(inside.cqes0[0].syndrome, static_cast<uint8_t>(hwif::CqeSyndrome::kRemInvReqErr));
}

TEST(InternalLoopback, ASendIntoAReceiveWithABadKeyFailsAsOnTheWire) {
  // The receive's buffer runs past its key: the first SEND is not placed express (the key does
  // not open the buffer) and fails with the receive's local protection error; the next is flushed.
  const auto work = [](Loopback& lb, hca::Device& dev) {
    lb.post_recv(1, 4096, Loopback::kBufBytes - 64);
    lb.post_recv(1, 64, 240000);
    lb.post(dev, 0, WqeOpcode::kSend, 1000, 0, 0, 0, true, false);
    lb.post(dev, 0, WqeOpcode::kSend, 8, 0, 0, 0, true, false);
    lb.ring(dev, 0);
  };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.express_sends, 0u);
  ASSERT_FALSE(inside.cqes1.empty());
  EXPECT_EQ(inside.cqes1[0].syndrome, static_cast<uint8_t>(hwif::CqeSyndrome::kLocProtErr));
  ASSERT_EQ(inside.cqes0.size(), 2u);
  EXPECT_NE(inside.cqes0[0].syndrome, 0u);
}

TEST(InternalLoopback, SendsAndWritesInterleavedInOneDoorbellAreCountedAsOnTheWire) {
  // WRITEs (one SGE and inline) and SENDs (one SGE, with and without an immediate) in one post
  // list, each going express in turn; no WQE reads what another writes (on the wire every WQE is
  // read before any lands, looped back each lands first: which bytes such a SEND carried would
  // differ, as it may on hardware).
  const auto work = [](Loopback& lb, hca::Device& dev) {
    lb.post_recv(1, 512, 250000);
    lb.post_recv(1, 512, 251000);
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 256, 1000, 5000, 0, false, false);
    lb.post(dev, 0, WqeOpcode::kSend, 256, 6000, 0, 0, false, false);
    lb.post_inline_write(dev, 0, 16, 2000, 7000, false, false);
    lb.post(dev, 0, WqeOpcode::kSendImm, 300, 8000, 0, 0, true, false);
    lb.ring(dev, 0);
  };
  const auto [wire, inside] = run_both_ways(work);
  EXPECT_EQ(inside.stats.express_sends, 2u);
  EXPECT_EQ(inside.stats.express_writes, 2u);
  ASSERT_EQ(inside.cqes1.size(), 2u);
  EXPECT_EQ(inside.cqes1[1].opcode, hwif::CqeOpcode::kRespSendImm);
  EXPECT_TRUE(copied(inside, 5000, 1000, 256));
  EXPECT_TRUE(copied(inside, 250000, 6000, 256));
  EXPECT_TRUE(copied(inside, 7000, 2000, 16));
  EXPECT_TRUE(copied(inside, 251000, 8000, 300));
}

// ---- UC ---------------------------------------------------------------------------------------

TEST(InternalLoopback, UcWritesAndSendsArePlacedWholeAndCountedAsOnTheWireWithNoAcks) {
  // A multi-packet WRITE, inline and SGE WRITEs, SENDs with and without an immediate: no ACK on
  // either side, each WQE complete once sent.
  const auto work = [](Loopback& lb, hca::Device& dev) {
    lb.post_recv(1, 4096, 260000);
    lb.post_recv(1, 64, 265000);
    lb.post(dev, 0, WqeOpcode::kRdmaWrite, 3000, 100, 20000, 0, true, false);
    lb.post_inline_write(dev, 0, 24, 4000, 24000, false, false);
    lb.post(dev, 0, WqeOpcode::kSend, 2500, 5000, 0, 0, true, false);
    lb.post(dev, 0, WqeOpcode::kSendImm, 8, 9000, 0, 0, true, false);
    lb.ring(dev, 0);
  };
  const auto [wire, inside] = run_both_ways(work, hwif::QpType::kUc);
  EXPECT_EQ(inside.stats.acks_sent, 0u);
  EXPECT_EQ(inside.stats.packets_sent, 3u + 1u + 3u + 1u);
  EXPECT_EQ(inside.stats.express_writes, 2u);
  EXPECT_EQ(inside.stats.express_sends, 2u);
  ASSERT_EQ(inside.cqes0.size(), 3u);
  ASSERT_EQ(inside.cqes1.size(), 2u);
  EXPECT_EQ(inside.cqes1[1].opcode, hwif::CqeOpcode::kRespSendImm);
  EXPECT_TRUE(copied(inside, 20000, 100, 3000));
  EXPECT_TRUE(copied(inside, 24000, 4000, 24));
  EXPECT_TRUE(copied(inside, 260000, 5000, 2500));
}

TEST(InternalLoopback, AUcSendWithNoReceiveIsDroppedAndTheNextOneLandsAsOnTheWire) {
  // No receive posted for the first SEND: UC drops it (counted) and completes the sender's WQE;
  // the second lands in the receive posted after it.
  const auto work = [](Loopback& lb, hca::Device& dev) {
    lb.post(dev, 0, WqeOpcode::kSend, 64, 0, 0);
    lb.pump(dev);
    lb.post_recv(1, 128, 270000);
    lb.post(dev, 0, WqeOpcode::kSend, 64, 64, 0);
  };
  const auto [wire, inside] = run_both_ways(work, hwif::QpType::kUc);
  EXPECT_EQ(inside.stats.dropped[static_cast<size_t>(hca::DropReason::kNoReceiveWqe)], 1u);
  EXPECT_EQ(inside.stats.express_sends, 1u);
  ASSERT_EQ(inside.cqes0.size(), 2u);
  ASSERT_EQ(inside.cqes1.size(), 1u);
  EXPECT_TRUE(copied(inside, 270000, 64, 64));
}

}  // namespace
}  // namespace softhca
