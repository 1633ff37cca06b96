// An Ethernet (RoCEv2) port: its active MTU follows the interface MTU as Linux computes it, its
// port attributes and GID table are what verbs programs expect of RoCE, and a device region
// formatted for one link refuses a process that asks for another, naming both.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "fabric/packet/roce.h"
#include "hca/device.h"
#include "hca/device_config.h"
#include "hca/device_state.h"

namespace softhca::test {
namespace {

using hwif::Mtu;

constexpr uint32_t kIp = 0x0a000001;  // 10.0.0.1

TEST(RocePort, ActiveMtuLeavesRoomForTheLargestHeadersAsLinuxDoes) {
  // Expect: 1500 - 96 = 1404 -> 1024 (rxe over a standard Ethernet netdev reports 1024).
  EXPECT_EQ(hca::roce_active_mtu(1500), Mtu::k1024);
  EXPECT_EQ(hca::roce_active_mtu(2048 + 96), Mtu::k2048);
  EXPECT_EQ(hca::roce_active_mtu(2048 + 95), Mtu::k1024);
  EXPECT_EQ(hca::roce_active_mtu(9000), Mtu::k4096);
  EXPECT_EQ(hca::roce_active_mtu(65536), Mtu::k4096);
  EXPECT_EQ(hca::roce_active_mtu(0), Mtu::k256);
}

TEST(RocePort, AnEthernetPortHasLidZeroAndItsIpv4MappedAddressAsGidZero) {
  hca::DeviceConfig c = hca::default_device_config(0);
  hca::use_ethernet_link(c, kIp, 1500, 4791);
  EXPECT_EQ(c.port.link_layer, hwif::LinkLayer::kEthernet);
  EXPECT_EQ(c.port.lid, 0);
  EXPECT_EQ(c.port.sm_lid, 0);
  EXPECT_EQ(c.port.active_mtu, Mtu::k1024);
  EXPECT_EQ(c.port.max_mtu, Mtu::k4096);
  const std::array<uint8_t, 16> want = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  EXPECT_EQ(c.port.gids[0].raw, want);
  for (size_t i = 1; i < c.port.gids.size(); ++i) EXPECT_EQ(c.port.gids[i], hwif::Gid{}) << i;
  EXPECT_EQ(c.ipv4, kIp);
  EXPECT_EQ(c.roce_udp_port, 4791);
}

class RegionLink : public ::testing::Test {
 protected:
  void SetUp() override {
    ib_ = hca::default_device_config(0);
    roce_ = ib_;
    hca::use_ethernet_link(roce_, kIp, 1500, 4791);
  }
  // Formats a region for `formatted`, then attaches it with `asked`: the exception's text, or "".
  std::string attach_error(const hca::DeviceConfig& formatted, const hca::DeviceConfig& asked) {
    hca::PrivateRegion region(hca::region_layout_bytes(formatted) + hca::kMinHeapBytes);
    hca::open_region(region.region(), hca::RegionInit::kFormat, formatted);
    try {
      hca::open_region(region.region(), hca::RegionInit::kAttach, asked);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  }
  hca::DeviceConfig ib_;
  hca::DeviceConfig roce_;
};

TEST_F(RegionLink, TheSameLinkAttaches) {
  EXPECT_EQ(attach_error(roce_, roce_), "");
  EXPECT_EQ(attach_error(ib_, ib_), "");
}

TEST_F(RegionLink, AnotherLinkLayerIsRefusedNamingBothLinks) {
  const std::string e = attach_error(roce_, ib_);
  EXPECT_NE(e.find("Ethernet (RoCEv2 from 10.0.0.1, UDP port 4791)"), std::string::npos) << e;
  EXPECT_NE(e.find("asks for InfiniBand"), std::string::npos) << e;
  EXPECT_NE(e.find("SOFTHCA_LINK"), std::string::npos) << e;
  EXPECT_NE(attach_error(ib_, roce_).find("port is InfiniBand"), std::string::npos);
}

TEST_F(RegionLink, AnotherAddressOrPortIsRefused) {
  hca::DeviceConfig other = roce_;
  other.ipv4 = kIp + 1;
  other.port.gids[0].raw = fabric::ipv4_mapped_gid(kIp + 1);
  EXPECT_NE(attach_error(roce_, other).find("10.0.0.2"), std::string::npos);
  other = roce_;
  other.roce_udp_port = 5000;
  EXPECT_NE(attach_error(roce_, other).find("UDP port 5000"), std::string::npos);
}

}  // namespace
}  // namespace softhca::test
