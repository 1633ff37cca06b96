// Acceptance of SOFTHCA_PCAP with the Debian tshark: observe_workload (RC SEND, SEND with
// immediate, RDMA WRITE, WRITE with immediate, multi-packet RDMA READ, compare-and-swap, fetch-and-add;
// UC SEND, WRITE and WRITE with immediate; UD SEND and SEND with immediate) runs once with a capture,
// then:
//   - libpcap reads the file back: link type ERF, one ERF InfiniBand record per packet sent, each
//     packet parsing with good ICRC and VCRC (fabric::parse, whose CRCs have known-answer tests);
//   - tshark decodes every frame as ERF/InfiniBand, and its opcode, PSN, QPs, LIDs, RETH, AETH,
//     AtomicETH, AtomicAckETH, DETH, immediate and CRC fields equal what the packet holds;
//   - tshark marks nothing: no malformed packet, no expert information of any severity.
// tshark 4.0 shows the ICRC and VCRC but does not verify them; fabric::parse does.
// Exits 77 (skipped) when tshark is not installed; every command runs under `timeout`.
#include <gtest/gtest.h>
#include <pcap/pcap.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fabric/capture/erf.h"
#include "fabric/packet/opcode.h"
#include "fabric/packet/packet.h"
#include "observe_run.h"

namespace softhca::acceptance {
namespace {

namespace erf = fabric::erf;

// The tshark fields compared, in the order they are asked for.
const std::vector<std::string> kFields = {
    "frame.number",          "frame.protocols",          "erf.types.type",
    "infiniband.lrh.slid",   "infiniband.lrh.dlid",      "infiniband.bth.opcode",
    "infiniband.bth.psn",    "infiniband.bth.destqp",    "infiniband.reth.va",
    "infiniband.reth.r_key", "infiniband.reth.dmalen",   "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",   "infiniband.immdt",         "infiniband.deth.q_key",
    "infiniband.deth.srcqp", "infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt", "infiniband.invariant.crc", "infiniband.variant.crc",
};

// One record of the capture as libpcap and fabric::parse see it.
struct Record {
  erf::Header erf;
  uint32_t caplen = 0;
  std::vector<uint8_t> packet;  // LRH..VCRC
  fabric::ParseStatus status = fabric::ParseStatus::kTruncated;
  fabric::PacketFields fields;
};

using Row = std::map<std::string, std::string>;  // tshark field -> value ("" when absent)

uint64_t number(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 0); }  // decimal or 0x-hex

std::string hex_bytes(const uint8_t* p, size_t n) {
  std::string out;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x", p[i]);
    out += b;
  }
  return out;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

class PcapTshark : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_ = new ObserveRun(run_observe_workload(OBSERVE_WORKLOAD));
    if (run_->exit_code != 0) return;
    read_records();
    read_tshark_fields();
    std::ifstream(run_->manifest) >> manifest_;
    std::ifstream(run_->stats) >> stats_;
  }
  static void TearDownTestSuite() {
    if (!keep_files_) remove_run_files(*run_);
    delete run_;
  }
  void TearDown() override {
    if (HasFailure()) keep_files_ = true;
  }

  static void read_records() {
    char err[PCAP_ERRBUF_SIZE];
    pcap_t* p = pcap_open_offline_with_tstamp_precision(run_->pcap.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
    if (p == nullptr) return;
    link_type_ = pcap_datalink(p);
    pcap_pkthdr* h = nullptr;
    const u_char* data = nullptr;
    while (pcap_next_ex(p, &h, &data) == 1) {
      Record r;
      r.caplen = h->caplen;
      const std::span<const uint8_t> bytes(data, h->caplen);
      if (erf::decode(bytes, r.erf)) {
        r.packet.assign(bytes.begin() + erf::kHeaderBytes, bytes.end());
        std::span<const uint8_t> payload;
        r.status = fabric::parse(r.packet, r.fields, payload);
      }
      records_.push_back(std::move(r));
    }
    pcap_close(p);
  }

  static void read_tshark_fields() {
    std::string cmd = "tshark -r " + shell_quote(run_->pcap) + " -T fields -E separator=/t -E occurrence=f";
    for (const std::string& f : kFields) cmd += " -e " + f;
    std::string out;
    tshark_fields_rc_ = run_command(cmd + " 2>/dev/null", out);
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
      Row row;
      size_t start = 0;
      for (size_t i = 0; i < kFields.size(); ++i) {
        const size_t tab = line.find('\t', start);
        row[kFields[i]] = line.substr(start, tab == std::string::npos ? std::string::npos : tab - start);
        start = tab == std::string::npos ? line.size() : tab + 1;
      }
      rows_.push_back(row);
    }
  }

  void SetUp() override {
    ASSERT_EQ(run_->exit_code, 0) << "observe_workload failed:\n" << run_->output;
  }

  static inline ObserveRun* run_ = nullptr;
  static inline bool keep_files_ = false;  // a failed check leaves the run's files for inspection
  static inline int link_type_ = -1;
  static inline std::vector<Record> records_;
  static inline int tshark_fields_rc_ = -1;
  static inline std::vector<Row> rows_;
  static inline nlohmann::json manifest_;
  static inline nlohmann::json stats_;
};

