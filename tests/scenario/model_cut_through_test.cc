// Cut-through between the HCA's units (hca.cut_through, issue 20): in the chain of one 4 KiB RDMA
// WRITE, the request packet starts once its payload's first completion is in and the last will be
// in before its tail leaves; each responder payload write starts once its piece of the packet has
// arrived; without cut-through both wait for the whole. Expected times come from the chain's own
// step times and the link's serialization rule (W5), never from a previous run.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "sim/timing_params.h"
#include "tools/model_profile.h"
#include "tools/model_workload.h"

namespace softhca::tools {
namespace {

using sim::Phase;
using sim::StepKind;

constexpr uint32_t kTrailer = 4 + 2;  // ICRC, VCRC (W1)

struct Chain {
  LatencyBreakdown latency;
  LatencyTrace trace;
};

Chain one_write(bool cut_through) {
  sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  p.hca.cut_through = cut_through;
  Workload w;
  w.size_bytes = 4096;  // one packet at MTU 4096
  Chain c;
  c.latency = measure_latency(p, w, c.trace);
  return c;
}

std::vector<size_t> steps_where(const LatencyTrace& t, StepKind kind, Phase phase, uint8_t host) {
  std::vector<size_t> out;
  for (size_t i = 0; i < t.steps.size(); ++i) {
    if (t.steps[i].kind == kind && t.steps[i].phase == phase && t.steps[i].host == host) out.push_back(i);
  }
  return out;
}

TEST(ModelCutThrough, ARequestPacketStartsBeforeItsWholePayloadHasArrived) {
  const sim::TimingParams t = sim::derive_timing(load_profile("x86-gen3-cx4-edr"));
  for (bool on : {false, true}) {
    SCOPED_TRACE(on ? "cut-through" : "store and forward");
    const Chain c = one_write(on);
    const std::vector<size_t> cplds = steps_where(c.trace, StepKind::kTlp, Phase::kPayloadFetch, 0);
    const std::vector<size_t> packets = steps_where(c.trace, StepKind::kPacket, Phase::kWire, 0);
    ASSERT_EQ(packets.size(), 1u);
    std::vector<size_t> completions;
    for (size_t i : cplds) {
      if (c.trace.steps[i].tlp_class == sim::TlpClass::kCompletion) completions.push_back(i);
    }
    ASSERT_EQ(completions.size(), 4096u / 128);  // P6: completions of 128 bytes
    const Picoseconds first = c.trace.times[completions.front()].arrive;
    Picoseconds last{0};
    for (size_t i : completions) last = std::max(last, c.trace.times[i].arrive);
    const sim::Step& pkt = c.trace.steps[packets[0]];
    const Picoseconds ready = c.trace.times[packets[0]].ready;
    // Expect: store and forward, the last completion; cut-through, the first completion, or the
    // last less the packet's serialization if that is later (its tail must not leave before).
    const Picoseconds want = on ? std::max(first, last - sim::ib_serialization(t, pkt.bytes)) : last;
    EXPECT_EQ(ready, want);
    if (on) {
      EXPECT_LT(ready, last);
    }
  }
}

TEST(ModelCutThrough, EachRemotePayloadWriteStartsOnceItsPieceHasArrived) {
  const sim::TimingParams t = sim::derive_timing(load_profile("x86-gen3-cx4-edr"));
  for (bool on : {false, true}) {
    SCOPED_TRACE(on ? "cut-through" : "store and forward");
    const Chain c = one_write(on);
    const std::vector<size_t> packets = steps_where(c.trace, StepKind::kPacket, Phase::kWire, 0);
    ASSERT_EQ(packets.size(), 1u);
    const Picoseconds arrived = c.trace.times[packets[0]].arrive;
    const std::vector<size_t> writes = steps_where(c.trace, StepKind::kTlp, Phase::kRemoteWrite, 1);
    ASSERT_EQ(writes.size(), 4096u / 256);  // P6: MPS 256
    for (size_t k = 0; k < writes.size(); ++k) {
      // Expect: piece k is in when the bytes after it (the rest of the payload, ICRC, VCRC) are
      // still to come; store and forward, when the packet is.
      const uint64_t after = 4096 - 256 * (k + 1) + kTrailer;
      const Picoseconds want = on ? arrived - sim::ib_serialization(t, after) : arrived;
      EXPECT_EQ(c.trace.times[writes[k]].ready, want) << k;
    }
  }
}

TEST(ModelCutThrough, ItShortensAPostByTheOverlapAndLeavesTheTlpsAlone) {
  const Chain off = one_write(false);
  const Chain on = one_write(true);
  EXPECT_LT(on.latency.total, off.latency.total);
  // Expect: the same steps: cut-through adds one join (the payload's tail) and changes no TLP.
  EXPECT_EQ(on.trace.steps.size(), off.trace.steps.size() + 1);
  sim::MachineProfile p = load_profile("x86-gen3-cx4-edr");
  Workload w;
  w.size_bytes = 4096;
  w.messages = 200;
  const RunResult a = run_closed_loop(p, w);
  p.hca.cut_through = true;
  const RunResult b = run_closed_loop(p, w);
  EXPECT_EQ(a.requester.to_json(), b.requester.to_json());
  EXPECT_EQ(a.responder.to_json(), b.responder.to_json());
  EXPECT_GT(a.requester.by_type(pcie::TlpType::kMRd).tlps, 0u);
}

}  // namespace
}  // namespace softhca::tools
