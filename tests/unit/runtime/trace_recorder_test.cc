// The trace recorder's bounded ring and the Chrome trace-event JSON drawn from it, with a manual
// clock (the seam sim mode uses) and a runtime whose devices really talk, so that the taps see
// what the devices do.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "hwif/uar.h"
#include "runtime/chrome_trace.h"
#include "runtime/tap_fanout.h"
#include "runtime/trace_recorder.h"

namespace softhca::runtime {
namespace {

class ManualClock final : public TapClock {
 public:
  Picoseconds now() override { return now_; }
  [[nodiscard]] Nanoseconds unix_time_at_start() const override { return Nanoseconds(0); }
  void advance(Picoseconds d) { now_ += d; }

 private:
  Picoseconds now_{0};
};

pcie::Tlp doorbell() {
  pcie::Tlp t;
  t.type = pcie::TlpType::kMWr;
  t.dir = pcie::Direction::kDownstream;
  t.cause = pcie::TlpCause::kDoorbell;
  t.payload_bytes = 8;
  t.wire_bytes = 32;
  return t;
}

TEST(TraceRecorder, KeepsEventsInOrderWithTheClocksTime) {
  ManualClock clock;
  TraceRecorder rec(clock, 10);
  rec.on_tlp(0, 0, doorbell());
  clock.advance(1500_ps);
  rec.on_tlp(1, 1, doorbell());
  const std::vector<TraceEvent> ev = rec.events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].time, 0_ps);
  EXPECT_EQ(ev[1].time, 1500_ps);
  EXPECT_EQ(ev[1].device, 1u);
  EXPECT_EQ(ev[1].seq, 1u);
  EXPECT_EQ(rec.dropped(), 0u);
}

TEST(TraceRecorder, AFullRingOverwritesTheOldestAndCountsThem) {
  ManualClock clock;
  TraceRecorder rec(clock, 4);
  for (uint64_t i = 0; i < 10; ++i) {
    rec.on_tlp(i, 0, doorbell());
    clock.advance(1_ns);
  }
  const std::vector<TraceEvent> ev = rec.events();
  ASSERT_EQ(ev.size(), 4u);
  // Expect: the last four, oldest first.
  for (size_t i = 0; i < ev.size(); ++i) EXPECT_EQ(ev[i].seq, 6 + i);
  EXPECT_EQ(rec.dropped(), 6u);
  rec.clear();
  EXPECT_TRUE(rec.events().empty());
  EXPECT_EQ(rec.dropped(), 0u);
}

TEST(TraceRecorder, ManyThreadsAtOnceLoseNothingBelowTheBound) {
  ManualClock clock;  // constant time: only the count matters here
  TraceRecorder rec(clock, 100'000);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&rec, t] {
      for (uint64_t i = 0; i < 1000; ++i) rec.on_tlp(i, t, doorbell());
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(rec.events().size(), 4000u);
}

TEST(ChromeTrace, TracksFollowTheTlpDirectionAndThePacketDirection) {
  TraceEvent e;
  e.kind = TraceEventKind::kTlp;
  e.tlp = doorbell();
  EXPECT_EQ(track_of(e), TraceTrack::kPcieDownstream);
  e.tlp.type = pcie::TlpType::kMRd;
  e.tlp.dir = pcie::Direction::kUpstream;
  EXPECT_EQ(track_of(e), TraceTrack::kPcieUpstream);
  e.kind = TraceEventKind::kPacket;
  e.packet_dir = PacketDirection::kSent;
  EXPECT_EQ(track_of(e), TraceTrack::kWire);
  e.packet_dir = PacketDirection::kReceived;
  EXPECT_EQ(track_of(e), TraceTrack::kHca);
}

TEST(ChromeTrace, ARuntimesTapsMakeAWellFormedTraceWithTlpsPerCauseAsCounted) {
  ManualClock clock;
  TraceRecorder rec(clock);
  TapFanout fan;
  fan.add(static_cast<TlpTap*>(&rec));
  fan.add(static_cast<PacketTap*>(&rec));
  RuntimeOptions o;
  o.num_devices = 2;
  o.tlp_tap = &fan;
  o.packet_tap = &fan;
  auto rt = Runtime::create(o);
  // Ring a doorbell for a QP that does not exist: the device counts the TLP and ignores it.
  const uint64_t db = 0;
  rt->devices()[0]->host_port().write_doorbell(hwif::uar_page_offset(0) + hwif::kBfOffset, &db,
                                               pcie::TlpCause::kDoorbell);
  clock.advance(2_us);

  const std::vector<TraceEvent> ev = rec.events();
  ASSERT_FALSE(ev.empty());
  ChromeTraceInfo info;
  info.device_names = {"softhca_0", "softhca_1"};
  const auto doc = nlohmann::json::parse(chrome_trace_json(ev, info));
  std::map<std::string, uint64_t> by_name;
  size_t metadata = 0;
  for (const auto& j : doc["traceEvents"]) {
    if (j["ph"] == "M") {
      ++metadata;
      continue;
    }
    EXPECT_EQ(j["pid"], 1);
    EXPECT_EQ(j["tid"], 1);
    EXPECT_EQ(j["ts"], 0.0);
    ++by_name[j["name"]];
  }
  EXPECT_EQ(metadata, 2u * (2 + 4 * 2));  // per device: process name and order, 4 tracks x 2
  const pcie::CounterSnapshot s = rt->devices()[0]->counters().snapshot();
  EXPECT_EQ(by_name["doorbell MWr"], s.tlps(pcie::TlpType::kMWr, pcie::TlpCause::kDoorbell));
  EXPECT_EQ(doc["otherData"]["dropped_events"], 0);
}

}  // namespace
}  // namespace softhca::runtime
