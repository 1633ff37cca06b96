#include "cm/cma_header.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

namespace softhca::cm {
namespace {

TEST(ServiceId, IsThePortSpaceShiftedAboveThePort) {
  // rdmacm.md 3.5: TCP 7471 -> 0x0000000001061D2F; UDP 7174 -> 0x0000000001111C06.
  EXPECT_EQ(service_id_of(PortSpace::kTcp, 7471), ServiceId(0x0000000001061D2F));
  EXPECT_EQ(service_id_of(PortSpace::kUdp, 7174), ServiceId(0x0000000001111C06));
  EXPECT_EQ(service_id_of(PortSpace::kIb, 1), ServiceId(0x00000000013F0001));
  EXPECT_EQ(service_id_of(PortSpace::kIpoib, 0xffff), ServiceId(0x000000000002FFFF));
}

TEST(ServiceId, GivesBackPortSpaceAndPort) {
  EXPECT_EQ(port_space_of(ServiceId(0x0000000001061D2F)), PortSpace::kTcp);
  EXPECT_EQ(port_space_of(ServiceId(0x0000000001111C06)), PortSpace::kUdp);
  EXPECT_EQ(port_space_of(ServiceId(0x00000000013F0000)), PortSpace::kIb);
  EXPECT_EQ(port_space_of(ServiceId(0x0000000000020000)), PortSpace::kIpoib);
  EXPECT_EQ(port_of(ServiceId(0x0000000001061D2F)), 7471);
  EXPECT_FALSE(port_space_of(ServiceId(0x0000000001070000)).has_value());  // no such port space
  EXPECT_FALSE(port_space_of(ServiceId(0x1000000001060000)).has_value());  // an AF_IB service ID
}

TEST(CmaHeader, Ipv4IsTheReferenceExampleByteForByte) {
  // 192.168.1.10:40000 -> 192.168.1.20 (rdmacm.md 4.10).
  std::array<uint8_t, kCmaHeaderBytes> out{};
  encode_cma_header(CmaHeader::ipv4(0xc0a8010a, 40000, 0xc0a80114), out);
  std::array<uint8_t, kCmaHeaderBytes> expected{};
  expected[1] = 0x40;
  expected[2] = 0x9c;
  expected[3] = 0x40;
  expected[16] = 0xc0, expected[17] = 0xa8, expected[18] = 0x01, expected[19] = 0x0a;
  expected[32] = 0xc0, expected[33] = 0xa8, expected[34] = 0x01, expected[35] = 0x14;
  EXPECT_EQ(out, expected);
  CmaHeader back;
  ASSERT_EQ(decode_cma_header(out, back), CmaHeaderStatus::kOk);
  EXPECT_EQ(back.ip_version, IpVersion::kV4);
  EXPECT_EQ(back.src_port, 40000);
  EXPECT_EQ(back.src_ipv4(), 0xc0a8010au);
  EXPECT_EQ(back.dst_ipv4(), 0xc0a80114u);
}

TEST(CmaHeader, Ipv6CarriesBothFullAddresses) {
  CmaHeader h;
  h.ip_version = IpVersion::kV6;
  h.src_port = 0x1234;
  for (size_t i = 0; i < 16; ++i) {
    h.src_addr[i] = static_cast<uint8_t>(0x20 + i);
    h.dst_addr[i] = static_cast<uint8_t>(0x40 + i);
  }
  std::array<uint8_t, kCmaHeaderBytes> out{};
  encode_cma_header(h, out);
  EXPECT_EQ(out[0], 0x00);
  EXPECT_EQ(out[1], 0x60);
  EXPECT_EQ(out[2], 0x12);
  EXPECT_EQ(out[3], 0x34);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(out[4 + i], 0x20 + i);
    EXPECT_EQ(out[20 + i], 0x40 + i);
  }
  CmaHeader back;
  ASSERT_EQ(decode_cma_header(out, back), CmaHeaderStatus::kOk);
  EXPECT_EQ(back, h);
}

TEST(CmaHeader, RefusesShortInputOtherVersionsAndOtherAddressFamilies) {
  std::array<uint8_t, kCmaHeaderBytes> b{};
  encode_cma_header(CmaHeader::ipv4(1, 2, 3), b);
  CmaHeader out;
  EXPECT_EQ(decode_cma_header(std::span<const uint8_t>(b).first(35), out), CmaHeaderStatus::kTooShort);
  auto bad = b;
  bad[0] = 1;
  EXPECT_EQ(decode_cma_header(bad, out), CmaHeaderStatus::kBadVersion);
  bad = b;
  bad[1] = 0x50;
  EXPECT_EQ(decode_cma_header(bad, out), CmaHeaderStatus::kBadIpVersion);
  bad[1] = 0x00;  // an AF_IB peer sends no header: the bytes are user data
  EXPECT_EQ(decode_cma_header(bad, out), CmaHeaderStatus::kBadIpVersion);
}

TEST(PrivateDataLimits, AreThoseOfRdmaConnect3) {
  EXPECT_EQ(kReqUserBytes, 56u);
  EXPECT_EQ(kReqPrivateDataBytes, 92u);
  EXPECT_EQ(kRepUserBytes, 196u);
  EXPECT_EQ(kRejUserBytes, 148u);
  EXPECT_EQ(kRtuUserBytes, 224u);
  EXPECT_EQ(kDreqUserBytes, 220u);
  EXPECT_EQ(kDrepUserBytes, 224u);
  EXPECT_EQ(kMraUserBytes, 222u);
  EXPECT_EQ(kSidrReqPrivateDataBytes, 216u);
  EXPECT_EQ(kSidrReqUserBytes, 180u);
  EXPECT_EQ(kSidrRepUserBytes, 136u);
}

TEST(PrivateDataLimits, ReqTakes56UserBytesAfterTheHeaderAndRefuses57) {
  Req req;
  const CmaHeader h = CmaHeader::ipv4(0x0a000001, 5000, 0x0a000002);
  std::vector<uint8_t> user(56);
  for (size_t i = 0; i < user.size(); ++i) user[i] = static_cast<uint8_t>(i + 1);
  ASSERT_TRUE(set_req_private_data(req, h, user));
  EXPECT_EQ(req.private_data.length, 92u);
  EXPECT_EQ(req.private_data.bytes[1], 0x40);
  EXPECT_EQ(req.private_data.bytes[36], 1);
  EXPECT_EQ(req.private_data.bytes[91], 56);
  const auto got = req_user_data(req);
  ASSERT_EQ(got.size(), 56u);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), user.begin()));

  const Req before = req;
  user.push_back(57);
  EXPECT_FALSE(set_req_private_data(req, h, user));
  EXPECT_EQ(req, before);
}

