// fabric/capture: the ERF record header (known answers for its mixed byte order and fixed-point
// timestamp), the pcap writer read back through libpcap, and the packet summary that traces use.
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include "fabric/capture/erf.h"
#include "fabric/capture/packet_summary.h"
#include "fabric/capture/pcap_writer.h"
#include "fabric/packet/packet.h"

namespace softhca::fabric {
namespace {

TEST(ErfTimestamp, SecondsGoHighAndTheBinaryFractionLow) {
  // Expect: 1.5 s = 1 second and half of 2^32.
  EXPECT_EQ(erf::timestamp(Nanoseconds(1'500'000'000)), 0x0000'0001'8000'0000u);
  // Expect: 0.25 s = a quarter of 2^32, no seconds.
  EXPECT_EQ(erf::timestamp(Nanoseconds(250'000'000)), 0x0000'0000'4000'0000u);
  // Expect: just under a second rounds the fraction down and never carries into the seconds.
  EXPECT_EQ(erf::timestamp(Nanoseconds(999'999'999)) >> 32, 0u);
  // Expect: a time before the epoch is clamped to 0.
  EXPECT_EQ(erf::timestamp(Nanoseconds(-5)), 0u);
  // Expect: converting back loses at most a nanosecond.
  const Nanoseconds t(1'700'000'000'123'456'789);
  EXPECT_LE((t - erf::to_time(erf::timestamp(t))).count(), 1);
  EXPECT_GE((t - erf::to_time(erf::timestamp(t))).count(), 0);
}

TEST(ErfHeader, TimestampIsLittleEndianAndLengthsAreBigEndian) {
  erf::Header h;
  h.ts = 0x0102030405060708;
  h.type = erf::kTypeInfiniband;
  h.flags = erf::kFlagVaryingLength | 1;
  h.rlen = 0x1122;
  h.lctr = 0x3344;
  h.wlen = 0x5566;
  const std::array<uint8_t, 16> want = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
                                        21,   0x05, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66};
  EXPECT_EQ(erf::encode(h), want);
  erf::Header back;
  ASSERT_TRUE(erf::decode(want, back));
  EXPECT_EQ(back, h);
  EXPECT_FALSE(erf::decode(std::span<const uint8_t>(want).first(15), back));
}

std::vector<uint8_t> rdma_write_only() {
  PacketFields f;
  f.dlid = Lid(2);
  f.slid = Lid(1);
  f.opcode = BthOpcode::kRcRdmaWriteOnly;
  f.dest_qp = Qpn(0x12);
  f.ack_req = true;
  f.psn = Psn(77);
  f.reth = RethFields{0x1000, RKey(0x101), 8};
  const std::array<uint8_t, 8> payload{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint8_t> out(kMaxPacketBytes);
  out.resize(serialize(f, payload, out));
  return out;
}

TEST(PcapWriter, RecordsReadBackThroughLibpcapAsErfInfiniband) {
  char path[] = "/tmp/softhca-capture-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::vector<uint8_t> packet = rdma_write_only();
  ASSERT_FALSE(packet.empty());
  {
    std::string error;
    auto w = PcapWriter::open(path, error);
    ASSERT_NE(w, nullptr) << error;
    w->write(packet, Nanoseconds(1'500'000'123));
    w->write(packet, Nanoseconds(2'000'000'000), 1);
    EXPECT_EQ(w->records(), 2u);
  }
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline_with_tstamp_precision(path, PCAP_TSTAMP_PRECISION_NANO, err);
  ASSERT_NE(p, nullptr) << err;
  EXPECT_EQ(pcap_datalink(p), erf::kLinkTypeErf);
  pcap_pkthdr* h = nullptr;
  const u_char* data = nullptr;
  for (uint8_t i = 0; i < 2; ++i) {
    ASSERT_EQ(pcap_next_ex(p, &h, &data), 1);
    EXPECT_EQ(h->caplen, erf::kHeaderBytes + packet.size());
    erf::Header e;
    ASSERT_TRUE(erf::decode({data, h->caplen}, e));
    EXPECT_EQ(e.type, erf::kTypeInfiniband);
    EXPECT_EQ(e.flags, erf::kFlagVaryingLength | i);  // interface i
    EXPECT_EQ(e.rlen, h->caplen);
    EXPECT_EQ(e.wlen, packet.size());
    EXPECT_EQ(std::vector<uint8_t>(data + erf::kHeaderBytes, data + h->caplen), packet);
    if (i == 0) {
      EXPECT_EQ(h->ts.tv_sec, 1);
      EXPECT_EQ(h->ts.tv_usec, 500'000'123);  // nanoseconds in a NANO-precision file
      EXPECT_EQ(e.ts, erf::timestamp(Nanoseconds(1'500'000'123)));
    }
  }
  EXPECT_EQ(pcap_next_ex(p, &h, &data), PCAP_ERROR_BREAK);  // end of file
  pcap_close(p);
  std::remove(path);
}

TEST(PcapWriter, OpenReportsWhyAFileCannotBeCreated) {
  std::string error;
  EXPECT_EQ(PcapWriter::open("/nonexistent-dir/x.pcap", error), nullptr);
  EXPECT_FALSE(error.empty());
}

TEST(PacketSummary, ReadsAddressesOpcodePsnAndQpWithoutCheckingCrcs) {
  std::vector<uint8_t> packet = rdma_write_only();
  packet.back() ^= 0xff;  // a bad VCRC does not matter here
  const PacketSummary s = summarize(packet);
  ASSERT_TRUE(s.valid);
  EXPECT_EQ(s.slid, 1);
  EXPECT_EQ(s.dlid, 2);
  EXPECT_EQ(s.opcode, static_cast<uint8_t>(BthOpcode::kRcRdmaWriteOnly));
  EXPECT_EQ(s.dest_qp, 0x12u);
  EXPECT_EQ(s.psn, 77u);
  EXPECT_TRUE(s.ack_req);
  EXPECT_FALSE(s.has_aeth);
  EXPECT_EQ(s.wire_bytes, packet.size());
  EXPECT_EQ(describe(s), "RC RDMA WRITE Only PSN 77");
}

TEST(PacketSummary, AnAckShowsItsSyndromeAndMsn) {
  PacketFields f;
  f.dlid = Lid(1);
  f.slid = Lid(2);
  f.opcode = BthOpcode::kRcAcknowledge;
  f.dest_qp = Qpn(7);
  f.psn = Psn(9);
  f.aeth = AethFields{ack_syndrome(kAethCreditInvalid), 3};
  std::vector<uint8_t> out(kMaxPacketBytes);
  out.resize(serialize(f, {}, out));
  const PacketSummary s = summarize(out);
  ASSERT_TRUE(s.has_aeth);
  EXPECT_EQ(s.msn, 3u);
  EXPECT_EQ(describe(s), "RC Acknowledge PSN 9 ACK MSN 3");
}

TEST(PacketSummary, TooShortOrNotIbaTransportIsNotValid) {
  EXPECT_FALSE(summarize(std::vector<uint8_t>(10, 0)).valid);
  std::vector<uint8_t> raw = rdma_write_only();
  raw[1] &= 0xfc;  // LNH 0: raw packet
  EXPECT_FALSE(summarize(raw).valid);
  EXPECT_EQ(describe(summarize(raw)), "packet (" + std::to_string(raw.size()) + " B)");
}

}  // namespace
}  // namespace softhca::fabric
