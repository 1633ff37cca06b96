// The timing model's workloads beyond the RC stream (issue 20): a ping-pong's half round trip is
// the sum of its modeled steps, UC and UD streams make the packets and TLPs their wire rules say
// (W1), the same workload prints the same JSON byte for byte, a run's completion bookkeeping
// stays bounded however long it runs, receive WQE prefetch takes the WQE read off a SEND's path,
// and 16k QPs run.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/timing_params.h"
#include "tools/model_cli.h"
#include "tools/model_profile.h"
#include "tools/model_sweep.h"
#include "tools/model_tag_window.h"
#include "tools/model_workload.h"

namespace softhca::tools {
namespace {

constexpr uint32_t kLrh = 8, kGrh = 40, kBth = 12, kReth = 16, kDeth = 8, kIcrc = 4, kVcrc = 2;  // W1
constexpr uint32_t kMwrOverhead = 24;  // P4: 64-bit addresses, no ECRC

const sim::ResourceUse& use(const RunResult& r, std::string_view name, uint32_t host) {
  for (const sim::ResourceUse& u : r.resources) {
    if (u.name == name && u.host == host) return u;
  }
  throw std::logic_error("no resource " + std::string(name));
}

Picoseconds pcie_ser(const sim::TimingParams& t, uint64_t bytes) {
  return Picoseconds(static_cast<int64_t>((bytes * t.pcie_fs_per_byte + 999) / 1000));
}
Picoseconds ib_ser(const sim::TimingParams& t, uint64_t bytes) {
  return Picoseconds(static_cast<int64_t>(((bytes + t.ib_packet_overhead_bytes) * t.ib_fs_per_byte + 999) / 1000));
}

// One way of an inline BlueFlame RDMA WRITE ping-pong, by hand from the profile's rules
// (docs/timing-model.md "Resources and placement rules"): the post's CPU time, the BlueFlame line
// down PCIe, the HCA's doorbell and WQE units, the packet (transmit unit, cable, switch hop
// cut-through, serialization once, cable, receive unit), the payload MWr up to memory, and the
// peer's poll that sees the buffer's last byte.
Picoseconds write_one_way(const sim::MachineProfile& p, uint32_t size) {
  const sim::TimingParams t = sim::derive_timing(p);
  const auto unit = [&t](sim::HcaUnit u) { return t.hca_unit[static_cast<size_t>(u)]; };
  Picoseconds sum = t.post_call + t.wqe_build + t.inline_per_64b + t.blueflame_line;
  sum += pcie_ser(t, 64 + kMwrOverhead) + t.pcie_one_way;  // one 64-byte BlueFlame line (K2, K4)
  sum += unit(sim::HcaUnit::kDoorbell) + unit(sim::HcaUnit::kWqe);
  const uint32_t packet = kLrh + kBth + kReth + (size + 3) / 4 * 4 + kIcrc + kVcrc;  // W1, W2, W6
  sum += unit(sim::HcaUnit::kTx) + t.cable + t.switch_hop + ib_ser(t, packet) + t.cable + unit(sim::HcaUnit::kRx);
  sum += pcie_ser(t, size + kMwrOverhead) + t.pcie_one_way;
  sum += t.poll + t.poll_cqe;
  return sum;
}

Workload pingpong(Operation op, uint32_t size) {
  Workload w;
  w.pattern = Pattern::kPingPong;
  w.op = op;
  w.size_bytes = size;
  w.messages = 64;
  return w;
}

TEST(ModelPingPong, AnInlineBlueFlameWriteHalfRoundTripIsTheSumOfItsOneWaySteps) {
  for (const char* name : {"thunderx2-cx4-edr", "x86-gen3-cx4-edr"}) {
    SCOPED_TRACE(name);
    const sim::MachineProfile p = load_profile(name);
    Workload w = pingpong(Operation::kWrite, 8);
    w.inline_data = true;
    w.blueflame = driver::BlueFlameMode::kPrefer;
    const RunResult r = run_pingpong(p, w);
    // Expect: both directions are the same path, so half a round trip is one way; every round trip
    // is the same (no reads, no doorbell records), so the median is also the least and the most.
    EXPECT_EQ(r.half_rtt, write_one_way(p, 8));
    EXPECT_EQ(r.half_rtt_min, r.half_rtt);
    EXPECT_EQ(r.half_rtt_max, r.half_rtt);
    EXPECT_EQ(r.messages, 64u);
  }
}

TEST(ModelPingPong, ASendHalfRoundTripAddsTheReceiveWqeReadToTheWrite) {
  const sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  const RunResult write = run_pingpong(p, pingpong(Operation::kWrite, 32));
  const RunResult send = run_pingpong(p, pingpong(Operation::kSend, 32));
  // Expect: a SEND to a receive queue whose WQEs the HCA has cached costs it a receive WQE read
  // (a PCIe round trip, S2's rule: rtt plus serialization) before the payload is written, and a
  // CQE after it; the median round trip has no doorbell record read (one per RQ depth of SENDs).
  const sim::TimingParams t = sim::derive_timing(p);
  const Picoseconds extra = send.half_rtt - write.half_rtt;
  EXPECT_GT(extra, t.pcie_one_way * 2 + t.pcie_turnaround);
  EXPECT_LT(extra, (t.pcie_one_way * 2 + t.pcie_turnaround) * 2);
  // The round trips whose SEND reads the doorbell record too are the longest.
  EXPECT_GT(send.half_rtt_max, send.half_rtt);
  EXPECT_EQ(send.half_rtt_min, send.half_rtt);
}

TEST(ModelPingPong, WithReceiveWqePrefetchASendCostsAboutWhatAWriteDoes) {
  sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  const RunResult write = run_pingpong(p, pingpong(Operation::kWrite, 32));
  const RunResult send = run_pingpong(p, pingpong(Operation::kSend, 32));
  apply_override(p, "hca.rq_prefetch=true");
  const RunResult prefetched = run_pingpong(p, pingpong(Operation::kSend, 32));
  const sim::TimingParams t = sim::derive_timing(p);
  // Expect: the receive WQE was read while the SEND was on its way, so the median round trip
  // loses the read's PCIe round trip; what is left over a WRITE is the receive CQE's own path
  // (completion unit, 64-byte MWr) instead of the payload's last byte, far less than a round trip.
  EXPECT_LT(prefetched.half_rtt, send.half_rtt - t.pcie_turnaround);
  EXPECT_GE(prefetched.half_rtt, write.half_rtt);
  EXPECT_LT(prefetched.half_rtt - write.half_rtt, t.pcie_turnaround);
  // Expect: a SEND that finds its cached receive queue empty still reads the doorbell record
  // first, then the WQE, both on its path: the longest round trips do not change.
  EXPECT_EQ(prefetched.half_rtt_max, send.half_rtt_max);
  // Expect: prefetch moves the reads in time only: the same TLPs on both hosts.
  EXPECT_EQ(prefetched.requester.to_json(), send.requester.to_json());
  EXPECT_EQ(prefetched.responder.to_json(), send.responder.to_json());
}

TEST(ModelPingPong, EveryTransportAnswersEverySupportedOperation) {
  const sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  struct Case {
    Transport t;
    Operation op;
  };
  for (const Case c : {Case{Transport::kRc, Operation::kWrite}, Case{Transport::kRc, Operation::kSend},
                       Case{Transport::kUc, Operation::kWrite}, Case{Transport::kUc, Operation::kSend},
                       Case{Transport::kUd, Operation::kSend}}) {
    Workload w = pingpong(c.op, 32);
    w.transport = c.t;
    const RunResult r = run_pingpong(p, w);
    SCOPED_TRACE(std::string(to_string(c.t)) + " " + std::string(to_string(c.op)));
    EXPECT_EQ(r.messages, 64u);
    EXPECT_GT(r.half_rtt, Picoseconds(0));
    // Expect: a ping-pong keeps at most a CQE and a message of each host in flight.
    EXPECT_LE(r.peak_pending_tags, 4u);
  }
  Workload read = pingpong(Operation::kRead, 8);
  EXPECT_TRUE(validate(read).has_value());
}

Workload stream(Transport t, Operation op, uint32_t size) {
  Workload w;
  w.transport = t;
  w.op = op;
  w.size_bytes = size;
  w.messages = 500;
  return w;
}

TEST(ModelTransports, UdSendsAGrhAndADethPerPacketAndNoAcks_W1) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  const RunResult rc = run_closed_loop(p, stream(Transport::kRc, Operation::kSend, 64));
  const RunResult ud = run_closed_loop(p, stream(Transport::kUd, Operation::kSend, 64));
  const uint64_t n = 500;
  // Expect: RC SEND-only: LRH, BTH, payload, ICRC, VCRC; UD adds the GRH (the AH is global) and
  // the DETH (W1). RC answers each with an ACK (LRH, BTH, AETH, ICRC, VCRC: 30 bytes, W6).
  EXPECT_EQ(use(rc, "ib_port", 0).operations, n);
  EXPECT_EQ(use(rc, "ib_port", 0).bytes, n * (kLrh + kBth + 64 + kIcrc + kVcrc));
  EXPECT_EQ(use(ud, "ib_port", 0).operations, n);
  EXPECT_EQ(use(ud, "ib_port", 0).bytes, use(rc, "ib_port", 0).bytes + n * (kGrh + kDeth));
  EXPECT_EQ(use(rc, "ib_port", 1).operations, n);
  EXPECT_EQ(use(rc, "ib_port", 1).bytes, n * 30);
  EXPECT_EQ(use(ud, "ib_port", 1).operations, 0u);
  // Expect: the receiver scatters the GRH into the first 40 bytes of its receive buffer.
  EXPECT_EQ(ud.responder.by_cause(pcie::TlpCause::kPayloadWrite).payload_bytes,
            rc.responder.by_cause(pcie::TlpCause::kPayloadWrite).payload_bytes + n * kGrh);
  // Expect: a UD send completes once transmitted, with no ACK to wait for: sooner than RC's.
  EXPECT_EQ(ud.requester.by_cause(pcie::TlpCause::kCqeWrite).tlps, n);
  EXPECT_LT(measure_latency(p, stream(Transport::kUd, Operation::kSend, 64)).total,
            measure_latency(p, stream(Transport::kRc, Operation::kSend, 64)).total);
}

TEST(ModelTransports, UcWritesAndSendsCarryNoAcks) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  for (const Operation op : {Operation::kWrite, Operation::kSend}) {
    SCOPED_TRACE(std::string(to_string(op)));
    const RunResult rc = run_closed_loop(p, stream(Transport::kRc, op, 64));
    const RunResult uc = run_closed_loop(p, stream(Transport::kUc, op, 64));
    // Expect: the same request packets as RC (UC's headers are RC's, W1), and none back.
    EXPECT_EQ(use(uc, "ib_port", 0).bytes, use(rc, "ib_port", 0).bytes);
    EXPECT_EQ(use(uc, "ib_port", 1).operations, 0u);
    EXPECT_EQ(uc.requester.by_cause(pcie::TlpCause::kCqeWrite).tlps, 500u);
    EXPECT_EQ(uc.requester.to_json(), rc.requester.to_json());  // the same TLPs at the requester
  }
  EXPECT_TRUE(validate(stream(Transport::kUc, Operation::kRead, 8)).has_value());
  EXPECT_TRUE(validate(stream(Transport::kUd, Operation::kWrite, 8)).has_value());
}

