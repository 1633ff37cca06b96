// SOFTHCA_STATS dumps written by many processes at once (an MPI job's ranks exiting together):
// the file always holds one whole dump.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.h"
#include "runtime/stats_json.h"

namespace softhca::runtime {
namespace {

TEST(StatsDump, ProcessesDumpingToOnePathAtOnceLeaveOneWholeDumpAndNoTemporaryFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("softhca-stats-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "stats.json").string();
  constexpr int kWriters = 4;
  constexpr int kRounds = 200;
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // A dump of some size (tens of KiB, as a device with many QPs gives), different per writer.
      nlohmann::json qps = nlohmann::json::array();
      for (int q = 0; q < 400; ++q) qps.push_back({{"qpn", q}, {"writer", w}, {"name", std::string(40, 'a' + w)}});
      const nlohmann::json dump{{"devices", nlohmann::json::array({{{"writer", w}, {"qps", qps}}})}};
      for (int r = 0; r < kRounds; ++r)
        if (!write_stats_dump(path, dump)) _exit(1);
      _exit(0);
    }
    children.push_back(pid);
  }
  // Read while they write (20 s at most): each read is a whole dump.
  int parsed = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::vector<int> status(children.size(), -1);
  for (size_t done = 0; done < children.size() && std::chrono::steady_clock::now() < deadline;) {
    std::ifstream in(path);
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << "read " << parsed << ": not one whole dump";
      EXPECT_EQ(j["devices"][0]["qps"].size(), 400u);
      ++parsed;
    }
    done = 0;
    for (size_t c = 0; c < children.size(); ++c) {
      int st = 0;
      if (status[c] < 0 && ::waitpid(children[c], &st, WNOHANG) == children[c]) status[c] = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
      if (status[c] >= 0) ++done;
    }
  }
  for (size_t c = 0; c < children.size(); ++c) {
    if (status[c] < 0) status[c] = test::reap_bounded(children[c], 1000);
    EXPECT_EQ(status[c], 0) << "writer " << c;
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(nlohmann::json::parse(text.str(), nullptr, false).is_discarded());
  // Expect: only the dump itself is left (no writer's temporary file).
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  EXPECT_GT(parsed, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace softhca::runtime
