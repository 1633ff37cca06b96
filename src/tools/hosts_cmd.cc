#include "tools/hosts_cmd.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>

#include "runtime/fabric_registry.h"
#include "runtime/link_config.h"

namespace softhca::tools {

namespace {
// The address a host answers to (docs/addresses.md): the one it claimed in the registry (on
// Ethernet GID 0's, on InfiniBand the one rdma_cm resolves), else on InfiniBand the IPoIB-style
// default 127.F.(lid >> 8).(lid & 0xff).
uint32_t address_of(const HostsOptions& o, const runtime::HostAddress& h) {
  if (o.link == "roce") return ntohl(h.ipv4_be);
  if (h.ipoib_be != 0) return ntohl(h.ipoib_be);
  return runtime::loopback_host_ipv4(::geteuid(), o.fabric, h.lid);
}
}  // namespace

int run_hosts(const HostsOptions& o, std::ostream& out, std::ostream& err) {
  const runtime::FabricRegistry registry(o.dir, o.fabric);
  const std::vector<runtime::HostAddress> hosts = registry.hosts();
  if (!o.host.empty()) {
    for (const runtime::HostAddress& h : hosts) {
      if (h.host != o.host) continue;
      out << runtime::ipv4_to_string(address_of(o, h)) << "\n";
      return EXIT_SUCCESS;
    }
    err << "softhca hosts: no host '" << o.host << "' on fabric '" << o.fabric << "' (is a process of it running?)\n";
    return EXIT_FAILURE;
  }
  if (hosts.empty()) {
    err << "softhca hosts: fabric '" << o.fabric << "' has no host running (" << registry.path() << ")\n";
    return EXIT_FAILURE;
  }
  out << std::left << std::setw(20) << "host" << std::setw(8) << "LID" << std::setw(18) << "IPv4" << "carrier\n";
  for (const runtime::HostAddress& h : hosts) {
    const std::string carrier = h.udp_port == 0 ? std::string("-")
                                                : runtime::ipv4_to_string(ntohl(h.ipv4_be)) + ":" +
                                                      std::to_string(h.udp_port);
    out << std::setw(20) << h.host << std::setw(8) << h.lid << std::setw(18)
        << runtime::ipv4_to_string(address_of(o, h)) << carrier << "\n";
  }
  return EXIT_SUCCESS;
}

void add_hosts_command(CLI::App& app) {
  auto opts = std::make_shared<HostsOptions>();
  // The same defaults as the programs': SOFTHCA_FABRIC and SOFTHCA_LINK when set.
  if (const char* f = std::getenv("SOFTHCA_FABRIC"); f != nullptr && *f != '\0') opts->fabric = f;
  if (const char* l = std::getenv("SOFTHCA_LINK"); l != nullptr && std::string(l) == "roce") opts->link = "roce";
  CLI::App* sub = app.add_subcommand("hosts", "List the hosts of a fabric with their LIDs and IPv4 addresses");
  sub->footer(
      "The addresses are those rdma_cm resolves (docs/addresses.md): on InfiniBand each host's\n"
      "IPoIB-style 127.F.(lid >> 8).(lid & 0xff), on RoCE the address it claimed (its GID 0).\n"
      "--host H prints H's address alone, for scripts: rping -c -a $(softhca hosts --host b).");
  sub->add_option("--fabric", opts->fabric, "The fabric (default: SOFTHCA_FABRIC, else default)")->capture_default_str();
  sub->add_option("--link", opts->link, "Link layer of its hosts")->check(CLI::IsMember({"ib", "roce"}))
      ->capture_default_str();
  sub->add_option("--host", opts->host, "Print only this host's address");
  sub->callback([opts] {
    const int rc = run_hosts(*opts, std::cout, std::cerr);
    std::cout.flush();
    std::exit(rc);
  });
}

}  // namespace softhca::tools
