// A device's randomness (issue 15, row 13): the first QPN and the memory keys of a freshly
// formatted device come from DeviceConfig::seed, so two devices (or two runs of one) do not hand
// out the same QPNs 16, 17, ... and keys 0x101, 0x202, ...; the same seed gives the same ones.
#include <gtest/gtest.h>

#include <set>

#include "device_harness.h"
#include "hca/device_state.h"

namespace softhca::test {
namespace {

hca::DeviceConfig seeded(uint64_t seed) {
  hca::DeviceConfig c = hca::default_device_config(0);
  c.seed = seed;
  return c;
}

TEST(DeviceSeed, FreshDevicesWithDifferentSeedsGiveDifferentFirstQpnsAndKeys) {
  std::set<uint32_t> qpns, keys;
  for (uint64_t seed = 100; seed < 116; ++seed) {
    DeviceHarness h(hwif::QpType::kRc, seeded(seed));
    // Expect: a 24-bit QPN that is not one of the special QPs' (IBA 3.5.5), with room for max_qp.
    EXPECT_GE(h.qpn(), hca::kFirstQpn);
    EXPECT_LE(h.qpn(), hca::kQpnLimit - h.device().config().caps.max_qp);
    qpns.insert(h.qpn());
    keys.insert(h.key());
  }
  // Expect: sixteen devices, sixteen first QPNs and sixteen first keys (before: 16 and 0x101 each).
  EXPECT_EQ(qpns.size(), 16u);
  EXPECT_EQ(keys.size(), 16u);
  EXPECT_EQ(qpns.count(hca::kFirstQpn), 0u);
  EXPECT_EQ(keys.count(0x101), 0u);
}

TEST(DeviceSeed, TheSameSeedGivesTheSameQpnsAndKeys) {
  DeviceHarness a(hwif::QpType::kRc, seeded(42));
  DeviceHarness b(hwif::QpType::kRc, seeded(42));
  EXPECT_EQ(a.qpn(), b.qpn());
  EXPECT_EQ(a.key(), b.key());
}

}  // namespace
}  // namespace softhca::test
