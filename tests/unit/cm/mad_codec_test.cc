// Known-answer tests of the CM MAD codec: each expected MAD is written byte by byte from the IBA
// tables (rdmacm.md 4.2-4.7, MAD offsets), every field a distinct value so a misplaced bit shows.
#include "cm/mad_codec.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "cm/cma_header.h"
#include "cm_test_util.h"

namespace softhca::cm {
namespace {

using test::fill;
using test::hand_header;
using test::put;

// Encodes m and expects exactly `expected`; decodes `expected` and expects m back.
void expect_both_ways(const CmMad& m, const MadBytes& expected) {
  const MadBytes got = encode(m);
  for (size_t i = 0; i < kMadBytes; ++i) {
    EXPECT_EQ(got[i], expected[i]) << "MAD byte " << i;
  }
  CmMad back;
  ASSERT_EQ(decode(expected, back), DecodeStatus::kOk);
  EXPECT_EQ(back, m);
}

Gid ipv4_gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}

template <size_t N>
PrivateData<N> full(std::initializer_list<uint8_t> head) {
  PrivateData<N> p;
  std::vector<uint8_t> v(head);
  p.assign(v);
  p.length = N;  // what decode() gives: the whole field
  return p;
}

// ---- REQ ----------------------------------------------------------------------------------------

Req example_req() {
  Req r;
  r.local_comm_id = CommId(0x11223344);
  r.vendor_id = 0xabcdef;
  r.service_id = service_id_of(PortSpace::kTcp, 7471);  // 0x0000000001061D2F
  r.local_ca_guid = 0x0002c90300a1b2c3;
  r.local_qkey = 0x0a0b0c0d;
  r.local_qpn = Qpn(0x123456);
  r.responder_resources = 4;
  r.local_eecn = 0x654321;
  r.initiator_depth = 5;
  r.remote_eecn = 0x0f0e0d;
  r.remote_cm_response_timeout = 20;
  r.transport_type = TransportType::kXrc;
  r.end_to_end_flow_control = true;
  r.starting_psn = Psn(0xabcdef);
  r.local_cm_response_timeout = 22;
  r.retry_count = 5;
  r.pkey = 0xffff;
  r.path_mtu = 3;
  r.rdc_exists = true;
  r.rnr_retry_count = 6;
  r.max_cm_retries = 15;
  r.srq = true;
  r.extended_transport_type = 1;
  r.primary.local_lid = Lid(0xffff);
  r.primary.remote_lid = Lid(0x0012);
  r.primary.local_gid = ipv4_gid(192, 168, 1, 10);
  r.primary.remote_gid = ipv4_gid(192, 168, 1, 20);
  r.primary.flow_label = 0xabcde;
  r.primary.packet_rate = 0x2a;
  r.primary.traffic_class = 0x60;
  r.primary.hop_limit = 64;
  r.primary.sl = 0xb;
  r.primary.subnet_local = true;
  r.primary.local_ack_timeout = 17;
  r.alternate.local_lid = Lid(0x0101);
  r.alternate.remote_lid = Lid(0x0202);
  r.alternate.local_gid.fill(0xa1);
  r.alternate.remote_gid.fill(0xb2);
  r.alternate.flow_label = 0x12345;
  r.alternate.packet_rate = 0x3f;
  r.alternate.traffic_class = 0x11;
  r.alternate.hop_limit = 0x22;
  r.alternate.sl = 3;
  r.alternate.subnet_local = false;
  r.alternate.local_ack_timeout = 9;
  r.sap_supported = true;
  const std::array<uint8_t, 5> user = {'h', 'e', 'l', 'l', 'o'};
  EXPECT_TRUE(set_req_private_data(r, CmaHeader::ipv4(0xc0a8010a, 40000, 0xc0a80114), user));
  r.private_data.length = kReqPrivateDataBytes;
  return r;
}

TEST(MadCodec, ReqPutsEveryFieldOfTable106AtItsByteAndBit) {
  MadBytes e = hand_header(0x0010, 0x0000000511223344, 0x00000001);
  put(e, 24, {0x11, 0x22, 0x33, 0x44});                          // Local Communication ID
  put(e, 28, {0x00, 0xab, 0xcd, 0xef});                          // reserved, ECE Vendor ID
  put(e, 32, {0x00, 0x00, 0x00, 0x00, 0x01, 0x06, 0x1d, 0x2f});  // Service ID (PS_TCP, 7471)
  put(e, 40, {0x00, 0x02, 0xc9, 0x03, 0x00, 0xa1, 0xb2, 0xc3});  // Local CA GUID
  put(e, 52, {0x0a, 0x0b, 0x0c, 0x0d});                          // Local Q_Key
  put(e, 56, {0x12, 0x34, 0x56, 0x04});                          // Local QPN, Responder Resources
  put(e, 60, {0x65, 0x43, 0x21, 0x05});                          // Local EECN, Initiator Depth
  // Remote EECN; Remote CM Response Timeout 20 (10100b) | Transport XRC (11b) | E2E flow control
  put(e, 64, {0x0f, 0x0e, 0x0d, 0b1010'0111});
  put(e, 68, {0xab, 0xcd, 0xef, 0b1011'0101});  // Starting PSN; Local CM Resp. Timeout 22 | Retry 5
  put(e, 72, {0xff, 0xff});                     // P_Key
  put(e, 74, {0b0011'1110});                    // MTU 3 | RDC Exists | RNR Retry 6
  put(e, 75, {0b1111'1001});                    // Max CM Retries 15 | SRQ | Ext. Transport 1
  // Primary path
  put(e, 76, {0xff, 0xff, 0x00, 0x12});  // Local, Remote Port LID
  put(e, 80, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 10});
  put(e, 96, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 20});
  put(e, 112, {0xab, 0xcd, 0xe0, 0x2a});  // Flow Label (20 bits) | 6 reserved | Packet Rate 0x2a
  put(e, 116, {0x60, 0x40, 0b1011'1000, 17 << 3});  // TClass, Hop Limit, SL 11 | Subnet Local, ACK TO 17
  // Alternate path
  put(e, 120, {0x01, 0x01, 0x02, 0x02});
  fill(e, 124, 16, 0xa1);
  fill(e, 140, 16, 0xb2);
  put(e, 156, {0x12, 0x34, 0x50, 0x3f});
  put(e, 160, {0x11, 0x22, 0b0011'0000, (9 << 3) | 0b100});  // ..., ACK TO 9 | SAP Supported
  // Private data: the CMA header of rdmacm.md 4.10, then the user's bytes
  put(e, 164, {0x00, 0x40, 0x9c, 0x40});
  put(e, 180, {0xc0, 0xa8, 0x01, 0x0a});
  put(e, 196, {0xc0, 0xa8, 0x01, 0x14});
  put(e, 200, {'h', 'e', 'l', 'l', 'o'});

  CmMad m;
  m.transaction_id = 0x0000000511223344;
  m.attribute_modifier = 1;
  m.message = example_req();
  expect_both_ways(m, e);
}

TEST(MadCodec, ReqFieldsWiderThanTheWireAreCutWithoutTouchingTheirNeighbours) {
  Req r;
  r.local_qpn = Qpn(0xff123456);     // 24 bits: 0x123456; byte 59 (Responder Resources) stays 0
  r.retry_count = 0xff;              // 3 bits
  r.primary.flow_label = 0xfffffff;  // 20 bits; Packet Rate stays 0
  r.primary.sl = 0xff;               // 4 bits; Subnet Local stays 0
  const MadBytes b = encode(CmMad{0, 0, 0, 0, r});
  EXPECT_EQ(b[56], 0x12);
  EXPECT_EQ(b[59], 0x00);
  EXPECT_EQ(b[71], 0x07);
  EXPECT_EQ(b[112], 0xff);
  EXPECT_EQ(b[114], 0xf0);
  EXPECT_EQ(b[115], 0x00);
  EXPECT_EQ(b[118], 0xf0);
}

// ---- REP ----------------------------------------------------------------------------------------

TEST(MadCodec, RepPutsEveryFieldOfTable110AtItsByteAndBit) {
  Rep r;
  r.local_comm_id = CommId(0xa1a2a3a4);
  r.remote_comm_id = CommId(0x11223344);
  r.local_qkey = 0x01234567;
  r.local_qpn = Qpn(0x0abcde);
  r.vendor_id = 0x15191f;  // bytes 15, 19, 23
  r.local_eecn = 0x332211;
  r.starting_psn = Psn(0x777777);
  r.responder_resources = 0x10;
  r.initiator_depth = 0x20;
  r.target_ack_delay = 15;
  r.failover_accepted = 2;
  r.end_to_end_flow_control = true;
  r.rnr_retry_count = 7;
  r.srq = true;
  r.local_ca_guid = 0x1122334455667788;
  r.private_data = full<kRepPrivateDataBytes>({0xde, 0xad});
  r.private_data.bytes[195] = 0x99;

  MadBytes e = hand_header(0x0013, 0x0000000511223344);
  put(e, 24, {0xa1, 0xa2, 0xa3, 0xa4, 0x11, 0x22, 0x33, 0x44});
  put(e, 32, {0x01, 0x23, 0x45, 0x67});
  put(e, 36, {0x0a, 0xbc, 0xde, 0x15});  // Local QPN, Vendor ID 23..16
  put(e, 40, {0x33, 0x22, 0x11, 0x19});  // Local EECN, Vendor ID 15..8
  put(e, 44, {0x77, 0x77, 0x77, 0x1f});  // Starting PSN, Vendor ID 7..0
  put(e, 48, {0x10, 0x20});
  put(e, 50, {(15 << 3) | (2 << 1) | 1});  // Target ACK Delay 15 | Failover 2 | E2E
  put(e, 51, {0b1111'0000});               // RNR Retry 7 | SRQ | reserved
  put(e, 52, {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88});
  put(e, 60, {0xde, 0xad});
  put(e, 255, {0x99});  // the last of the 196 private bytes is the MAD's last byte

  CmMad m;
  m.transaction_id = 0x0000000511223344;
  m.message = r;
  expect_both_ways(m, e);
}

// ---- RTU, DREQ, DREP ----------------------------------------------------------------------------

TEST(MadCodec, RtuDreqDrepPutTheirFieldsWhereTables111To113Say) {
  Rtu rtu;
  rtu.local_comm_id = CommId(0x01020304);
  rtu.remote_comm_id = CommId(0x05060708);
  rtu.private_data = full<kRtuPrivateDataBytes>({0xaa});
  MadBytes e = hand_header(0x0014, 7);
  put(e, 24, {1, 2, 3, 4, 5, 6, 7, 8, 0xaa});
  expect_both_ways(CmMad{7, 0, 0, 0, rtu}, e);

  Dreq dreq;
  dreq.local_comm_id = CommId(0x01020304);
  dreq.remote_comm_id = CommId(0x05060708);
  dreq.remote_qpn = Qpn(0xc0ffee);
  dreq.private_data = full<kDreqPrivateDataBytes>({0xbb});
  e = hand_header(0x0015, 8);
  put(e, 24, {1, 2, 3, 4, 5, 6, 7, 8, 0xc0, 0xff, 0xee, 0x00, 0xbb});
  expect_both_ways(CmMad{8, 0, 0, 0, dreq}, e);

  Drep drep;
  drep.local_comm_id = CommId(0x05060708);
  drep.remote_comm_id = CommId(0x01020304);
  drep.private_data = full<kDrepPrivateDataBytes>({0xcc});
  e = hand_header(0x0016, 8);
  put(e, 24, {5, 6, 7, 8, 1, 2, 3, 4, 0xcc});
  expect_both_ways(CmMad{8, 0, 0, 0, drep}, e);
}

// ---- REJ, MRA -----------------------------------------------------------------------------------

TEST(MadCodec, RejPutsReasonAriAndPrivateDataWhereTable108Says) {
  Rej r;
  r.local_comm_id = CommId(0);
  r.remote_comm_id = CommId(0x11223344);
  r.message_rejected = RejectedMessage::kRep;
  r.ari_length = 16;
  r.reason = RejReason::kInvalidGid;
  r.ari.fill(0);
  for (size_t i = 0; i < 16; ++i) r.ari[i] = static_cast<uint8_t>(0xf0 + i);
  r.ari[71] = 0x42;
  r.private_data = full<kRejPrivateDataBytes>({0x01, 0x02});
  r.private_data.bytes[147] = 0x77;

  MadBytes e = hand_header(0x0012, 9);
  put(e, 24, {0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44});
  put(e, 32, {0b0100'0000, 16 << 1, 0x00, 12});  // Message REJected 1 | ARI length 16 | Reason 12
  for (size_t i = 0; i < 16; ++i) e[36 + i] = static_cast<uint8_t>(0xf0 + i);
  put(e, 107, {0x42});          // last ARI byte
  put(e, 108, {0x01, 0x02});    // private data
  put(e, 255, {0x77});
  expect_both_ways(CmMad{9, 0, 0, 0, r}, e);
}

TEST(MadCodec, MraPutsMessageMraedAndServiceTimeoutWhereTable107Says) {
  Mra m;
  m.local_comm_id = CommId(0x0a0b0c0d);
  m.remote_comm_id = CommId(0x01020304);
  m.message_mraed = MraedMessage::kLap;
  m.service_timeout = 24;
  m.private_data = full<kMraPrivateDataBytes>({0x5a});
  MadBytes e = hand_header(0x0011, 10);
  put(e, 24, {0x0a, 0x0b, 0x0c, 0x0d, 1, 2, 3, 4});
  put(e, 32, {0b1000'0000, 24 << 3, 0x5a});  // MRAed 2 (LAP) | Service Timeout 24 | private data
  expect_both_ways(CmMad{10, 0, 0, 0, m}, e);
}

// ---- SIDR ---------------------------------------------------------------------------------------

TEST(MadCodec, SidrReqCarriesTheCmaHeaderAtMadByte40) {
  SidrReq r;
  r.request_id = 0xcafef00d;
  r.pkey = 0xffff;
  r.service_id = service_id_of(PortSpace::kUdp, 7174);  // 0x0000000001111C06
  const std::array<uint8_t, 2> user = {0x55, 0x66};
  ASSERT_TRUE(set_sidr_req_private_data(r, CmaHeader::ipv4(0xc0a8010a, 40000, 0xc0a80114), user));
  r.private_data.length = kSidrReqPrivateDataBytes;
  MadBytes e = hand_header(0x0017, 0x00000003cafef00d);
  put(e, 24, {0xca, 0xfe, 0xf0, 0x0d, 0xff, 0xff, 0x00, 0x00});
  put(e, 32, {0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06});
  put(e, 40, {0x00, 0x40, 0x9c, 0x40});
  put(e, 56, {0xc0, 0xa8, 0x01, 0x0a});
  put(e, 72, {0xc0, 0xa8, 0x01, 0x14});
  put(e, 76, {0x55, 0x66});
  expect_both_ways(CmMad{0x00000003cafef00d, 0, 0, 0, r}, e);
}

TEST(MadCodec, SidrRepPutsStatusQpnQkeyAndVendorIdWhereTable120Says) {
  SidrRep r;
  r.request_id = 0xcafef00d;
  r.status = SidrStatus::kRedirect;
  r.additional_info_length = 72;
  r.vendor_id = 0x123456;  // bytes 30-31 and 35
  r.qpn = Qpn(0xabcdef);
  r.service_id = ServiceId(0x0000000001111c06);
  r.qkey = 0x01234567;
  r.additional_info.fill(0x3c);
  r.private_data = full<kSidrRepPrivateDataBytes>({0x9a});
  r.private_data.bytes[135] = 0x9b;
  MadBytes e = hand_header(0x0018, 0x00000003cafef00d, 0x00000002);
  put(e, 24, {0xca, 0xfe, 0xf0, 0x0d, 4, 72, 0x12, 0x34});
  put(e, 32, {0xab, 0xcd, 0xef, 0x56});
  put(e, 36, {0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06});
  put(e, 44, {0x01, 0x23, 0x45, 0x67});
  fill(e, 48, 72, 0x3c);
  put(e, 120, {0x9a});
  put(e, 255, {0x9b});
  expect_both_ways(CmMad{0x00000003cafef00d, 2, 0, 0, r}, e);
}

TEST(MadCodec, HeaderStatusAndClassSpecificRoundTrip) {
  Rtu rtu;
  rtu.private_data.length = kRtuPrivateDataBytes;  // decode() gives the whole field
  CmMad m{0x0102030405060708, 0x0a0b0c0d, 0x1234, 0x5678, rtu};
  MadBytes e = hand_header(0x0014, 0x0102030405060708, 0x0a0b0c0d);
  put(e, 4, {0x12, 0x34, 0x56, 0x78});
  expect_both_ways(m, e);
  MadHeader h;
  ASSERT_TRUE(decode_mad_header(e, h));
  EXPECT_EQ(h.attribute_id, 0x0014);
  EXPECT_EQ(h.transaction_id, 0x0102030405060708u);
}

// ---- bad input ----------------------------------------------------------------------------------

DecodeStatus decode_bytes(const MadBytes& b) {
  CmMad m;
  return decode(b, m);
}

TEST(MadCodec, RefusesEachClassOfBadInputWithItsOwnStatus) {
  const MadBytes good = encode(CmMad{1, 0, 0, 0, Rtu{}});
  ASSERT_EQ(decode_bytes(good), DecodeStatus::kOk);

  CmMad out;
  EXPECT_EQ(decode(std::span<const uint8_t>(good).first(255), out), DecodeStatus::kTooShort);
  EXPECT_EQ(decode(std::span<const uint8_t>(), out), DecodeStatus::kTooShort);
  auto with = [&good](size_t at, uint8_t v) {
    MadBytes b = good;
    b[at] = v;
    return b;
  };
  EXPECT_EQ(decode_bytes(with(0, 2)), DecodeStatus::kBadBaseVersion);
  EXPECT_EQ(decode_bytes(with(1, 0x04)), DecodeStatus::kBadClass);  // a PerfMgt MAD
  EXPECT_EQ(decode_bytes(with(2, 1)), DecodeStatus::kBadClassVersion);
  EXPECT_EQ(decode_bytes(with(3, 0x01)), DecodeStatus::kBadMethod);  // Get
  EXPECT_EQ(decode_bytes(with(3, 0x83)), DecodeStatus::kBadMethod);  // SEND with the response bit
  EXPECT_EQ(decode_bytes(with(17, 0x19)), DecodeStatus::kUnsupportedAttribute);  // LAP
  EXPECT_EQ(decode_bytes(with(17, 0x1a)), DecodeStatus::kUnsupportedAttribute);  // APR
  EXPECT_EQ(decode_bytes(with(17, 0x01)), DecodeStatus::kUnsupportedAttribute);  // ClassPortInfo
  EXPECT_EQ(decode_bytes(with(17, 0x1b)), DecodeStatus::kUnknownAttribute);
  EXPECT_EQ(decode_bytes(with(16, 0x01)), DecodeStatus::kUnknownAttribute);       // 0x0114

  const MadBytes rej = encode(CmMad{1, 0, 0, 0, Rej{}});
  MadBytes b = rej;
  b[32] = 0b1100'0000;  // Message REJected 3: reserved
  EXPECT_EQ(decode_bytes(b), DecodeStatus::kBadField);
  b = rej;
  b[33] = 73 << 1;  // ARI longer than its 72 bytes
  EXPECT_EQ(decode_bytes(b), DecodeStatus::kBadField);
  b = rej;
  b[33] = 72 << 1;
  EXPECT_EQ(decode_bytes(b), DecodeStatus::kOk);
  b = encode(CmMad{1, 0, 0, 0, Mra{}});
  b[32] = 0b1100'0000;  // Message MRAed 3: reserved
  EXPECT_EQ(decode_bytes(b), DecodeStatus::kBadField);
  b = encode(CmMad{1, 0, 0, 0, SidrRep{}});
  b[29] = 73;  // Additional Information longer than 72 bytes
  EXPECT_EQ(decode_bytes(b), DecodeStatus::kBadField);
}

TEST(MadCodec, ABadMadLeavesTheOutputUntouched) {
  CmMad out{42, 43, 0, 0, Rtu{CommId(1), CommId(2), {}}};
  const CmMad before = out;
  MadBytes b = encode(CmMad{1, 0, 0, 0, Rej{}});
  b[33] = 100 << 1;
  EXPECT_EQ(decode(b, out), DecodeStatus::kBadField);
  EXPECT_EQ(out, before);
}

TEST(MadCodec, ALargerReceiveBufferDecodesItsFirst256Bytes) {
  const MadBytes m = encode(CmMad{5, 0, 0, 0, Drep{CommId(3), CommId(4), {}}});
  std::vector<uint8_t> buf(m.begin(), m.end());
  buf.resize(300, 0xee);
  CmMad out;
  ASSERT_EQ(decode(buf, out), DecodeStatus::kOk);
  EXPECT_EQ(std::get<Drep>(out.message).remote_comm_id, CommId(4));
}

TEST(MadCodec, ReservedBitsAreIgnoredOnReceive) {
  MadBytes b = encode(CmMad{1, 0, 0, 0, example_req()});
  b[18] = 0xff;  // header reserved
  b[28] = 0xff;  // REQ byte 4
  b[51] = 0xff;  // REQ bytes 24..27 reserved
  b[114] |= 0x0f;  // reserved bits between Flow Label and Packet Rate
  b[119] |= 0x07;  // below Local ACK Timeout
  CmMad out;
  ASSERT_EQ(decode(b, out), DecodeStatus::kOk);
  EXPECT_EQ(std::get<Req>(out.message), example_req());
}

TEST(MadCodec, DecodeStatusesHaveNames) {
  EXPECT_EQ(to_string(DecodeStatus::kOk), "ok");
  EXPECT_EQ(to_string(DecodeStatus::kBadMethod), "Method not SEND");
}

}  // namespace
}  // namespace softhca::cm
