// `softhca stats FILE`: a real SOFTHCA_STATS dump (Runtime::dump_stats after a doorbell) shown as a
// table and as normalized JSON, and the errors for files that are not such a dump.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "hwif/uar.h"
#include "runtime/runtime.h"
#include "tools/stats_cmd.h"

namespace softhca::tools {
namespace {

std::string temp_path(const char* name) { return std::string(::testing::TempDir()) + name; }

// A dump of two devices, softhca_0 having rung one doorbell.
std::string make_dump() {
  auto rt = runtime::Runtime::create(2);
  const uint64_t db = 0;
  rt->devices()[0]->host_port().write_doorbell(hwif::uar_page_offset(0) + hwif::kBfOffset, &db,
                                               pcie::TlpCause::kDoorbell);
  const std::string path = temp_path("softhca-stats-test.json");
  rt->dump_stats(path);
  return path;
}

struct Result {
  int rc;
  std::string out;
  std::string err;
};

Result stats(const std::string& path, bool json) {
  std::ostringstream out;
  std::ostringstream err;
  const int rc = run_stats({path, json}, out, err);
  return {rc, out.str(), err.str()};
}

TEST(StatsCmd, TheTableShowsEachDeviceItsTlpsByCauseAndItsPacketCounters) {
  const Result r = stats(make_dump(), false);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("softhca_0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("softhca_1\n"), std::string::npos) << r.out;
  // Expect: the doorbell row: MWr, doorbell, downstream, 1 TLP, 8 payload bytes, 32 wire bytes.
  EXPECT_NE(r.out.find("MWr   doorbell downstream    1           8       32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wire bytes: downstream 32, upstream 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("packets sent"), std::string::npos);
  EXPECT_NE(r.out.find("(none)"), std::string::npos) << "softhca_1 made no TLP";
}

TEST(StatsCmd, JsonIsTheDumpNormalized) {
  const std::string path = make_dump();
  const Result r = stats(path, true);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::ifstream in(path);
  const nlohmann::json dump = nlohmann::json::parse(in);
  EXPECT_EQ(nlohmann::json::parse(r.out), dump);
  EXPECT_EQ(r.out, dump.dump(2) + "\n");
}

TEST(StatsCmd, AFileThatIsMissingNotJsonOrNotADumpFailsWithAReason) {
  Result r = stats(temp_path("does-not-exist.json"), false);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;

  const std::string junk = temp_path("softhca-stats-junk.json");
  std::ofstream(junk) << "{ not json";
  r = stats(junk, false);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("is not JSON"), std::string::npos) << r.err;

  const std::string other = temp_path("softhca-stats-other.json");
  std::ofstream(other) << R"({"devices": [{"device": "softhca_0", "pcie": {"tlps": [{"type": "MWr"}]}}]})";
  r = stats(other, true);
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("softhca_0: a TLP row has no \"cause\""), std::string::npos) << r.err;
}

}  // namespace
}  // namespace softhca::tools
