// `softhca port down|up [--fabric F] [--host H]`: sets the port of a host's softhca_0 down or up,
// what a subnet manager's PortInfo Set does on a real fabric (docs/events.md): down, it carries no
// packets and every context open on the device gets IBV_EVENT_PORT_ERR on its async_fd; up again,
// IBV_EVENT_PORT_ACTIVE. The command attaches to the host as a process does, for as long as it runs.
#pragma once
#include <iosfwd>
#include <string>

namespace CLI {
class App;
}

namespace softhca::tools {

struct PortOptions {
  std::string state;   // "down" or "up"
  std::string fabric;  // empty: SOFTHCA_FABRIC, else default
  std::string host;    // empty: SOFTHCA_HOST, else the default host
};

// 0, or 1 with a reason on err (no device, or the device refused).
int run_port(const PortOptions& options, std::ostream& err);
void add_port_command(CLI::App& app);

}  // namespace softhca::tools
