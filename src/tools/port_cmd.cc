#include "tools/port_cmd.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include "hwif/cmd.h"
#include "hwif/device_interface.h"
#include "runtime/runtime.h"

namespace softhca::tools {

int run_port(const PortOptions& o, std::ostream& err) {
  // The runtime reads these when this process first attaches; the shared host, never a private
  // in-process device.
  if (!o.fabric.empty()) ::setenv("SOFTHCA_FABRIC", o.fabric.c_str(), 1);
  if (!o.host.empty()) ::setenv("SOFTHCA_HOST", o.host.c_str(), 1);
  ::unsetenv("SOFTHCA_NUM_DEVICES");
  const auto devices = runtime::Runtime::process().devices();
  if (devices.empty()) {
    err << "softhca port: no device (see the reason above)\n";
    return EXIT_FAILURE;
  }
  hwif::SetPortStateIn in;
  in.active = o.state == "up";
  if (const int e = hwif::exec_cmd(devices[0]->commands(), in); e != 0) {
    err << "softhca port: the device refused: " << std::strerror(e) << "\n";
    return EXIT_FAILURE;
  }
  return EXIT_SUCCESS;
}

void add_port_command(CLI::App& app) {
  auto opts = std::make_shared<PortOptions>();
  CLI::App* sub = app.add_subcommand("port", "Set the port of a host's HCA down or up (IBV_EVENT_PORT_ERR / PORT_ACTIVE)");
  sub->footer(
      "As an SM's PortInfo Set: down, the port carries no packets, ibv_query_port says\n"
      "PORT_DOWN and every open context gets IBV_EVENT_PORT_ERR; up, IBV_EVENT_PORT_ACTIVE\n"
      "(docs/events.md). The host is the one the programs of SOFTHCA_FABRIC/SOFTHCA_HOST use.");
  sub->add_option("state", opts->state, "down or up")->required()->check(CLI::IsMember({"down", "up"}));
  sub->add_option("--fabric", opts->fabric, "The fabric (default: SOFTHCA_FABRIC, else default)");
  sub->add_option("--host", opts->host, "The host (default: SOFTHCA_HOST, else the default host)");
  sub->callback([opts] {
    const int rc = run_port(*opts, std::cerr);
    std::exit(rc);  // exit, not _exit: the runtime detaches at exit
  });
}

}  // namespace softhca::tools
