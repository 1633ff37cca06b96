// The faulty link: the spec's syntax, what each fault does to a packet stream, that corruption is
// always caught by the receiver's ICRC check, and that a seed gives exactly the same faults.
#include "fabric/fault_injector.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "fabric/inproc_carrier.h"
#include "fabric/packet/packet.h"
#include "fabric/packet/roce.h"

namespace softhca::fabric {
namespace {

// A valid native RC SEND packet whose PSN (and first payload byte) is `n`, with `payload` bytes.
std::vector<uint8_t> packet(uint32_t n, size_t payload = 64, bool global = false) {
  PacketFields f;
  f.dlid = Lid(2);
  f.slid = Lid(1);
  f.opcode = BthOpcode::kRcSendOnly;
  f.dest_qp = Qpn(0x42);
  f.psn = Psn(n);
  if (global) f.grh = GrhFields{0, 0, 64, {}, {}};
  std::vector<uint8_t> body(payload, static_cast<uint8_t>(n));
  std::array<uint8_t, kMaxPacketBytes> out{};
  const size_t len = serialize(f, body, out);
  return {out.begin(), out.begin() + static_cast<ptrdiff_t>(len)};
}

uint32_t psn_of(std::span<const uint8_t> bytes) {
  PacketFields f;
  std::span<const uint8_t> payload;
  EXPECT_EQ(parse(bytes, f, payload), ParseStatus::kOk);
  return f.psn.value();
}

// Runs n packets (PSN 0..n-1) through an injector at time 0 and returns what came out, in order.
std::vector<std::vector<uint8_t>> run(FaultInjector& link, uint32_t n) {
  std::vector<std::vector<uint8_t>> got;
  const FaultInjector::Emit keep = [&](std::span<const uint8_t> p) { got.emplace_back(p.begin(), p.end()); };
  for (uint32_t i = 0; i < n; ++i) link.send(packet(i), Picoseconds(0), keep);
  link.release(Picoseconds::max(), keep);
  return got;
}

TEST(FaultSpec, TheIssuesExampleParses) {
  FaultSpec s;
  std::string error;
  ASSERT_TRUE(parse_fault_spec("loss=0.01,dup=0.005,reorder=0.01,corrupt=0.001,delay=50us,seed=7", s, error)) << error;
  EXPECT_DOUBLE_EQ(s.loss, 0.01);
  EXPECT_DOUBLE_EQ(s.dup, 0.005);
  EXPECT_DOUBLE_EQ(s.reorder, 0.01);
  EXPECT_DOUBLE_EQ(s.corrupt, 0.001);
  EXPECT_EQ(s.delay, Picoseconds(50'000'000));
  EXPECT_EQ(s.seed, 7u);
  EXPECT_TRUE(s.any());
  FaultSpec again;
  ASSERT_TRUE(parse_fault_spec(to_string(s), again, error)) << error;
  EXPECT_EQ(again, s);  // to_string() round-trips
}

TEST(FaultSpec, PercentagesUnitsAndEmptyItemsAreAccepted) {
  FaultSpec s;
  std::string error;
  ASSERT_TRUE(parse_fault_spec(" loss=1% , delay=2ms,,", s, error)) << error;
  EXPECT_DOUBLE_EQ(s.loss, 0.01);
  EXPECT_EQ(s.delay, Picoseconds(2'000'000'000));
  ASSERT_TRUE(parse_fault_spec("", s, error));
  EXPECT_FALSE(s.any());
}

TEST(FaultSpec, BadItemsAreRefusedWithTheirName) {
  FaultSpec s;
  std::string error;
  for (const char* bad : {"loss=2", "loss=-0.1", "loss", "dup=abc", "delay=50", "delay=5parsecs", "seed=-1", "jitter=1"}) {
    error.clear();
    EXPECT_FALSE(parse_fault_spec(bad, s, error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
  EXPECT_NE(error.find("jitter"), std::string::npos);
}

TEST(FaultInjector, WithNoFaultsEveryPacketPassesUnchangedAndInOrder) {
  FaultInjector link(FaultSpec{}, WireFormat::kNativeIb, "t");
  const auto got = run(link, 100);
  ASSERT_EQ(got.size(), 100u);
  for (uint32_t i = 0; i < 100; ++i) EXPECT_EQ(got[i], packet(i));
  EXPECT_EQ(link.counters(), (FaultCounters{100, 0, 0, 0, 0, 0}));
}

TEST(FaultInjector, LossOneDropsEverything) {
  FaultSpec s;
  s.loss = 1;
  FaultInjector link(s, WireFormat::kNativeIb, "t");
  EXPECT_TRUE(run(link, 50).empty());
  EXPECT_EQ(link.counters().lost, 50u);
}

TEST(FaultInjector, DupOneDeliversEachPacketTwiceBackToBack) {
  FaultSpec s;
  s.dup = 1;
  FaultInjector link(s, WireFormat::kNativeIb, "t");
  const auto got = run(link, 10);
  ASSERT_EQ(got.size(), 20u);
  for (uint32_t i = 0; i < 20; ++i) EXPECT_EQ(psn_of(got[i]), i / 2);
  EXPECT_EQ(link.counters().duplicated, 10u);
}

TEST(FaultInjector, AReorderedPacketArrivesBehindTheNextOne) {
  FaultSpec s;
  s.reorder = 1;  // every packet that finds the hold free is held: pairs swap
  FaultInjector link(s, WireFormat::kNativeIb, "t");
  const auto got = run(link, 6);
  ASSERT_EQ(got.size(), 6u);
  const std::vector<uint32_t> expected = {1, 0, 3, 2, 5, 4};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(psn_of(got[i]), expected[i]) << i;
  EXPECT_EQ(link.counters().reordered, 3u);
}

TEST(FaultInjector, AReorderedPacketWithNothingBehindItComesOutAfterTheHold) {
  FaultSpec s;
  s.reorder = 1;
  FaultInjector link(s, WireFormat::kNativeIb, "t");
  std::vector<uint32_t> got;
  const FaultInjector::Emit keep = [&](std::span<const uint8_t> p) { got.push_back(psn_of(p)); };
  link.send(packet(7), Picoseconds(1000), keep);
  EXPECT_TRUE(got.empty());  // Expect: held
  EXPECT_EQ(link.next_due(), Picoseconds(1000) + FaultInjector::kReorderHold);
  link.release(Picoseconds(1000) + FaultInjector::kReorderHold - Picoseconds(1), keep);
  EXPECT_TRUE(got.empty());  // Expect: not yet
  link.release(Picoseconds(1000) + FaultInjector::kReorderHold, keep);
  EXPECT_EQ(got, std::vector<uint32_t>{7});
  EXPECT_EQ(link.next_due(), Picoseconds::max());
}

TEST(FaultInjector, ADelayHoldsEveryPacketThatLongInOrder) {
  FaultSpec s;
  s.delay = 50_us;
  FaultInjector link(s, WireFormat::kNativeIb, "t");
  std::vector<uint32_t> got;
  const FaultInjector::Emit keep = [&](std::span<const uint8_t> p) { got.push_back(psn_of(p)); };
  link.send(packet(0), 0_us, keep);
  link.send(packet(1), 10_us, keep);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(link.next_due(), 50_us);
  link.release(55_us, keep);
  EXPECT_EQ(got, std::vector<uint32_t>{0});
  link.release(60_us, keep);
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(link.counters().delayed, 2u);
  EXPECT_EQ(link.held(), 0u);
}

// Every corrupted packet fails the receiver's ICRC check (not the VCRC, which the last hop
// recomputed), native and RoCEv2, local and global: a flip never lands where the ICRC is blind.
TEST(FaultInjector, EveryCorruptedPacketFailsTheIcrcCheck) {
  FaultSpec s;
  s.corrupt = 1;
  for (const bool global : {false, true}) {
    FaultInjector link(s, WireFormat::kNativeIb, global ? "g" : "l");
    for (uint32_t i = 0; i < 2000; ++i) {
      const std::vector<uint8_t> p = packet(i, i % 300, global);
      link.send(p, Picoseconds(0), [&](std::span<const uint8_t> out) {
        PacketFields f;
        std::span<const uint8_t> payload;
        EXPECT_NE(std::memcmp(out.data(), p.data(), p.size()), 0);
        EXPECT_EQ(parse(out, f, payload), ParseStatus::kBadIcrc) << "packet " << i;
      });
    }
    EXPECT_EQ(link.counters().corrupted, 2000u);
  }
  FaultInjector roce(s, WireFormat::kRoceIpv4, "r");
  for (uint32_t i = 0; i < 2000; ++i) {
    PacketFields f;
    f.has_lrh = false;
    f.grh = GrhFields{0, 0, 64, {}, {}};
    f.grh->sgid[10] = f.grh->dgid[10] = 0xff;
    f.grh->sgid[11] = f.grh->dgid[11] = 0xff;
    f.grh->sgid[12] = f.grh->dgid[12] = 10;
    f.grh->sgid[15] = 1;
    f.grh->dgid[15] = 2;
    f.opcode = BthOpcode::kRcSendOnly;
    f.dest_qp = Qpn(0x42);
    f.psn = Psn(i);
    std::vector<uint8_t> body(i % 300, 0x5a);
    std::array<uint8_t, kMaxRocePacketBytes> out{};
    const size_t len = serialize_roce(f, body, UdpPorts{kRoceSrcPortMin, kRoceV2UdpPort}, out);
    ASSERT_GT(len, 0u);
    roce.send(std::span<const uint8_t>(out.data(), len), Picoseconds(0), [&](std::span<const uint8_t> bad) {
      PacketFields g;
      std::span<const uint8_t> payload;
      UdpPorts ports;
      EXPECT_EQ(parse_roce(bad, g, payload, ports, kRoceV2UdpPort), ParseStatus::kBadIcrc) << "packet " << i;
    });
  }
  EXPECT_EQ(roce.counters().corrupted, 2000u);
}

// The issue's mix on 100,000 packets with seed 7: exact counts (they are a property of the seed and
// of four draws per packet), each near its expectation, and the same again from a second injector.
TEST(FaultInjector, TheSameSeedGivesExactlyTheSameFaults) {
  std::string error;
  FaultSpec s;
  ASSERT_TRUE(parse_fault_spec("loss=0.01,dup=0.005,reorder=0.01,corrupt=0.001,seed=7", s, error));
  FaultInjector a(s, WireFormat::kNativeIb, "inproc/lid2");
  FaultInjector b(s, WireFormat::kNativeIb, "inproc/lid2");
  const auto got_a = run(a, 100'000);
  const auto got_b = run(b, 100'000);
  EXPECT_EQ(got_a, got_b);
  const FaultCounters& c = a.counters();
  EXPECT_EQ(c, (FaultCounters{100'000, 986, 492, 968, 99, 0}));
  // Expectations 1000, 500, ~990 (a packet is held only when the hold is free), 100.
  EXPECT_EQ(got_a.size(), 100'000 - c.lost + c.duplicated);
  // Another seed, or another link name, gives other faults.
  s.seed = 8;
  FaultInjector other(s, WireFormat::kNativeIb, "inproc/lid2");
  run(other, 100'000);
  EXPECT_NE(other.counters(), c);
}

// The in-process carrier: each link (destination LID) has its own faults, and held packets wait
// for the carrier's clock.
class Sink final : public PacketReceiver {
 public:
  void deliver(std::span<const uint8_t> p) override { psns.push_back(psn_of(p)); }
  std::vector<uint32_t> psns;
};

TEST(InprocCarrierFaults, ADelayedPacketIsDeliveredByTheDrainAfterItsDueTime) {
  InprocCarrier carrier;
  Sink sink;
  carrier.attach(2, &sink);
  FaultSpec s;
  s.delay = 50_us;
  Picoseconds now{0};
  std::vector<Picoseconds> wakes;
  carrier.set_faults(s, {[&] { return now; }, [&](Picoseconds t) { wakes.push_back(t); }});
  carrier.send(packet(3));
  carrier.drain();
  EXPECT_TRUE(sink.psns.empty());  // Expect: held, and a wake-up asked for at 50 us
  ASSERT_FALSE(wakes.empty());
  EXPECT_EQ(wakes.front(), 50_us);
  now = 50_us;
  carrier.drain();
  EXPECT_EQ(sink.psns, std::vector<uint32_t>{3});
  EXPECT_EQ(carrier.fault_counters(2).delayed, 1u);
  EXPECT_EQ(carrier.fault_counters(9).offered, 0u);
}

}  // namespace
}  // namespace softhca::fabric