TEST_F(PcapTshark, EveryPacketSentIsOneErfInfinibandRecordWithGoodCrcs) {
  EXPECT_EQ(link_type_, erf::kLinkTypeErf);
  uint64_t sent = 0;
  for (const auto& d : stats_["devices"]) sent += d["packets"]["sent"].get<uint64_t>();
  EXPECT_EQ(records_.size(), sent) << "one record per packet sent (stats in " << run_->stats << ")";
  for (size_t i = 0; i < records_.size(); ++i) {
    const Record& r = records_[i];
    SCOPED_TRACE("record " + std::to_string(i + 1));
    EXPECT_EQ(r.erf.type, erf::kTypeInfiniband);
    EXPECT_EQ(r.erf.flags, erf::kFlagVaryingLength);
    EXPECT_EQ(r.erf.rlen, r.caplen);
    EXPECT_EQ(r.erf.wlen, r.packet.size());
    EXPECT_EQ(r.status, fabric::ParseStatus::kOk) << fabric::to_string(r.status);
  }
}

TEST_F(PcapTshark, TsharkDecodesEveryFrameAsInfinibandWithTheFieldsWritten) {
  ASSERT_EQ(tshark_fields_rc_, 0);
  ASSERT_EQ(rows_.size(), records_.size());
  for (size_t i = 0; i < rows_.size(); ++i) {
    Row& t = rows_[i];
    const Record& r = records_[i];
    const fabric::PacketFields& f = r.fields;
    SCOPED_TRACE("frame " + t["frame.number"] + " (" + std::string(fabric::opcode_name(f.opcode)) + ")");
    ASSERT_EQ(r.status, fabric::ParseStatus::kOk);
    EXPECT_EQ(t["frame.protocols"].rfind("erf:infiniband", 0), 0u) << t["frame.protocols"];
    EXPECT_EQ(number(t["erf.types.type"]), erf::kTypeInfiniband);
    EXPECT_EQ(number(t["infiniband.lrh.slid"]), f.slid.value());
    EXPECT_EQ(number(t["infiniband.lrh.dlid"]), f.dlid.value());
    EXPECT_EQ(number(t["infiniband.bth.opcode"]), static_cast<uint64_t>(f.opcode));
    EXPECT_EQ(number(t["infiniband.bth.psn"]), f.psn.value());
    EXPECT_EQ(number(t["infiniband.bth.destqp"]), f.dest_qp.value());
    // tshark shows an AtomicETH's VA and R_Key in the RETH fields.
    if (f.reth) {
      EXPECT_EQ(number(t["infiniband.reth.va"]), f.reth->va);
      EXPECT_EQ(number(t["infiniband.reth.r_key"]), f.reth->rkey.value());
      EXPECT_EQ(number(t["infiniband.reth.dmalen"]), f.reth->dma_len);
    } else if (f.atomic_eth) {
      EXPECT_EQ(number(t["infiniband.reth.va"]), f.atomic_eth->va);
      EXPECT_EQ(number(t["infiniband.reth.r_key"]), f.atomic_eth->rkey.value());
      EXPECT_EQ(number(t["infiniband.atomiceth.swapdt"]), f.atomic_eth->swap_add);
      EXPECT_EQ(number(t["infiniband.atomiceth.cmpdt"]), f.atomic_eth->compare);
    } else {
      EXPECT_EQ(t["infiniband.reth.va"], "");
    }
    if (f.aeth) {
      EXPECT_EQ(number(t["infiniband.aeth.syndrome"]), f.aeth->syndrome);
      EXPECT_EQ(number(t["infiniband.aeth.msn"]), f.aeth->msn);
    } else {
      EXPECT_EQ(t["infiniband.aeth.syndrome"], "");
    }
    if (f.atomic_ack) {
      EXPECT_EQ(number(t["infiniband.atomicacketh.origremdt"]), f.atomic_ack->orig);
    }
    if (f.imm) {
      // ImmDt holds the four wire bytes; tshark prints them in wire order.
      const uint32_t imm = *f.imm;
      EXPECT_EQ(t["infiniband.immdt"], hex_bytes(reinterpret_cast<const uint8_t*>(&imm), 4));
    } else {
      EXPECT_EQ(t["infiniband.immdt"], "");
    }
    if (f.deth) {
      EXPECT_EQ(number(t["infiniband.deth.q_key"]), f.deth->qkey);
      EXPECT_EQ(number(t["infiniband.deth.srcqp"]), f.deth->src_qp.value());
    }
    // The CRC bytes tshark shows are the ones at the end of the packet (read as big-endian).
    const uint8_t* end = r.packet.data() + r.packet.size();
    EXPECT_EQ(number(t["infiniband.invariant.crc"]), be32(end - fabric::kVcrcBytes - fabric::kIcrcBytes));
    EXPECT_EQ(number(t["infiniband.variant.crc"]), (uint32_t{end[-2]} << 8) | end[-1]);
  }
}

