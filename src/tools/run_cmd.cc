#include "tools/run_cmd.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "fabric/fault_spec.h"
#include "view/device_facts.h"
#include "view/mount_view.h"

namespace softhca::tools {

namespace {

namespace fs = std::filesystem;

constexpr int kExitCannotRun = 127;  // what a shell returns for a command it cannot execute

bool has_library(const fs::path& dir) {
  std::error_code ec;
  return !dir.empty() && fs::exists(dir / "libibverbs.so.1", ec);
}

fs::path executable_dir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path{} : self.parent_path();
}

void set(std::vector<std::string>& env, const char* name, const std::string& value) {
  if (!value.empty()) env.push_back(std::string(name) + "=" + value);
}

}  // namespace

std::string find_lib_dir() {
  if (const char* d = std::getenv("SOFTHCA_LIB_DIR"); d != nullptr && has_library(d)) return d;
  const fs::path exe = executable_dir();
  // Build tree: <build>/src/tools/softhca next to <build>/lib; install tree: <prefix>/bin/softhca
  // next to <prefix>/lib/softhca.
  for (const fs::path& candidate : {exe / ".." / ".." / "lib", exe / ".." / "lib" / "softhca"}) {
    if (has_library(candidate)) return fs::weakly_canonical(candidate).string();
  }
  if (has_library(SOFTHCA_BUILD_LIB_DIR)) return SOFTHCA_BUILD_LIB_DIR;
  return {};
}

std::vector<std::string> run_environment(const RunCommandOptions& o, const std::string& lib_dir) {
  std::vector<std::string> env;
  const char* old = std::getenv("LD_LIBRARY_PATH");
  env.push_back("LD_LIBRARY_PATH=" + lib_dir + (old != nullptr && *old != '\0' ? ":" + std::string(old) : ""));
  set(env, "SOFTHCA_HOST", o.host);
  set(env, "SOFTHCA_FABRIC", o.fabric);
  set(env, "SOFTHCA_LINK", o.link);
  set(env, "SOFTHCA_IP", o.ip);
  set(env, "SOFTHCA_PCAP", o.pcap);
  set(env, "SOFTHCA_TRACE", o.trace);
  set(env, "SOFTHCA_STATS", o.stats);
  set(env, "SOFTHCA_BLUEFLAME", o.blueflame);
  set(env, "SOFTHCA_FAULTS", o.faults);
  return env;
}

namespace {

// The device view (docs/device-view.md): read the devices this environment gives, then lay their
// sysfs and /dev entries out in a mount namespace the program inherits. A view that cannot be made
// is said on stderr and the program runs without it (verbs alone still work).
void present_view() {
  std::vector<view::DeviceFacts> devices;
  std::string error;
  if (!view::gather_device_facts(devices, error) || !view::enter_device_view(devices, error)) {
    std::cerr << "softhca run: no device view (" << error << "); /sys/class/infiniband and /dev/infiniband "
              << "are not shown to the program\n";
  }
}

[[noreturn]] void exec_program(const RunCommandOptions& options) {
  const std::string lib_dir = options.lib_dir.empty() ? find_lib_dir() : options.lib_dir;
  if (lib_dir.empty() || !has_library(lib_dir)) {
    std::cerr << "softhca run: cannot find softhca's libibverbs.so.1"
              << (options.lib_dir.empty() ? "" : " in " + options.lib_dir)
              << " (build it, or set SOFTHCA_LIB_DIR / --lib-dir)\n";
    std::exit(kExitCannotRun);
  }
  for (const std::string& kv : run_environment(options, lib_dir)) {
    const size_t eq = kv.find('=');
    ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
  if (!options.no_view) present_view();
  std::vector<char*> argv;
  argv.reserve(options.command.size() + 1);
  for (const std::string& a : options.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::cerr << "softhca run: cannot run " << options.command[0] << ": " << std::strerror(errno) << "\n";
  std::exit(kExitCannotRun);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto options = std::make_shared<RunCommandOptions>();
  CLI::App* run = app.add_subcommand("run", "Run an unmodified verbs program on softhca (its host's HCA is softhca_0)");
  run->add_option("--host", options->host, "Simulated host this process runs on (own HCA and LID; default host0)");
  run->add_option("--fabric", options->fabric, "Subnet the host is on (default: default)");
  run->add_option("--link", options->link, "Link layer of the port")->check(CLI::IsMember({"ib", "roce"}));
  run->add_option("--ip", options->ip,
                  "IPv4 address of the host (RoCE: GID 0 and the carrier's address; InfiniBand: its IPoIB-style "
                  "address; default: a distinct loopback address, docs/addresses.md)")
      ->check(CLI::ValidIPV4);
  run->add_option("--pcap", options->pcap, "Capture every packet to this pcap file");
  run->add_option("--trace", options->trace, "Write a Chrome/Perfetto trace of TLPs and packets");
  run->add_option("--stats", options->stats, "Dump the PCIe and packet counters as JSON at exit");
  run->add_option("--blueflame", options->blueflame, "BlueFlame policy")
      ->check(CLI::IsMember({"auto", "off", "prefer"}));
  run->add_option("--faults", options->faults,
                  "Faulty links: loss=P,dup=P,reorder=P,corrupt=P,delay=50us,seed=N (docs/reliability.md)")
      ->check([](const std::string& spec) {
        fabric::FaultSpec parsed;
        std::string error;
        return fabric::parse_fault_spec(spec, parsed, error) ? std::string() : error;
      });
  run->add_option("--lib-dir", options->lib_dir, "Directory of softhca's libibverbs.so.1");
  run->add_flag("--no-view", options->no_view,
                "Do not present /sys/class/infiniband and /dev/infiniband to the program (docs/device-view.md)");
  run->add_option("command", options->command, "PROGRAM ARGS... (after --)")->required();
  run->callback([options] { exec_program(*options); });
}

}  // namespace softhca::tools
