// Machine profiles in TOML (profiles/*.toml, tools/model_profile.h): the built-in profiles load
// and give every parameter a value with a cited source, and a bad file or override is refused
// with the place and the reason.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "sim/link_rate.h"
#include "tools/model_profile.h"
#include "tools/model_sweep.h"

namespace softhca::tools {
namespace {

std::string error_of(std::string_view toml) {
  try {
    parse_profile(toml, "test.toml");
  } catch (const ProfileError& e) {
    return e.what();
  }
  return "";
}

TEST(Profiles, TheFiveBuiltInProfilesLoad) {
  for (std::string_view name : {"thunderx2-cx4-edr", "x86-gen3-cx4-edr", "x86-gen4-cx6-hdr", "nfp6000-bdw-e5-2630v4",
                                "t630-e5-2643v4-cx4-edr"}) {
    SCOPED_TRACE(name);
    const sim::MachineProfile p = load_profile(name);
    EXPECT_EQ(p.name, name);
    EXPECT_FALSE(p.description.empty());
  }
  EXPECT_EQ(embedded_profile_names().size(), 5u);
}

TEST(Profiles, TheSeedsMachineIsGen3x16With125nsRoundTripAndEdr4x_S2) {
  const sim::MachineProfile p = load_profile("thunderx2-cx4-edr");
  EXPECT_EQ(p.pcie.generation, 3u);
  EXPECT_EQ(p.pcie.lanes, 16u);
  EXPECT_EQ(p.pcie.rtt_ns, 125);
  EXPECT_EQ(p.ib.lane_gbps * p.ib.width, 100);  // W5: EDR 4x
  const sim::MachineProfile hdr = load_profile("x86-gen4-cx6-hdr");
  EXPECT_NEAR(sim::pcie_tlp_gbps(hdr.pcie.generation, hdr.pcie.lanes, hdr.pcie.mps_bytes), 227.40, 0.005);  // P8
  EXPECT_EQ(hdr.ib.lane_gbps * hdr.ib.width, 200);  // W5: HDR 4x
}

// Every parameter is set in every built-in profile, on a line of its own whose comment names a
// figures.md row or says "assumed".
TEST(Profiles, EveryNumberInEveryBuiltInProfileNamesItsSource) {
  for (std::string_view name : embedded_profile_names()) {
    SCOPED_TRACE(name);
    std::istringstream in{std::string(embedded_profile_text(name))};
    std::string table;
    std::string line;
    std::vector<std::string> keys;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      if (line[0] == '[') {
        table = line.substr(1, line.find(']') - 1);
        continue;
      }
      const size_t eq = line.find('=');
      ASSERT_NE(eq, std::string::npos) << line;
      std::string key = line.substr(0, line.find_first_of(" =", 0));
      if (table.empty()) continue;  // name, description
      keys.push_back(table + "." + key);
      const size_t hash = line.find('#', eq);
      ASSERT_NE(hash, std::string::npos) << "no source comment: " << line;
      const std::string comment = line.substr(hash);
      bool cited = comment.find("assumed") != std::string::npos;
      for (const char* row : {"S1", "S2", "S3", "P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "K1", "K2", "K3", "K4",
                              "K5", "K6", "K7", "P9", "P10", "P11", "W1", "W4", "W5", "W6", "W7"}) {
        cited = cited || comment.find(row) != std::string::npos;
      }
      EXPECT_TRUE(cited) << "source neither a figures.md row nor \"assumed\": " << line;
    }
    for (const sim::ProfileKey& k : sim::profile_keys()) {
      EXPECT_NE(std::find(keys.begin(), keys.end(), std::string(k.key)), keys.end()) << "missing " << k.key;
    }
  }
}

TEST(Profiles, AnUnknownKeyIsRefusedWithItsLineAndTheKnownKeys) {
  const std::string e = error_of("name = \"x\"\n[pcie]\nrtt = 100\n");
  EXPECT_NE(e.find("test.toml:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key \"pcie.rtt\""), std::string::npos) << e;
  EXPECT_NE(e.find("rtt_ns"), std::string::npos) << e;  // Expect: the known keys are listed.
}

TEST(Profiles, BadValuesAreRefusedWithTheReason) {
  EXPECT_NE(error_of("[pcie]\nrtt_ns = \"fast\"\n").find("must be a number"), std::string::npos);
  EXPECT_NE(error_of("[pcie]\ngeneration = 9\n").find("out of range"), std::string::npos);
  EXPECT_NE(error_of("[pcie]\necrc = 1\n").find("true or false"), std::string::npos);
  EXPECT_NE(error_of("[pcie]\nlanes = 12\n").find("pcie.lanes"), std::string::npos);
  EXPECT_NE(error_of("[gpu]\ncores = 1\n").find("unknown key \"gpu\""), std::string::npos);
  EXPECT_NE(error_of("pcie = 3\n").find("must be a table"), std::string::npos);
  EXPECT_NE(error_of("[pcie\n").find("test.toml:1:"), std::string::npos);  // a TOML syntax error
}

TEST(Profiles, AFileLeavingKeysOutKeepsTheDefaults) {
  const sim::MachineProfile p = parse_profile("name = \"mine\"\n[pcie]\nrtt_ns = 300\none_way_ns = 100\n", "mine.toml");
  EXPECT_EQ(p.name, "mine");
  EXPECT_EQ(p.pcie.rtt_ns, 300);
  EXPECT_EQ(p.pcie.lanes, 16u);
}

TEST(Profiles, OverridesSetOneValueOrSayWhyNot) {
  sim::MachineProfile p = load_profile(kDefaultProfileName);
  apply_override(p, "pcie.rtt_ns=250");
  EXPECT_EQ(p.pcie.rtt_ns, 250);
  EXPECT_EQ(p.pcie.one_way_ns, 125);  // Expect: the one-way latency scales with the round trip.
  EXPECT_THROW(apply_override(p, "pcie.rtt_ns"), ProfileError);
  EXPECT_THROW(apply_override(p, "pcie.speed=3"), ProfileError);
  EXPECT_THROW(apply_override(p, "pcie.lanes=3"), ProfileError);
}

TEST(Profiles, AMissingProfileNamesTheBuiltInOnes) {
  try {
    load_profile("no-such-profile");
    FAIL();
  } catch (const ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("thunderx2-cx4-edr"), std::string::npos);
  }
}

TEST(SweepAxes, ListsLinearAndGeometricRangesAreUnderstood) {
  EXPECT_EQ(parse_axis("postlist=1,2,4").values, (std::vector<std::string>{"1", "2", "4"}));
  EXPECT_EQ(parse_axis("size=8:64:x2").values, (std::vector<std::string>{"8", "16", "32", "64"}));
  EXPECT_EQ(parse_axis("pcie.rtt_ns=100:300:100").values, (std::vector<std::string>{"100", "200", "300"}));
  EXPECT_EQ(parse_axis("blueflame=off,on").name, "blueflame");
  EXPECT_THROW(parse_axis("colour=1,2"), std::invalid_argument);
  EXPECT_THROW(parse_axis("size=1:8"), std::invalid_argument);
  EXPECT_THROW(parse_axis("size=8:64:x1"), std::invalid_argument);
  EXPECT_THROW(parse_axis("pcie.mps_bytes=128,256"), std::invalid_argument);  // fixed per process
}

}  // namespace
}  // namespace softhca::tools
