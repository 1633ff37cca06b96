// The timing model's fabric with more than two hosts, on hand-made packet chains: a packet goes
// transmit unit, its port's output queue, the switch egress's output queue, the receive unit;
// egresses serialize what several inputs send them, in arrival order; a port sends only with the
// credits of the buffer at the other end (IB link-level flow control, 64-byte blocks), which come
// back credit_update after that buffer passed the packet on. Expected times are derived from the
// profile's parameters, never copied from a run.
#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "sim/machine_profile.h"
#include "sim/timing_model.h"

namespace softhca::sim {
namespace {

constexpr uint32_t kBytes = 4096 + 30;  // an RC WRITE-only packet of 4 KiB (W1, W6)

Step packet(uint8_t from, uint16_t to, uint32_t bytes = kBytes) {
  Step s;
  s.kind = StepKind::kPacket;
  s.host = from;
  s.index = to;
  s.bytes = bytes;
  return s;
}

Picoseconds ib_ser(const TimingParams& p, uint32_t bytes) {
  return Picoseconds(static_cast<int64_t>((uint64_t{bytes} * p.ib_fs_per_byte + 999) / 1000));
}

const ResourceUse& use_of(const std::vector<ResourceUse>& all, std::string_view name, uint32_t host) {
  for (const ResourceUse& u : all) {
    if (u.name == name && u.host == host) return u;
  }
  throw std::out_of_range("no such resource");
}

class TimingFabricTest : public ::testing::Test {
 protected:
  // One packet from `from` to `to` alone on a model of `hosts` hosts; its times.
  StepTimes lone(uint32_t hosts, uint8_t from, uint16_t to) {
    Scheduler sched;
    TimingModel m(sched, derive_timing(profile), hosts);
    ChainBuilder c;
    c.add(packet(from, to));
    std::vector<StepTimes> t;
    m.submit(c, 0_ns, nullptr, &t);
    m.run();
    return t[0];
  }

