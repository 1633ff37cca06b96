// Checks the PCIe counters a perftest run left with `softhca run --stats FILE` (the SOFTHCA_STATS
// dump, docs/observability.md; one file per process of the host) against the feature it asked for:
//   perftest_stats_check KIND WQES FILE...
// WQES is the number of send WQEs the client posted (perftest: -n per QP, times -q). KIND:
//   postlist32  --post_list 32: exactly WQES/32 doorbells (one per list) and no BlueFlame write;
//   cqmod100    --cq-mod 100 (RDMA WRITE): exactly WQES/100 CQE writes (the responder of a WRITE
//               writes none);
//   inline      -s 8 --inline_size 64: no payload read at all (MRd or CplD), and one payload write
//               per message (8 bytes fit one TLP), so the data did arrive.
// A dump's PCIe counters are the dumping process's own. Same-host traffic runs on the posting
// thread, which also acts as the responder HCA (docs/live-mode.md), so the client's dump holds
// nearly all the test traffic; but a device timer (an RNR or ACK-timeout retry) may fire in any
// process of the host, whose thread then does the retried work (ib_send_bw: RNR NAKs while the
// server reposts receives). The host device's counts are therefore the sum over the dumps of both
// processes, which is what is checked. perftest exchanges its setup over TCP, so no other verbs
// traffic is counted. Exit 0 when every check holds, 1 otherwise, 2 on bad input.
#include <cstdint>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

// perftest's options checked here: the post list and the CQ moderation of the acceptance runs
// (tests/acceptance/CMakeLists.txt).
constexpr uint64_t kPostList = 32;
constexpr uint64_t kCqModeration = 100;

// The TLPs of one (type, cause) row of the PCIe counters, summed over the dumps' devices; 0 when
// the row is absent (a dump lists only rows that counted something).
uint64_t tlps(const std::vector<nlohmann::json>& devices, const std::string& type, const std::string& cause) {
  uint64_t n = 0;
  for (const nlohmann::json& device : devices) {
    for (const nlohmann::json& row : device.at("pcie").at("tlps")) {
      if (row.at("type") == type && row.at("cause") == cause) n += row.at("tlps").get<uint64_t>();
    }
  }
  return n;
}

class Checker {
 public:
  // Prints one line per figure; a mismatch makes the run fail.
  void expect(const std::string& what, uint64_t actual, uint64_t expected) {
    const bool ok = actual == expected;
    std::cout << (ok ? "ok   " : "FAIL ") << what << ": " << actual << " (expected " << expected << ")\n";
    if (!ok) failed_ = true;
  }
  [[nodiscard]] int exit_code() const { return failed_ ? 1 : 0; }

 private:
  bool failed_ = false;
};

int check(const std::vector<nlohmann::json>& devices, const std::string& kind, uint64_t wqes) {
  Checker c;
  std::cout << "host device counters (" << devices.size() << " processes), " << wqes << " WQEs posted:\n";
  if (kind == "postlist32") {
    if (wqes % kPostList != 0) {
      std::cerr << "perftest_stats_check: " << wqes << " WQEs are not whole post lists of " << kPostList << "\n";
      return 2;
    }
    c.expect("doorbell MWr", tlps(devices, "MWr", "doorbell"), wqes / kPostList);
    c.expect("BlueFlame MWr (never for a post list)", tlps(devices, "MWr", "blueflame"), 0);
  } else if (kind == "cqmod100") {
    if (wqes % kCqModeration != 0) {
      std::cerr << "perftest_stats_check: " << wqes << " WQEs are not a multiple of " << kCqModeration << "\n";
      return 2;
    }
    c.expect("cqe_write MWr", tlps(devices, "MWr", "cqe_write"), wqes / kCqModeration);
  } else if (kind == "inline") {
    c.expect("payload_read MRd", tlps(devices, "MRd", "payload_read"), 0);
    c.expect("payload_read CplD", tlps(devices, "CplD", "payload_read"), 0);
    c.expect("payload_write MWr", tlps(devices, "MWr", "payload_write"), wqes);
  } else {
    std::cerr << "perftest_stats_check: unknown KIND " << kind << " (postlist32, cqmod100, inline)\n";
    return 2;
  }
  return c.exit_code();
}

// The one device of a dump (a process of a host sees its host's softhca_0 only).
bool read_device(const std::string& path, std::vector<nlohmann::json>& devices) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "perftest_stats_check: cannot open " << path << "\n";
    return false;
  }
  const nlohmann::json dump = nlohmann::json::parse(in);
  const nlohmann::json& list = dump.at("devices");
  if (list.size() != 1) {
    std::cerr << "perftest_stats_check: " << path << ": expected one device, found " << list.size() << "\n";
    return false;
  }
  devices.push_back(list.at(0));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: perftest_stats_check postlist32|cqmod100|inline WQES FILE...\n";
    return 2;
  }
  try {
    std::vector<nlohmann::json> devices;
    for (int i = 3; i < argc; ++i) {
      if (!read_device(argv[i], devices)) return 2;
    }
    return check(devices, argv[1], std::stoull(argv[2]));
  } catch (const std::exception& e) {
    std::cerr << "perftest_stats_check: " << e.what() << "\n";
    return 2;
  }
}