TEST_F(PcapTshark, TheCaptureHoldsEveryOperationOfTheWorkloadAndOnlyItsQps) {
  using O = fabric::BthOpcode;
  const std::set<O> expected = {
      O::kRcSendOnly, O::kRcSendFirst, O::kRcSendMiddle, O::kRcSendLast, O::kRcSendOnlyImm,
      O::kRcRdmaWriteOnly, O::kRcRdmaWriteFirst, O::kRcRdmaWriteMiddle, O::kRcRdmaWriteLast,
      O::kRcRdmaWriteOnlyImm, O::kRcRdmaReadRequest, O::kRcRdmaReadResponseFirst,
      O::kRcRdmaReadResponseMiddle, O::kRcRdmaReadResponseLast, O::kRcRdmaReadResponseOnly,
      O::kRcAcknowledge, O::kRcAtomicAcknowledge, O::kRcCompareSwap, O::kRcFetchAdd,
      O::kUcSendOnly, O::kUcRdmaWriteFirst, O::kUcRdmaWriteMiddle, O::kUcRdmaWriteLast,
      O::kUcRdmaWriteOnlyImm, O::kUdSendOnly, O::kUdSendOnlyImm};
  std::set<O> seen;
  std::set<uint64_t> qpns;
  std::set<uint64_t> rkeys;
  std::set<uint64_t> imms;
  for (const auto& q : manifest_["qpns"]) qpns.insert(q.get<uint64_t>());
  for (const auto& k : manifest_["rkeys"]) rkeys.insert(k.get<uint64_t>());
  for (const auto& m : manifest_["imms"]) imms.insert(m.get<uint64_t>());
  for (Row& t : rows_) {
    SCOPED_TRACE("frame " + t["frame.number"]);
    seen.insert(static_cast<O>(number(t["infiniband.bth.opcode"])));
    EXPECT_TRUE(qpns.contains(number(t["infiniband.bth.destqp"])));
    if (!t["infiniband.reth.r_key"].empty()) {
      EXPECT_TRUE(rkeys.contains(number(t["infiniband.reth.r_key"])));
    }
    if (!t["infiniband.immdt"].empty()) {
      EXPECT_TRUE(imms.contains(std::strtoull(t["infiniband.immdt"].c_str(), nullptr, 16)));
    }
    if (!t["infiniband.deth.q_key"].empty()) {
      EXPECT_EQ(number(t["infiniband.deth.q_key"]), manifest_["qkey"].get<uint64_t>());
    }
  }
  for (O op : expected) EXPECT_TRUE(seen.contains(op)) << "no " << fabric::opcode_name(op) << " in the capture";
}

TEST_F(PcapTshark, TsharkMarksNoFrameMalformedAndReportsNoExpertInformation) {
  std::string out;
  ASSERT_EQ(run_command("tshark -r " + shell_quote(run_->pcap) + " -q -z expert 2>/dev/null", out), 0) << out;
  EXPECT_EQ(out.find("Errors"), std::string::npos) << out;
  EXPECT_EQ(out.find("Warns"), std::string::npos) << out;
  EXPECT_EQ(out.find("Notes"), std::string::npos) << out;
  EXPECT_EQ(out.find("Malformed"), std::string::npos) << out;
  // The same by display filter: frames with any expert item (malformed included). tshark refuses
  // an unknown field, so the exit code also proves the filter was understood.
  const std::string filter = " -Y '_ws.malformed || _ws.expert'";
  ASSERT_EQ(run_command("tshark -r " + shell_quote(run_->pcap) + filter + " 2>/dev/null", out), 0);
  EXPECT_EQ(out, "") << "frames with expert items:\n" << out;
}

}  // namespace
}  // namespace softhca::acceptance

int main(int argc, char** argv) {
  if (!softhca::acceptance::on_path("tshark")) {
    std::printf("SKIP: tshark is not installed (Debian package tshark)\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