TEST(ModelTransports, ReplayGivesTheSameResultsOnUcAndUd) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  for (const Transport t : {Transport::kUc, Transport::kUd}) {
    SCOPED_TRACE(std::string(to_string(t)));
    Workload w = stream(t, Operation::kSend, 100);
    w.messages = 1000;
    w.signal_period = 4;
    RunOptions replay;
    replay.replay = true;
    const RunResult full = run_closed_loop(p, w);
    const RunResult fast = run_closed_loop(p, w, replay);
    EXPECT_EQ(full.elapsed, fast.elapsed);
    EXPECT_EQ(full.steps, fast.steps);
    EXPECT_EQ(full.requester.to_json(), fast.requester.to_json());
    EXPECT_EQ(full.responder.to_json(), fast.responder.to_json());
    EXPECT_GT(fast.replayed_posts, 0u);
  }
}

TEST(ModelDeterminism, TheSamePingPongAndUdStreamPrintTheSameJsonTwice) {
  const sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  for (Workload w : {pingpong(Operation::kSend, 32), stream(Transport::kUd, Operation::kSend, 64)}) {
    const std::vector<ModelPoint> a = run_model(p, w, std::nullopt, std::nullopt, nullptr);
    const std::vector<ModelPoint> b = run_model(p, w, std::nullopt, std::nullopt, nullptr);
    const ModelReport ra{&p, &w, nullptr, nullptr, a};
    const ModelReport rb{&p, &w, nullptr, nullptr, b};
    EXPECT_EQ(format_model_json(ra), format_model_json(rb));
    EXPECT_EQ(format_model_table(ra), format_model_table(rb));
  }
  Workload w = pingpong(Operation::kWrite, 32);
  const std::vector<ModelPoint> a = run_model(p, w, std::nullopt, std::nullopt, nullptr);
  const ModelReport ra{&p, &w, nullptr, nullptr, a};
  EXPECT_NE(format_model_json(ra).find("\"half_rtt_ns\""), std::string::npos);
  EXPECT_NE(format_model_table(ra).find("half RTT ns"), std::string::npos);
}

