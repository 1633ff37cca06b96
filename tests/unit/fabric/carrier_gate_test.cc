// The carrier's gate (issue 15, row 4): on InfiniBand a datagram passes only from the carrier
// endpoint its SLID's host has in the fabric registry (here a fake lookup), on Ethernet only from
// the RoCE port; each refusal is counted, and endpoints are looked up once until forget().
#include "fabric/carrier_gate.h"

#include <gtest/gtest.h>

#include <array>
#include <map>

namespace softhca::fabric {
namespace {

constexpr Ipv4Endpoint kHostB{kIpv4Loopback, 40002};  // LID 2's carrier
constexpr Ipv4Endpoint kHostC{kIpv4Loopback, 40003};  // LID 3's carrier
constexpr Ipv4Endpoint kStranger{kIpv4Loopback, 51000};

// An LRH (then zeros) whose SLID is `slid`: all the gate reads of a native packet.
std::array<uint8_t, 32> packet_from(uint16_t slid) {
  std::array<uint8_t, 32> p{};
  p[6] = static_cast<uint8_t>(slid >> 8);
  p[7] = static_cast<uint8_t>(slid);
  return p;
}

class NativeGate : public ::testing::Test {
 protected:
  std::map<uint16_t, Ipv4Endpoint> registry_{{2, kHostB}, {3, kHostC}};
  int lookups_ = 0;
  CarrierGate gate_{CarrierMode::kNativeIb, 0, [this](uint16_t lid) -> std::optional<Ipv4Endpoint> {
                      ++lookups_;
                      auto it = registry_.find(lid);
                      return it == registry_.end() ? std::nullopt : std::optional<Ipv4Endpoint>(it->second);
                    }};

  bool admits(uint16_t slid, Ipv4Endpoint from) {
    const std::array<uint8_t, 32> p = packet_from(slid);
    return gate_.admits(Datagram{from, Ipv4Endpoint{kIpv4Loopback, 40001}, p});
  }
};

TEST_F(NativeGate, ADatagramPassesOnlyFromTheEndpointRegisteredForItsSlid) {
  // Expect: host b's packet from host b's carrier passes.
  EXPECT_TRUE(admits(2, kHostB));
  // Expect: the right SLID from a port that is no host's carrier (any local user's socket): refused.
  EXPECT_FALSE(admits(2, kStranger));
  // Expect: host b's SLID from host c's carrier: refused (a host speaks only for its own LID).
  EXPECT_FALSE(admits(2, kHostC));
  // Expect: an SLID no host has: refused.
  EXPECT_FALSE(admits(9, kHostB));
  // Expect: the same port on another address of the machine: refused.
  EXPECT_FALSE(admits(2, Ipv4Endpoint{kIpv4Loopback + 1, kHostB.port}));
  EXPECT_EQ(gate_.refused(), 4u);
}

TEST_F(NativeGate, EndpointsAreLookedUpOnceUntilForgotten) {
  EXPECT_TRUE(admits(2, kHostB));
  EXPECT_TRUE(admits(2, kHostB));
  EXPECT_FALSE(admits(9, kHostB));
  EXPECT_FALSE(admits(9, kHostB));  // an unknown LID is remembered too: a flood costs no lookups
  EXPECT_EQ(lookups_, 2);
  // Host b restarts on another port, and a host with LID 9 joins: seen after forget() alone.
  registry_[2] = Ipv4Endpoint{kIpv4Loopback, 40022};
  registry_[9] = kHostB;
  EXPECT_FALSE(admits(2, Ipv4Endpoint{kIpv4Loopback, 40022}));
  gate_.forget();
  EXPECT_TRUE(admits(2, Ipv4Endpoint{kIpv4Loopback, 40022}));
  EXPECT_FALSE(admits(2, kHostB));
  EXPECT_TRUE(admits(9, kHostB));
  EXPECT_EQ(lookups_, 4);
}

TEST(RoceGate, ADatagramPassesOnlyFromTheRocePortOrTheEntropyRange) {
  CarrierGate gate(CarrierMode::kRoceV2, 4791, nullptr);
  const std::array<uint8_t, 64> p{};
  // Expect: from another host's carrier (address any, port 4791): passes; the device then checks
  // the address against the QP's path.
  EXPECT_TRUE(gate.admits(Datagram{Ipv4Endpoint{0x7f000003, 4791}, Ipv4Endpoint{0x7f000002, 4791}, p}));
  // Expect: from a flow's entropy port (softhca: 0xC000 and the next 15; Linux rxe: any from 0xC000,
  // as 57842 in linux_rxe_captures.h): passes.
  EXPECT_TRUE(gate.admits(Datagram{Ipv4Endpoint{0x7f000003, kRoceSrcPortMin}, Ipv4Endpoint{0x7f000002, 4791}, p}));
  EXPECT_TRUE(gate.admits(Datagram{Ipv4Endpoint{0x0a4d0002, 57842}, Ipv4Endpoint{0x0a4d0001, 4791}, p}));
  EXPECT_TRUE(gate.admits(Datagram{Ipv4Endpoint{0x7f000003, 0xffff}, Ipv4Endpoint{0x7f000002, 4791}, p}));
  // Expect: from any other port, whatever the address: refused and counted.
  EXPECT_FALSE(gate.admits(Datagram{Ipv4Endpoint{0x7f000003, 4792}, Ipv4Endpoint{0x7f000002, 4791}, p}));
  EXPECT_FALSE(gate.admits(Datagram{Ipv4Endpoint{0x7f000003, kRoceSrcPortMin - 1}, Ipv4Endpoint{0x7f000002, 4791}, p}));
  EXPECT_EQ(gate.refused(), 2u);
}

}  // namespace
}  // namespace softhca::fabric
