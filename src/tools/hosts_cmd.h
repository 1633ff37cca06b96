// `softhca hosts [--fabric F] [--link ib|roce]`: the hosts of a fabric on this machine, as its
// registry lists them (runtime/fabric_registry.h), with the address each answers to in rdma_cm
// (docs/addresses.md): name, LID, IPv4 address, carrier endpoint. What `ip addr` and `ibhosts`
// tell on a real machine, so that a script can name another host's address.
#pragma once
#include <iosfwd>
#include <string>

namespace CLI {
class App;
}

namespace softhca::tools {

struct HostsOptions {
  std::string fabric = "default";
  std::string link = "ib";       // the fabric's link layer: how its hosts' addresses are given
  std::string dir = "/dev/shm";  // the base of the registry (SegmentOptions::dir)
  std::string host;              // only this host, and only its address (for scripts)
};

// 0, or 1 with a reason on err (no such fabric or host).
int run_hosts(const HostsOptions& options, std::ostream& out, std::ostream& err);
void add_hosts_command(CLI::App& app);

}  // namespace softhca::tools