TEST(ModelBookkeeping, ALongRunKeepsNoMoreCompletionTagsThanASendQueueHolds) {
  const sim::MachineProfile p = load_profile(kDefaultProfileName);
  Workload w;
  w.queue_depth = 64;
  w.qps = 2;
  w.threads = 2;
  RunOptions replay;
  replay.replay = true;
  w.messages = 2'000;
  const RunResult short_run = run_closed_loop(p, w, replay);
  w.messages = 400'000;  // every WR signaled: 400 000 tags issued and heard
  const RunResult long_run = run_closed_loop(p, w, replay);
  // Expect: tags in flight are bounded by the WRs the send queues hold, whatever the run's length.
  EXPECT_GT(long_run.peak_pending_tags, 0u);
  EXPECT_LE(long_run.peak_pending_tags, uint64_t{w.qps} * w.queue_depth);
  EXPECT_EQ(long_run.peak_pending_tags, short_run.peak_pending_tags);
}

TEST(ModelBookkeeping, ATagWindowDropsWhatItHasHeardInAnyOrder) {
  TagWindow<int> window;
  const uint32_t a = window.issue(1);
  const uint32_t b = window.issue(2);
  const uint32_t c = window.issue(3);
  EXPECT_EQ(window.hear(b), 2);
  EXPECT_EQ(window.size(), 3u);  // Expect: b waits behind a
  EXPECT_EQ(window.hear(a), 1);
  EXPECT_EQ(window.size(), 1u);  // Expect: a and b gone
  EXPECT_THROW(window.hear(b), std::logic_error);
  EXPECT_EQ(window.hear(c), 3);
  EXPECT_EQ(window.size(), 0u);
  EXPECT_EQ(window.peak(), 3u);
  // Expect: after a heard prefix, later tags are still found out of order.
  TagWindow<uint64_t> wrap;
  for (uint64_t i = 0; i < 10; ++i) wrap.hear(wrap.issue(i));
  uint32_t tag = 0;
  for (uint64_t i = 0; i < 3; ++i) tag = wrap.issue(i);
  EXPECT_EQ(wrap.hear(tag - 2), 0u);
  EXPECT_EQ(wrap.hear(tag), 2u);
  EXPECT_EQ(wrap.hear(tag - 1), 1u);
}

}  // namespace
}  // namespace softhca::tools