  MachineProfile profile;  // thunderx2-cx4-edr defaults: one switch, 90 ns hop (W7)
};

TEST_F(TimingFabricTest, ALonePacketAmongManyHostsTakesWhatItTakesBetweenTwo) {
  // Expect: stage by stage (three hosts) or all at once (two), the same transmit unit, port,
  // cut-through egress and receive unit: the same times.
  const StepTimes two = lone(2, 0, 1);
  const StepTimes three = lone(3, 0, 1);
  EXPECT_EQ(three.start, two.start);
  EXPECT_EQ(three.done, two.done);
  EXPECT_EQ(three.arrive, two.arrive);
  const TimingParams p = derive_timing(profile);
  const Picoseconds tx = p.hca_unit[static_cast<size_t>(HcaUnit::kTx)];
  const Picoseconds rx = p.hca_unit[static_cast<size_t>(HcaUnit::kRx)];
  // Expect: tx, the head's cable and hop, the egress's serialization, the cable, rx.
  EXPECT_EQ(three.done, tx + p.cable + p.switch_hop + ib_ser(p, kBytes) + p.cable + rx);
}

TEST_F(TimingFabricTest, TwoInputsSendingToOneHostAreSerializedByItsSwitchEgress) {
  const TimingParams p = derive_timing(profile);
  Scheduler sched;
  TimingModel m(sched, p, 3);
  ChainBuilder a;
  a.add(packet(1, 0));
  ChainBuilder b;
  b.add(packet(2, 0));
  std::vector<StepTimes> ta;
  std::vector<StepTimes> tb;
  m.submit(a, 0_ns, nullptr, &ta);
  m.submit(b, 0_ns, nullptr, &tb);
  m.run();
  const Picoseconds ser = ib_ser(p, kBytes);
  // Expect: both heads reach egress 0 at the same time; the first chain's goes first, the second
  // waits one whole serialization in the egress's queue and arrives that much later.
  EXPECT_EQ(tb[0].done - ta[0].done, ser);
  const std::vector<ResourceUse> use = m.resource_use();
  EXPECT_EQ(use_of(use, "switch_egress", 0).queued, ser);
  EXPECT_EQ(use_of(use, "switch_egress", 0).operations, 2u);
  EXPECT_EQ(use_of(use, "ib_port", 1).queued, 0_ns);
  EXPECT_EQ(use_of(use, "ib_port", 2).queued, 0_ns);
}

TEST_F(TimingFabricTest, APortWithoutCreditsWaitsUntilTheSwitchInputBufferHasPassedThePacketOn) {
  // An input buffer of one packet (65 blocks of 64 bytes hold 4,126 bytes); a host port sends two
  // packets back to back, to two different hosts.
  profile.sw.input_buffer_bytes = 4096 + 128;
  const TimingParams p = derive_timing(profile);
  Scheduler sched;
  TimingModel m(sched, p, 3);
  ChainBuilder a;
  a.add(packet(0, 1));
  ChainBuilder b;
  b.add(packet(0, 2));
  std::vector<StepTimes> ta;
  std::vector<StepTimes> tb;
  m.submit(a, 0_ns, nullptr, &ta);
  m.submit(b, 0_ns, nullptr, &tb);
  m.run();
  const Picoseconds ser = ib_ser(p, kBytes);
  const Picoseconds tx = p.hca_unit[static_cast<size_t>(HcaUnit::kTx)];
  const Picoseconds rx = p.hca_unit[static_cast<size_t>(HcaUnit::kRx)];
  const Picoseconds head = p.cable + p.switch_hop;
  // Expect: the first leaves its port at tx and the switch at tx + head + ser; its credits come
  // back credit_update later, and only then may the second leave the port (not at tx + ser).
  const Picoseconds first_out = tx + head + ser;
  const Picoseconds second_port = first_out + p.credit_update;
  EXPECT_EQ(ta[0].done, first_out + p.cable + rx);
  EXPECT_EQ(tb[0].done, second_port + head + ser + p.cable + rx);
  // Expect: the port's queue held the second from its transmit unit's end (2 tx) to then.
  EXPECT_EQ(use_of(m.resource_use(), "ib_port", 0).queued, second_port - 2 * tx);
}

TEST_F(TimingFabricTest, WithBuffersOfAFewPacketsAPortStillRunsAtLineRate) {
  // Four packets' worth of credits cover the credit loop (head, serialization, update): a port
  // sending 20 packets to three hosts in turn is never held back.
  profile.sw.input_buffer_bytes = 4 * (4096 + 128);
  const TimingParams p = derive_timing(profile);
  Scheduler sched;
  TimingModel m(sched, p, 4);
  std::vector<std::vector<StepTimes>> t(20);
  for (uint32_t k = 0; k < 20; ++k) {
    ChainBuilder c;
    c.add(packet(0, static_cast<uint16_t>(1 + k % 3)));
    m.submit(c, 0_ns, nullptr, &t[k]);
  }
  m.run();
  const Picoseconds ser = ib_ser(p, kBytes);
  // Expect: packet k leaves the port at tx + k ser (the transmit unit is faster than the port).
  for (uint32_t k = 1; k < 20; ++k) EXPECT_EQ(t[k][0].done - t[k - 1][0].done, ser) << k;
  EXPECT_EQ(t[19][0].done, t[0][0].done + 19 * ser);
  EXPECT_EQ(use_of(m.resource_use(), "ib_port", 0).busy, 20 * ser);
}

TEST_F(TimingFabricTest, InAnIncastTheReceiversEgressIsBusyAllTheTimeAndTheSendersAFraction) {
  // Four senders, 25 packets each, all posted at once to host 0 (small input buffers: senders are
  // held back by credits while the egress drains).
  profile.sw.input_buffer_bytes = 2 * (4096 + 128);
  const TimingParams p = derive_timing(profile);
  Scheduler sched;
  TimingModel m(sched, p, 5);
  std::vector<std::vector<StepTimes>> t(100);
  for (uint32_t k = 0; k < 100; ++k) {
    ChainBuilder c;
    c.add(packet(static_cast<uint8_t>(1 + k % 4), 0));
    m.submit(c, 0_ns, nullptr, &t[k]);
  }
  m.run();
  const Picoseconds ser = ib_ser(p, kBytes);
  Picoseconds first{Picoseconds::max()};
  Picoseconds last{0};
  for (const auto& v : t) {
    first = std::min(first, v[0].done);
    last = std::max(last, v[0].done);
  }
  // Expect: the egress to host 0 sends one packet after another: 99 serializations between the
  // first arrival and the last, and every sender's port carried its 25 packets.
  EXPECT_EQ(last - first, 99 * ser);
  const std::vector<ResourceUse> use = m.resource_use();
  EXPECT_EQ(use_of(use, "switch_egress", 0).busy, 100 * ser);
  for (uint32_t h = 1; h <= 4; ++h) {
    EXPECT_EQ(use_of(use, "ib_port", h).busy, 25 * ser);
    EXPECT_EQ(use_of(use, "ib_port", h).operations, 25u);
    // Expect: backpressure: each sender's packets waited at its own port for credits.
    EXPECT_GT(use_of(use, "ib_port", h).queued, 0_ns);
  }
}

TEST_F(TimingFabricTest, MoreThanTwoHostsNeedASwitch) {
  profile.sw.hops = 0;
  Scheduler sched;
  EXPECT_THROW(TimingModel(sched, derive_timing(profile), 3), std::invalid_argument);
  EXPECT_NO_THROW(TimingModel(sched, derive_timing(profile), 2));
  profile.sw.hops = 1;
  EXPECT_THROW(TimingModel(sched, derive_timing(profile), 257), std::invalid_argument);
}

TEST_F(TimingFabricTest, ABufferSmallerThanAPacketIsRefused) {
  profile.sw.input_buffer_bytes = 4096;
  EXPECT_TRUE(validate(profile).has_value());
  profile.sw.input_buffer_bytes = 4096 + 128;
  EXPECT_FALSE(validate(profile).has_value());
}

}  // namespace
}  // namespace softhca::sim
