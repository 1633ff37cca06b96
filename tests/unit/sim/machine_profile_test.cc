// Profile parameters: every key settable by name with its bounds checked, relations between keys
// validated, and the what-if rule that changing the PCIe round trip carries the one-way latency.
#include "sim/machine_profile.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "sim/timing_params.h"

namespace softhca::sim {
namespace {

TEST(MachineProfile, TheDefaultsAreTheSeedsMachineAndValidate) {
  const MachineProfile p;
  EXPECT_EQ(p.name, "thunderx2-cx4-edr");
  EXPECT_EQ(p.pcie.rtt_ns, 125);  // S2
  EXPECT_EQ(p.pcie.generation, 3u);
  EXPECT_EQ(p.pcie.lanes, 16u);
  EXPECT_EQ(p.ib.lane_gbps, 25.0);  // W5 EDR
  EXPECT_FALSE(validate(p).has_value());
}

TEST(MachineProfile, EveryKeyIsUniqueAndNamesItsSource) {
  std::set<std::string_view> keys;
  for (const ProfileKey& k : profile_keys()) {
    EXPECT_TRUE(keys.insert(k.key).second) << k.key;
    EXPECT_FALSE(k.source.empty()) << k.key;
    EXPECT_NE(find_profile_key(k.key), nullptr);
  }
}

TEST(MachineProfile, ValuesAreSetByKeyAndReadBack) {
  MachineProfile p;
  EXPECT_FALSE(set_profile_value(p, "pcie.rtt_ns", "250").has_value());
  EXPECT_EQ(p.pcie.rtt_ns, 250);
  EXPECT_FALSE(set_profile_value(p, "pcie.generation", "4").has_value());
  EXPECT_EQ(p.pcie.generation, 4u);
  EXPECT_FALSE(set_profile_value(p, "pcie.ecrc", "true").has_value());
  EXPECT_TRUE(p.pcie.ecrc);
  EXPECT_EQ(profile_value_text(p, *find_profile_key("pcie.rtt_ns")), "250");
}

TEST(MachineProfile, BadKeysAndValuesSayWhatIsWrong) {
  MachineProfile p;
  EXPECT_EQ(set_profile_value(p, "pcie.rtt", "1").value(), "unknown profile key \"pcie.rtt\"");
  EXPECT_NE(set_profile_value(p, "pcie.rtt_ns", "fast").value().find("needs a number"), std::string::npos);
  EXPECT_NE(set_profile_value(p, "pcie.generation", "7").value().find("out of range"), std::string::npos);
  EXPECT_NE(set_profile_value(p, "pcie.lanes", "2.5").value().find("whole number"), std::string::npos);
  EXPECT_NE(set_profile_value(p, "pcie.ecrc", "maybe").value().find("true or false"), std::string::npos);
}

TEST(MachineProfile, RelationsBetweenKeysAreChecked) {
  MachineProfile p;
  p.pcie.lanes = 12;
  EXPECT_TRUE(validate(p).has_value());
  p = MachineProfile{};
  p.pcie.completion_bytes = 512;  // larger than MPS 256
  EXPECT_TRUE(validate(p).has_value());
  p = MachineProfile{};
  p.pcie.one_way_ns = 100;  // two one-way trips longer than the 125 ns round trip
  EXPECT_TRUE(validate(p).has_value());
  EXPECT_THROW(derive_timing(p), std::invalid_argument);
}

TEST(MachineProfile, AWhatIfOnTheRoundTripScalesTheOneWayLatencyWithIt) {
  MachineProfile p;
  EXPECT_FALSE(set_profile_what_if(p, "pcie.rtt_ns", "250").has_value());
  EXPECT_EQ(p.pcie.rtt_ns, 250);
  EXPECT_EQ(p.pcie.one_way_ns, 125);
  EXPECT_FALSE(validate(p).has_value());
}

TEST(MachineProfile, TimingParametersAreIntegerPicoseconds) {
  const TimingParams t = derive_timing(MachineProfile{});
  EXPECT_EQ(t.pcie_one_way + t.pcie_one_way + t.pcie_turnaround, 125_ns);
  EXPECT_EQ(t.switch_hop, 90_ns);  // W7
  EXPECT_EQ(t.ib_fs_per_byte, 80000u);  // EDR 4x: 100 Gb/s
  EXPECT_EQ(ns_to_ps(62.5), 62500_ps);
}

}  // namespace
}  // namespace softhca::sim