namespace softhca::tools {
namespace {

// The device's own region (hca::Device::private_region_bytes) holds as many QPs as its caps allow:
// its SendRecords use memory only as WQEs touch them, and its heap is address space (issue 20:
// 1,000 QPs of depth 128 failed with ENOMEM in a 1 GiB heap).
void expect_every_message_delivered(const Workload& w) {
  const RunResult r = run_closed_loop(load_profile(kDefaultProfileName), w);
  // Expect: every QP's messages went out and were written, and each signaled WR's CQE came back.
  EXPECT_EQ(r.messages, w.messages);
  EXPECT_EQ(r.responder.tlps(pcie::TlpType::kMWr, pcie::TlpCause::kPayloadWrite), w.messages);
  EXPECT_EQ(r.requester.tlps(pcie::TlpType::kMWr, pcie::TlpCause::kCqeWrite), w.messages);
  EXPECT_EQ(r.requester.tlps(pcie::TlpType::kMWr, pcie::TlpCause::kDoorbell), w.messages);
}

TEST(ModelScale, TwoThousandQpsOfDepth128DeliverEveryMessage) {
  Workload w;
  w.qps = 2000;
  w.threads = 4;
  w.queue_depth = 128;
  w.messages = 4000;
  expect_every_message_delivered(w);
}

TEST(ModelScale, SixteenThousandQpsDeliverEveryMessage) {
  Workload w;
  w.qps = 16384;
  w.threads = 8;
  w.queue_depth = 16;
  w.messages = 16384;
  expect_every_message_delivered(w);
  // Expect: the device's max_qp (65,536) bounds the workload, not a table of the model's own.
  w.qps = 65536;
  EXPECT_FALSE(validate(w).has_value());
  w.qps = 65537;
  EXPECT_TRUE(validate(w).has_value());
}

}  // namespace
}  // namespace softhca::tools
