// The many-host workloads (issue 20): an incast makes the receiver's switch egress the bottleneck
// and holds the senders back by link-level credits; an all-to-all whose hosts all start with the
// same peer queues at the switch's egresses, where the shifted order does not; every host's
// packets and PCIe TLPs are what the byte model (P6) and the transports' rules say for its
// messages. Expected counts are derived from the profile's MPS, MRRS and completion size, and
// the bottlenecks from which link physics says carries the most.
#include <gtest/gtest.h>

#include <string>

#include "sim/timing_params.h"
#include "tools/model_profile.h"
#include "tools/model_sweep.h"
#include "tools/model_workload.h"

namespace softhca::tools {
namespace {

constexpr uint32_t kDown = 0, kUp = 1;                        // HostTraffic::tlps' first index
constexpr uint32_t kPosted = 0, kNonPosted = 1, kCompletion = 2;  // its second

const sim::ResourceUse& use(const RunResult& r, std::string_view name, uint32_t host) {
  for (const sim::ResourceUse& u : r.resources) {
    if (u.name == name && u.host == host) return u;
  }
  throw std::logic_error("no resource " + std::string(name));
}

Picoseconds queued_at_egresses(const RunResult& r) {
  Picoseconds sum{0};
  for (const sim::ResourceUse& u : r.resources) {
    if (u.name == "switch_egress") sum += u.queued;
  }
  return sum;
}

bool on_the_fabric(std::string_view resource) {
  return resource.starts_with("ib_port@") || resource.starts_with("switch_egress@");
}

Workload fanout(Pattern pattern, uint32_t hosts, uint64_t messages) {
  Workload w;
  w.pattern = pattern;
  w.hosts = hosts;
  w.size_bytes = 4096;  // one packet at the profiles' 4096-byte MTU (W4)
  w.messages = messages;
  w.queue_depth = 16;
  return w;
}

TEST(ModelIncast, FourSendersToOneMakeItsSwitchEgressTheBottleneckAndEachSenderGetsAQuarter) {
  const sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  const uint64_t n = 60;
  const RunResult r = run_fanout(p, fanout(Pattern::kIncast, 5, n));
  EXPECT_EQ(r.messages, 4 * n);
  // Expect: the link into host 0 carries every sender's data: it is the busiest resource, busy
  // nearly all the run; each sender's port carries a quarter of those bytes, exactly.
  const Bottleneck b = busiest(r);
  EXPECT_EQ(b.name, "switch_egress@0");
  EXPECT_GT(b.utilization, 0.9);
  const Picoseconds egress = use(r, "switch_egress", 0).busy;
  for (uint32_t s = 1; s <= 4; ++s) EXPECT_EQ(use(r, "ib_port", s).busy * 4, egress) << s;
  EXPECT_EQ(use(r, "ib_port", 0).operations, 4 * n);  // its ACKs, one per request packet (RC)
}

TEST(ModelIncast, EveryHostMakesThePacketsAndTlpsItsMessagesNeed_P6) {
  const sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  const uint64_t n = 40;
  const RunResult r = run_fanout(p, fanout(Pattern::kIncast, 4, n));
  ASSERT_EQ(r.traffic.size(), 4u);
  const uint64_t size = 4096;
  const uint64_t payload_mrd = size / p.pcie.mrrs_bytes;        // 8 reads of MRRS bytes
  const uint64_t payload_cpld = size / p.pcie.completion_bytes;  // answered in 32 completions
  const uint64_t payload_mwr = size / p.pcie.mps_bytes;          // written in 16 MWr of MPS
  for (uint32_t s = 1; s < 4; ++s) {
    const HostTraffic& t = r.traffic[s];
    EXPECT_EQ(t.messages_sent, n);
    EXPECT_EQ(t.messages_received, 0u);
    // Expect: one request packet per message (one MTU), one ACK back each.
    EXPECT_EQ(t.packets_sent, n);
    EXPECT_EQ(t.packets_received, n);
    // Expect per message: a doorbell and the WQE's and payload's completions down; the WQE read,
    // the payload reads and the CQE up (every WR signaled).
    EXPECT_EQ(t.tlps[kDown][kPosted], n);
    EXPECT_EQ(t.tlps[kDown][kCompletion], n * (1 + payload_cpld));
    EXPECT_EQ(t.tlps[kUp][kNonPosted], n * (1 + payload_mrd));
    EXPECT_EQ(t.tlps[kUp][kPosted], n);
    EXPECT_EQ(t.tlps[kDown][kNonPosted], 0u);
  }
  const HostTraffic& recv = r.traffic[0];
  EXPECT_EQ(recv.messages_received, 3 * n);
  EXPECT_EQ(recv.packets_received, 3 * n);
  EXPECT_EQ(recv.packets_sent, 3 * n);
  // Expect: an RDMA WRITE's responder only writes the payload: no read, no CQE, no doorbell.
  EXPECT_EQ(recv.tlps[kUp][kPosted], 3 * n * payload_mwr);
  EXPECT_EQ(recv.tlps[kUp][kNonPosted], 0u);
  EXPECT_EQ(recv.tlps[kDown][kPosted] + recv.tlps[kDown][kCompletion], 0u);
}

TEST(ModelIncast, SmallSwitchBuffersHoldTheSendersBackWithoutSlowingTheBottleneck) {
  sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  const Workload w = fanout(Pattern::kIncast, 5, 60);
  const RunResult big = run_fanout(p, w);
  p.sw.input_buffer_bytes = 2 * (4096 + 128);  // two packets' credits per input port
  const RunResult small = run_fanout(p, w);
  // Expect: with credits for two packets the senders' packets wait at their own ports (the
  // switch's input buffers are full while the egress drains them), longer than with 64 KiB.
  Picoseconds wait_small{0};
  Picoseconds wait_big{0};
  for (uint32_t s = 1; s <= 4; ++s) {
    wait_small += use(small, "ib_port", s).queued;
    wait_big += use(big, "ib_port", s).queued;
  }
  EXPECT_GT(wait_small, wait_big);
  // Expect: the egress still has a packet to send whenever it is free: the same bottleneck.
  EXPECT_EQ(busiest(small).name, "switch_egress@0");
  EXPECT_GT(busiest(small).utilization, 0.9);
}

TEST(ModelIncast, UdSendersGetNoAcksAndTheReceiverSendsNothing) {
  const sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  Workload w = fanout(Pattern::kIncast, 4, 30);
  w.transport = Transport::kUd;
  w.op = Operation::kSend;
  const RunResult r = run_fanout(p, w);
  for (uint32_t s = 1; s < 4; ++s) {
    EXPECT_EQ(r.traffic[s].packets_sent, 30u);
    EXPECT_EQ(r.traffic[s].packets_received, 0u);
  }
  EXPECT_EQ(r.traffic[0].packets_received, 90u);
  EXPECT_EQ(r.traffic[0].packets_sent, 0u);
  // Expect: a SEND makes the receiver write a receive CQE per message (a posted MWr of 64 bytes
  // next to the payload's).
  EXPECT_GT(r.traffic[0].tlps[kUp][kPosted], 90u * 16);
}

TEST(ModelAllToAll, EveryHostSendsToAndHearsFromEveryOther) {
  const sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  const uint32_t hosts = 6;
  const uint64_t n = 5;
  const RunResult r = run_fanout(p, fanout(Pattern::kAllToAll, hosts, n));
  EXPECT_EQ(r.messages, hosts * (hosts - 1) * n);
  for (uint32_t h = 0; h < hosts; ++h) {
    const HostTraffic& t = r.traffic[h];
    EXPECT_EQ(t.messages_sent, (hosts - 1) * n);
    EXPECT_EQ(t.messages_received, (hosts - 1) * n);
    // Expect: its requests and the ACKs of what it received, out; the same in.
    EXPECT_EQ(t.packets_sent, 2 * (hosts - 1) * n);
    EXPECT_EQ(t.packets_received, 2 * (hosts - 1) * n);
  }
}

TEST(ModelAllToAll, HostsStartingWithTheSamePeerQueueAtTheSwitchAndTheShiftedOrderDoesNot) {
  // PCIe twice as wide as the IB link: the fabric, not the host, limits an all-to-all.
  sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  p.pcie.lanes = 32;
  Workload w = fanout(Pattern::kAllToAll, 8, 20);
  const RunResult linear = run_fanout(p, w);
  w.shifted = true;
  const RunResult shifted = run_fanout(p, w);
  // Expect: in ascending order every host first sends to the same peer, whose egress queues them;
  // shifted, each egress is fed by one input at a time.
  EXPECT_GT(queued_at_egresses(linear), queued_at_egresses(shifted));
  EXPECT_GT(queued_at_egresses(linear), 0_ns);
  EXPECT_GE(linear.elapsed, shifted.elapsed);
  // Expect: the bottleneck is a link of the fabric (a port or an egress), not PCIe or a CPU.
  EXPECT_TRUE(on_the_fabric(busiest(linear).name)) << busiest(linear).name;
  EXPECT_TRUE(on_the_fabric(busiest(shifted).name)) << busiest(shifted).name;
}

TEST(ModelAllToAll, TheSameRunGivesTheSameTimes) {
  const sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  const Workload w = fanout(Pattern::kAllToAll, 5, 4);
  const RunResult a = run_fanout(p, w);
  const RunResult b = run_fanout(p, w);
  EXPECT_EQ(a.elapsed, b.elapsed);
  ASSERT_EQ(a.resources.size(), b.resources.size());
  for (size_t i = 0; i < a.resources.size(); ++i) {
    EXPECT_EQ(a.resources[i].busy, b.resources[i].busy);
    EXPECT_EQ(a.resources[i].queued, b.resources[i].queued);
  }
}

TEST(ModelIncast, AnIncastOfOneSenderIsTheStreamBetweenTwoHosts) {
  const sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  Workload w = fanout(Pattern::kIncast, 2, 100);
  const RunResult incast = run_fanout(p, w);
  w.pattern = Pattern::kStream;
  w.hosts = 2;
  const RunResult stream = run_closed_loop(p, w);
  // Expect: host 1 sending to host 0 is host 0 sending to host 1, mirrored: the same times.
  EXPECT_EQ(incast.elapsed, stream.elapsed);
  EXPECT_EQ(use(incast, "switch_egress", 0).busy, use(stream, "switch_egress", 1).busy);
}

TEST(ModelFanout, BadHostCountsAndOptionsAreRefused) {
  Workload w = fanout(Pattern::kAllToAll, 1, 1);
  EXPECT_TRUE(validate(w).has_value());
  w.hosts = 257;
  EXPECT_TRUE(validate(w).has_value());
  w.hosts = 4;
  EXPECT_FALSE(validate(w).has_value());
  w.qps = 2;
  EXPECT_TRUE(validate(w).has_value());
  w.qps = 1;
  w.pattern = Pattern::kStream;
  EXPECT_TRUE(validate(w).has_value());  // a stream runs between two hosts
  sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  p.sw.hops = 0;
  EXPECT_THROW(run_fanout(p, fanout(Pattern::kIncast, 3, 1)), std::invalid_argument);
}

}  // namespace
}  // namespace softhca::tools
