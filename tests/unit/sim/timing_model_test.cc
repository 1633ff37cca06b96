// The timing model's placement rules on hand-made chains: a read's round trip is the profile's
// PCIe RTT (S2) plus serialization, posted writes land one way later, flow-control credits and
// read tags hold TLPs back, a switch forwards cut-through, and the same chains give the same times.
#include "sim/timing_model.h"

#include <gtest/gtest.h>

#include <vector>

#include "sim/machine_profile.h"

namespace softhca::sim {
namespace {

class Recorded : public ChainListener {
 public:
  void on_tagged_step(uint32_t tag, const StepTimes& t) override { seen.emplace_back(tag, t); }
  std::vector<std::pair<uint32_t, StepTimes>> seen;
};

Step tlp(LinkDir dir, TlpClass cls, uint32_t wire, uint32_t payload, uint8_t host = 0) {
  Step s;
  s.kind = StepKind::kTlp;
  s.dir = dir;
  s.tlp_class = cls;
  s.bytes = wire;
  s.payload_bytes = payload;
  s.host = host;
  return s;
}

Picoseconds ser(const TimingParams& p, uint32_t bytes) {
  return Picoseconds(static_cast<int64_t>((bytes * p.pcie_fs_per_byte + 999) / 1000));
}

class TimingModelTest : public ::testing::Test {
 protected:
  MachineProfile profile;  // thunderx2-cx4-edr defaults
  Scheduler sched;
};

TEST_F(TimingModelTest, ASmallDmaReadTakesThePcieRoundTripPlusSerialization_S2) {
  const TimingParams p = derive_timing(profile);
  TimingModel m(sched, p, 1);
  ChainBuilder c;
  const uint32_t rd = c.add(tlp(LinkDir::kUp, TlpClass::kNonPosted, 24, 0));
  c.add(tlp(LinkDir::kDown, TlpClass::kCompletion, 8 + 20, 8), rd);
  std::vector<StepTimes> t;
  m.submit(c, 0_ns, nullptr, &t);
  m.run();
  // Expect: MRd out (24 B), 125 ns of round trip, CplD in (28 B).
  EXPECT_EQ(t[1].arrive - t[0].start, 125_ns + ser(p, 24) + ser(p, 28));
  EXPECT_EQ(m.chains_in_flight(), 0u);
}

TEST_F(TimingModelTest, APostedWriteLandsOneWayAfterItsLastByteLeaves) {
  const TimingParams p = derive_timing(profile);
  TimingModel m(sched, p, 1);
  ChainBuilder c;
  c.add(tlp(LinkDir::kUp, TlpClass::kPosted, 88, 64));  // a 64-byte CQE (P4)
  std::vector<StepTimes> t;
  m.submit(c, 10_ns, nullptr, &t);
  m.run();
  EXPECT_EQ(t[0].start, 10_ns);
  EXPECT_EQ(t[0].done, 10_ns + ser(p, 88));
  EXPECT_EQ(t[0].arrive, t[0].done + ns_to_ps(profile.pcie.one_way_ns));
}

TEST_F(TimingModelTest, TlpsOnOneLinkDirectionAreSerialized) {
  const TimingParams p = derive_timing(profile);
  TimingModel m(sched, p, 1);
  ChainBuilder c;
  for (int i = 0; i < 3; ++i) c.add(tlp(LinkDir::kUp, TlpClass::kPosted, 280, 256));
  std::vector<StepTimes> t;
  m.submit(c, 0_ns, nullptr, &t);
  m.run();
  EXPECT_EQ(t[1].start, t[0].done);
  EXPECT_EQ(t[2].start, t[1].done);
  EXPECT_EQ(t[2].done, 3 * ser(p, 280));
}

TEST_F(TimingModelTest, APostedTlpWaitsForHeaderCreditsToComeBackInAnUpdateFc) {
  profile.pcie.rc_posted_hdr_credits = 2;
  profile.pcie.fc_update_ns = 500;
  const TimingParams p = derive_timing(profile);
  TimingModel m(sched, p, 1);
  ChainBuilder c;
  for (int i = 0; i < 3; ++i) c.add(tlp(LinkDir::kUp, TlpClass::kPosted, 32, 8));
  std::vector<StepTimes> t;
  m.submit(c, 0_ns, nullptr, &t);
  m.run();
  // Expect: the third TLP waits for the first one's credit: arrival + the UpdateFC delay.
  EXPECT_EQ(t[2].start, t[0].arrive + 500_ns);
  EXPECT_LT(t[1].start, t[0].arrive);
}

TEST_F(TimingModelTest, ReadTagsBoundTheReadsInFlight) {
  profile.hca.max_outstanding_reads = 1;
  const TimingParams p = derive_timing(profile);
  TimingModel m(sched, p, 1);
  ChainBuilder c;
  for (int i = 0; i < 2; ++i) {
    Step rd = tlp(LinkDir::kUp, TlpClass::kNonPosted, 24, 0);
    rd.acquire_pool = m.tag_pool(0);
    const uint32_t r = c.add(rd);
    Step cpl = tlp(LinkDir::kDown, TlpClass::kCompletion, 84, 64);
    cpl.release_pool = m.tag_pool(0);
    c.add(cpl, r);
  }
  std::vector<StepTimes> t;
  m.submit(c, 0_ns, nullptr, &t);
  m.run();
  // Expect: the second read request leaves only when the first read's completion has arrived.
  EXPECT_EQ(t[2].start, t[1].arrive);
}

TEST_F(TimingModelTest, APoolUnitIsHeldFromAcquireToRelease) {
  const TimingParams p = derive_timing(profile);
  TimingModel m(sched, p, 1);
  const uint32_t slots = m.add_pool(1);
  ChainBuilder c;
  Step a;
  a.kind = StepKind::kCpu;
  a.cost = 100_ns;
  a.acquire_pool = slots;
  a.release_pool = slots;
  c.add(a);
  Step b = a;
  b.index = 1;  // another CPU thread: only the pool keeps it back
  c.add(b);
  std::vector<StepTimes> t;
  m.submit(c, 0_ns, nullptr, &t);
  m.run();
  EXPECT_EQ(t[0].start, 0_ns);
  EXPECT_EQ(t[1].start, 100_ns);
}

TEST_F(TimingModelTest, ASwitchForwardsCutThroughAHopAfterThePacketsHeadArrived_W7) {
  const TimingParams p = derive_timing(profile);
  TimingModel m(sched, p, 2);
  ChainBuilder c;
  Step link;
  link.kind = StepKind::kIbLink;
  link.bytes = 4096 + 30;
  const uint32_t l = c.add(link);
  Step sw;
  sw.kind = StepKind::kSwitchEgress;
  sw.host = 1;
  sw.bytes = link.bytes;
  c.add(sw, l);
  std::vector<StepTimes> t;
  m.submit(c, 0_ns, nullptr, &t);
  m.run();
  // Expect: the egress starts a cable and a hop (90 ns) after the ingress started, not after it
  // ended: a 4 KiB packet is not stored and forwarded.
  EXPECT_EQ(t[1].start, t[0].start + ns_to_ps(profile.ib.cable_ns) + 90_ns);
  EXPECT_LT(t[1].start, t[0].done);
}

TEST_F(TimingModelTest, TaggedStepsAreReportedWithTheirFinalTimes) {
  const TimingParams p = derive_timing(profile);
  TimingModel m(sched, p, 1);
  Recorded rec;
  ChainBuilder c;
  Step cqe = tlp(LinkDir::kUp, TlpClass::kPosted, 88, 64);
  cqe.tag = 7;
  c.add(cqe);
  std::vector<StepTimes> t;
  m.submit(c, 0_ns, &rec, &t);
  m.run();
  ASSERT_EQ(rec.seen.size(), 1u);
  EXPECT_EQ(rec.seen[0].first, 7u);
  EXPECT_EQ(rec.seen[0].second.arrive, t[0].arrive);
}

TEST_F(TimingModelTest, TheSameChainsGiveTheSameTimes) {
  auto run = [this] {
    Scheduler s;
    TimingModel m(s, derive_timing(profile), 2);
    std::vector<std::vector<StepTimes>> all(20);
    for (int k = 0; k < 20; ++k) {
      ChainBuilder c;
      const uint32_t rd = c.add(tlp(LinkDir::kUp, TlpClass::kNonPosted, 24, 0));
      const uint32_t cpl = c.add(tlp(LinkDir::kDown, TlpClass::kCompletion, 148, 128), rd);
      c.add(tlp(LinkDir::kUp, TlpClass::kPosted, 88, 64), cpl);
      m.submit(c, Picoseconds(k * 7000), nullptr, &all[static_cast<size_t>(k)]);
    }
    m.run();
    std::vector<int64_t> flat;
    for (const auto& v : all) {
      for (const StepTimes& t : v) flat.insert(flat.end(), {t.ready.count(), t.start.count(), t.done.count(), t.arrive.count()});
    }
    return flat;
  };
  EXPECT_EQ(run(), run());
}

TEST_F(TimingModelTest, AStepWaitingForALaterStepIsRejected) {
  TimingModel m(sched, derive_timing(profile), 1);
  ChainBuilder c;
  Step s;
  s.preds = {1, kNoStep, kNoStep};
  c.add(s);
  c.add(Step{});
  EXPECT_THROW(m.submit(c, 0_ns, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace softhca::sim
