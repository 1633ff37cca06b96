#include "observe_run.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace softhca::acceptance {

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

int run_command(const std::string& command, std::string& output) {
  const std::string full = "timeout " + std::to_string(kCommandTimeoutS) + " sh -c " + shell_quote(command) + " 2>&1";
  output.clear();
  FILE* pipe = popen(full.c_str(), "r");
  if (pipe == nullptr) return -1;
  std::array<char, 4096> chunk{};
  size_t n = 0;
  while ((n = std::fread(chunk.data(), 1, chunk.size(), pipe)) > 0) output.append(chunk.data(), n);
  const int status = pclose(pipe);
  if (status == -1) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void remove_run_files(const ObserveRun& run) {
  if (run.dir.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(run.dir, ignored);
}

bool on_path(const std::string& program) {
  std::string out;
  return run_command("command -v " + shell_quote(program), out) == 0;
}

ObserveRun run_observe_workload(const std::string& workload, const std::string& extra_env) {
  ObserveRun r;
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/softhca-observe-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return r;
  r.dir = buf.data();
  r.pcap = r.dir + "/capture.pcap";
  r.trace = r.dir + "/trace.json";
  r.stats = r.dir + "/stats.json";
  r.manifest = r.dir + "/manifest.json";
  const std::string cmd = "SOFTHCA_NUM_DEVICES=2 SOFTHCA_PCAP=" + shell_quote(r.pcap) +
                          " SOFTHCA_TRACE=" + shell_quote(r.trace) + " SOFTHCA_STATS=" + shell_quote(r.stats) +
                          " " + extra_env + " " + shell_quote(workload) + " " + shell_quote(r.manifest);
  r.exit_code = run_command(cmd, r.output);
  return r;
}

}  // namespace softhca::acceptance
