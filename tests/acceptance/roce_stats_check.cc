// Checks the counters a RoCE host left with `softhca run --stats FILE` after a run against another
// stack on the wire (rxe_interop.sh, docs/roce-wire.md): packets came from another host and reached
// the device, and none was refused at the carrier (its UDP source port) or dropped as malformed
// (IPv4/UDP framing, the ICRC). The dump is one process's; its devices are the host's.
//   roce_stats_check FILE
// Prints each check that fails; exit 0 when all hold, 1 otherwise, 2 on bad input.
#include <cstdint>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: roce_stats_check FILE\n";
    return 2;
  }
  nlohmann::json dump;
  try {
    std::ifstream in(argv[1]);
    dump = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    std::cerr << argv[1] << ": " << e.what() << "\n";
    return 2;
  }
  int failed = 0;
  const auto expect = [&](bool ok, const std::string& what, uint64_t value) {
    if (ok) return;
    std::cout << "FAIL: " << what << " (" << value << ")\n";
    ++failed;
  };
  try {
    const nlohmann::json& devices = dump.at("devices");
    if (devices.empty()) {
      std::cout << "FAIL: the dump has no device\n";
      return 1;
    }
    for (const nlohmann::json& d : devices) {
      const std::string name = d.at("device").get<std::string>() + ": ";
      const nlohmann::json& carrier = d.at("carrier");
      const nlohmann::json& packets = d.at("packets");
      const auto from_other = carrier.at("from_other_hosts").get<uint64_t>();
      const auto foreign = carrier.at("dropped_foreign").get<uint64_t>();
      const auto received = packets.at("received").get<uint64_t>();
      const auto sent = packets.at("sent").get<uint64_t>();
      const auto malformed = packets.at("dropped").at("malformed").get<uint64_t>();
      expect(from_other > 0, name + "no datagram came from the other host", from_other);
      expect(received > 0, name + "the device received no packet", received);
      expect(sent > 0, name + "the device sent no packet", sent);
      expect(foreign == 0, name + "datagrams refused at the carrier (dropped_foreign)", foreign);
      expect(malformed == 0, name + "packets dropped as malformed", malformed);
    }
  } catch (const std::exception& e) {
    std::cerr << argv[1] << ": not a softhca stats dump: " << e.what() << "\n";
    return 2;
  }
  return failed == 0 ? 0 : 1;
}
