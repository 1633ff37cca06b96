// The demo's report from synthetic counters: what each column counts and how it is printed.
#include "tools/demo_report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

#include "pcie/counters.h"

namespace softhca::tools {
namespace {

using pcie::Counters;
using pcie::Direction;
using pcie::Tlp;
using pcie::TlpCause;
using pcie::TlpType;

void emit(Counters& c, TlpType t, TlpCause cause, uint32_t payload, uint32_t wire, uint64_t times) {
  for (uint64_t i = 0; i < times; ++i) {
    c.on_tlp(Tlp{t, pcie::direction_of(t, cause), cause, 0, payload, 0, wire});
  }
}

// 32 messages as the "all" row costs them: 1 doorbell, 4 WQE read requests, 2 CQEs.
RowMeasurement all_row_of_32() {
  Counters req;
  Counters resp;
  emit(req, TlpType::kMWr, TlpCause::kDoorbell, 8, 32, 1);
  emit(req, TlpType::kMRd, TlpCause::kWqeRead, 0, 24, 4);
  emit(req, TlpType::kCplD, TlpCause::kWqeRead, 128, 148, 16);
  emit(req, TlpType::kMWr, TlpCause::kCqeWrite, 64, 88, 2);
  emit(resp, TlpType::kMWr, TlpCause::kPayloadWrite, 8, 32, 32);
  RowMeasurement m;
  m.row = demo_rows().back();
  m.messages = 32;
  m.message_bytes = 8;
  m.requester = req.snapshot();
  m.responder = resp.snapshot();
  return m;
}

TEST(DemoReport, CountsPerMessageArePrintedAsExactFractions) {
  EXPECT_EQ(format_per_message(1024, 1024), "1");
  EXPECT_EQ(format_per_message(32, 1024), "1/32");
  EXPECT_EQ(format_per_message(128, 1024), "1/8");
  EXPECT_EQ(format_per_message(0, 1024), "0");
  EXPECT_EQ(format_per_message(3000, 1000), "3");
  EXPECT_EQ(format_per_message(1, 1000), "0.001");  // Expect: large denominators as decimals.
}

TEST(DemoReport, SideTotalsCountMmioBytesOfDoorbellsAndBlueFlameOnly) {
  Counters c;
  emit(c, TlpType::kMWr, TlpCause::kDoorbell, 8, 32, 2);
  emit(c, TlpType::kMWr, TlpCause::kBlueFlame, 64, 88, 3);
  emit(c, TlpType::kMWr, TlpCause::kCqeWrite, 64, 88, 5);  // upstream: not MMIO
  const SideTotals t = side_totals(c.snapshot());
  EXPECT_EQ(t.doorbells, 2u);
  EXPECT_EQ(t.blueflame_writes, 3u);
  EXPECT_EQ(t.mmio_bytes, 2u * 8u + 3u * 64u);
  EXPECT_EQ(t.cqe_writes, 5u);
  EXPECT_EQ(t.wire_down_bytes, 2u * 32u + 3u * 88u);
  EXPECT_EQ(t.wire_up_bytes, 5u * 88u);
}

TEST(DemoReport, TheTableShowsTheAllRowWithItsFootnote) {
  const std::vector<RowMeasurement> rows{all_row_of_32()};
  WorkloadParams p;
  p.messages = 32;
  const std::string table = format_table(rows, p);
  // Expect: doorbells 1/32, MMIO 0.25 B, WQE reads 1/8, CQE writes 1/16, one responder write each.
  EXPECT_NE(table.find(" all *"), std::string::npos) << table;
  EXPECT_NE(table.find("1/32"), std::string::npos) << table;
  EXPECT_NE(table.find("0.25"), std::string::npos) << table;
  EXPECT_NE(table.find("1/8"), std::string::npos) << table;
  EXPECT_NE(table.find("1/16"), std::string::npos) << table;
  EXPECT_NE(table.find("S3"), std::string::npos) << table;
  EXPECT_EQ(table, format_table(rows, p));  // Expect: the same input prints the same bytes.
}

TEST(DemoReport, TheJsonCarriesTotalsPerMessageValuesAndRawCounters) {
  const std::vector<RowMeasurement> rows{all_row_of_32()};
  WorkloadParams p;
  p.messages = 32;
  const nlohmann::json j = nlohmann::json::parse(format_json(rows, p));
  ASSERT_EQ(j["rows"].size(), 1u);
  const auto& row = j["rows"][0];
  EXPECT_EQ(row["features"], "all");
  EXPECT_EQ(row["postlist"], 32);
  EXPECT_EQ(row["requester"]["totals"]["doorbells"], 1);
  EXPECT_EQ(row["requester"]["totals"]["wqe_reads"], 4);
  EXPECT_DOUBLE_EQ(row["requester"]["per_message"]["cqe_writes"].get<double>(), 2.0 / 32.0);
  EXPECT_EQ(row["responder"]["totals"]["payload_writes"], 32);
  EXPECT_EQ(row["responder"]["counters"]["wire_bytes_upstream"], 32 * 32);
}

}  // namespace
}  // namespace softhca::tools