TEST(PrivateDataLimits, SidrReqTakes180UserBytesAndRefuses181) {
  SidrReq req;
  const CmaHeader h = CmaHeader::ipv4(0x0a000001, 5000, 0x0a000002);
  std::vector<uint8_t> user(180, 0xab);
  ASSERT_TRUE(set_sidr_req_private_data(req, h, user));
  EXPECT_EQ(sidr_req_user_data(req).size(), 180u);
  EXPECT_EQ(req.private_data.bytes[215], 0xab);
  user.push_back(0);
  EXPECT_FALSE(set_sidr_req_private_data(req, h, user));
}

TEST(PrivateDataLimits, AssignCutsAtTheFieldAndSaysSo) {
  PrivateData<4> p;
  const std::array<uint8_t, 6> six = {1, 2, 3, 4, 5, 6};
  EXPECT_FALSE(p.assign(six));
  EXPECT_EQ(p.length, 4u);
  EXPECT_EQ(p.bytes, (std::array<uint8_t, 4>{1, 2, 3, 4}));
  const std::array<uint8_t, 2> two = {9, 8};
  EXPECT_TRUE(p.assign(two));
  EXPECT_EQ(p.bytes, (std::array<uint8_t, 4>{9, 8, 0, 0}));
  EXPECT_EQ(p.view().size(), 2u);
}

}  // namespace
}  // namespace softhca::cm
