#include "tools/stats_cmd.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pcie/counters.h"
#include "runtime/host_segment.h"
#include "runtime/slot_data.h"
#include "runtime/stats_json.h"

namespace softhca::tools {

namespace {

using nlohmann::json;

// The packet counters in the order the table shows them, with their labels.
struct PacketRow {
  const char* key;
  const char* label;
};
constexpr PacketRow kPacketRows[] = {
    {"sent", "packets sent"},
    {"bytes_sent", "bytes sent"},
    {"received", "packets received"},
    {"bytes_received", "bytes received"},
    {"acks_sent", "ACKs sent"},
    {"naks_sent", "NAKs sent"},
    {"rnr_naks_sent", "RNR NAKs sent"},
    {"retransmitted", "packets retransmitted"},
    {"timeouts", "ACK timeouts"},
    {"duplicates", "duplicates received"},
    {"cqes_written", "CQEs written"},
    {"cq_overruns", "CQ overruns"},
    {"express_writes", "express WRITEs"},
    {"express_sends", "express SENDs"},
};

// The per-QP columns (runtime/stats_json.cc qp_json), in table order.
constexpr PacketRow kQpColumns[] = {
    {"packets_sent", "sent"},       {"bytes_sent", "bytes sent"},     {"packets_received", "received"},
    {"bytes_received", "bytes recv"}, {"packets_dropped", "dropped"}, {"retransmitted", "retx"},
    {"naks_sent", "NAKs sent"},     {"naks_received", "NAKs recv"},   {"doorbells", "doorbells"},
    {"blueflame_writes", "BlueFlame"}, {"cqes", "CQEs"},            {"error_cqes", "error CQEs"},
};

// Throws std::runtime_error naming what is missing.
void check_dump(const json& dump) {
  if (!dump.is_object() || !dump.contains("devices") || !dump["devices"].is_array()) {
    throw std::runtime_error("not a SOFTHCA_STATS dump: no \"devices\" array");
  }
  for (const json& d : dump["devices"]) {
    if (!d.is_object() || !d.contains("device") || !d["device"].is_string()) {
      throw std::runtime_error("a device entry has no \"device\" name");
    }
    const std::string name = d["device"];
    if (!d.contains("pcie") || !d["pcie"].contains("tlps") || !d["pcie"]["tlps"].is_array()) {
      throw std::runtime_error(name + ": no \"pcie\".\"tlps\" array");
    }
    for (const json& t : d["pcie"]["tlps"]) {
      for (const char* k : {"type", "cause", "direction"}) {
        if (!t.contains(k) || !t[k].is_string()) throw std::runtime_error(name + ": a TLP row has no \"" + k + "\"");
      }
      for (const char* k : {"tlps", "payload_bytes", "wire_bytes"}) {
        if (!t.contains(k) || !t[k].is_number_unsigned()) {
          throw std::runtime_error(name + ": a TLP row has no count \"" + k + "\"");
        }
      }
    }
    if (!d.contains("packets") || !d["packets"].is_object()) throw std::runtime_error(name + ": no \"packets\"");
    // Dumps older than the per-QP counters have no "qps"; when present, every QP has its number.
    if (d.contains("qps")) {
      if (!d["qps"].is_array()) throw std::runtime_error(name + ": \"qps\" is not an array");
      for (const json& q : d["qps"]) {
        if (!q.is_object() || !q.contains("qpn") || !q["qpn"].is_number_unsigned()) {
          throw std::runtime_error(name + ": a QP has no \"qpn\"");
        }
      }
    }
  }
}

std::string pad(const std::string& s, size_t width, bool right) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

// A table with a header row; numbers right-aligned (every column but the first `text_columns`).
void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows, size_t text_columns) {
  std::vector<size_t> widths;
  for (const auto& r : rows) {
    widths.resize(std::max(widths.size(), r.size()));
    for (size_t i = 0; i < r.size(); ++i) widths[i] = std::max(widths[i], r[i].size());
  }
  for (const auto& r : rows) {
    std::string line = " ";
    for (size_t i = 0; i < r.size(); ++i) {
      line += ' ';
      line += pad(r[i], widths[i], i >= text_columns);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

uint64_t count(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<uint64_t>() : 0;
}

std::string text(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "?";
}

void print_pcie(std::ostream& out, const json& d) {
  std::vector<std::vector<std::string>> rows{{"PCIe", "cause", "direction", "TLPs", "payload [B]", "wire [B]"}};
  uint64_t tlps = 0;
  uint64_t payload = 0;
  uint64_t wire = 0;
  for (const json& t : d["pcie"]["tlps"]) {
    rows.push_back({t["type"].get<std::string>(), t["cause"].get<std::string>(), t["direction"].get<std::string>(),
                    std::to_string(count(t, "tlps")),
                    std::to_string(count(t, "payload_bytes")), std::to_string(count(t, "wire_bytes"))});
    tlps += count(t, "tlps");
    payload += count(t, "payload_bytes");
    wire += count(t, "wire_bytes");
  }
  if (rows.size() == 1) rows.push_back({"(none)", "", "", "0", "0", "0"});
  rows.push_back({"total", "", "", std::to_string(tlps), std::to_string(payload), std::to_string(wire)});
  print_table(out, rows, 3);
  out << "  wire bytes: downstream " << count(d["pcie"], "wire_bytes_downstream") << ", upstream "
      << count(d["pcie"], "wire_bytes_upstream") << "\n\n";
}

// One row per QP: its number, type, state and counters.
void print_qps(std::ostream& out, const json& qps) {
  std::vector<std::vector<std::string>> rows{{"QP", "type", "state"}};
  for (const PacketRow& c : kQpColumns) rows[0].emplace_back(c.label);
  for (const json& q : qps) {
    char qpn[16];
    std::snprintf(qpn, sizeof qpn, "0x%06x", q["qpn"].get<unsigned>());
    std::vector<std::string> row{qpn, text(q, "type"), text(q, "state")};
    for (const PacketRow& c : kQpColumns) row.push_back(std::to_string(count(q, c.key)));
    rows.push_back(std::move(row));
  }
  out << "\n";
  if (rows.size() == 1) {
    out << "  QPs: none\n";
    return;
  }
  print_table(out, rows, 3);
}

void print_device(std::ostream& out, const json& d) {
  out << d["device"].get<std::string>();
  if (d.contains("host") && d.contains("fabric")) out << " (host " << text(d, "host") << ", fabric " << text(d, "fabric") << ")";
  out << "\n";
  if (d.contains("pcie")) {
    print_pcie(out, d);
  } else {
    out << "  PCIe: none in this dump\n\n";
  }

  const json& p = d["packets"];
  std::vector<std::vector<std::string>> prow{{"fabric", "count"}};
  for (const PacketRow& r : kPacketRows) prow.push_back({r.label, std::to_string(count(p, r.key))});
  uint64_t dropped = 0;
  if (p.contains("dropped") && p["dropped"].is_object()) {
    for (const auto& [reason, n] : p["dropped"].items()) {
      if (!n.is_number()) continue;
      dropped += n.get<uint64_t>();
      if (n.get<uint64_t>() != 0) prow.push_back({"dropped: " + reason, std::to_string(n.get<uint64_t>())});
    }
  }
  prow.push_back({"dropped (all reasons)", std::to_string(dropped)});
  print_table(out, prow, 1);
  if (d.contains("qps")) print_qps(out, d["qps"]);
}

// The dump of the host device processes use now, from its segment (mapped read-only; no lock:
// counts may be a moment old). Empty with `error` set when the host has no segment.
json live_dump(const StatsOptions& o, std::string& error) {
  const std::unique_ptr<runtime::HostSegment> seg = runtime::HostSegment::open_read_only(o.dir, o.fabric, o.host, error);
  if (seg == nullptr) return json();
  const std::string& path = seg->path();
  const hca::DeviceRegion region{seg->device_region(), seg->device_bytes()};
  if (seg->slot_data_bytes() < sizeof(runtime::SlotData)) {
    error = path + " was made by another softhca build (its process slots are too small)";
    return json();
  }
  // The PCIe counters of every process of the host, summed: each counts its own threads' device work.
  pcie::CounterSnapshot pcie;
  for (uint32_t s = 1; s <= runtime::kMaxSlots; ++s) {
    if (seg->pid_of(s) != 0) pcie += static_cast<const runtime::SlotData*>(seg->slot_data(s))->pcie.snapshot();
  }
  json dev = {{"device", "softhca_0"},
              {"host", o.host},
              {"fabric", o.fabric},
              {"lid", seg->lid()},
              {"processes", seg->live_slots()},
              {"pcie", json::parse(pcie.to_json())},
              {"packets", runtime::packet_stats_json(runtime::region_packet_stats(region))},
              {"qps", runtime::qp_stats_json(region)}};
  return json{{"devices", json::array({std::move(dev)})}};
}

json file_dump(const StatsOptions& o, std::string& error) {
  std::ifstream in(o.path);
  if (!in) {
    error = "cannot open " + o.path;
    return json();
  }
  json dump = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (dump.is_discarded()) {
    error = o.path + " is not JSON";
    return json();
  }
  try {
    check_dump(dump);
  } catch (const std::exception& e) {
    error = o.path + ": " + e.what();
    return json();
  }
  return dump;
}

}  // namespace

int run_stats(const StatsOptions& options, std::ostream& out, std::ostream& err) {
  std::string error;
  const json dump = options.live ? live_dump(options, error) : file_dump(options, error);
  if (dump.is_null()) {
    err << "softhca stats: " << error << "\n";
    return EXIT_FAILURE;
  }
  if (options.json) {
    out << dump.dump(2) << "\n";  // nlohmann::json keeps object keys sorted
  } else {
    bool first = true;
    for (const json& d : dump["devices"]) {
      if (!first) out << "\n";
      first = false;
      print_device(out, d);
    }
    if (dump["devices"].empty()) out << "(no devices)\n";
  }
  out.flush();
  return out ? EXIT_SUCCESS : EXIT_FAILURE;
}

void add_stats_command(CLI::App& app) {
  auto opts = std::make_shared<StatsOptions>();
  CLI::App* sub = app.add_subcommand("stats", "Show the counters of a SOFTHCA_STATS dump as a table or JSON");
  sub->footer(
      "FILE is what a program run with SOFTHCA_STATS=FILE wrote at exit: per device, the PCIe\n"
      "transactions by type and cause (TLPs, payload and wire bytes), the packet counters and\n"
      "one row per QP (packets, bytes, drops, retransmissions, NAKs, doorbells, CQEs).\n"
      "--live reads the same from the host device that processes are using now (its segment in\n"
      "/dev/shm/softhca-<uid>/, read-only), the PCIe counters summed over the host's processes.");
  CLI::Option* file = sub->add_option("FILE", opts->path, "A SOFTHCA_STATS dump");
  CLI::Option* live = sub->add_flag("--live", opts->live, "Read the counters of the running host device instead of a file");
  file->excludes(live);
  sub->add_option("--fabric", opts->fabric, "With --live: the fabric (SOFTHCA_FABRIC)")->capture_default_str()->needs(live);
  sub->add_option("--host", opts->host, "With --live: the host (SOFTHCA_HOST)")->capture_default_str()->needs(live);
  sub->add_flag("--json", opts->json, "Print the dump as normalized JSON instead of the table");
  sub->callback([opts] {
    if (!opts->live && opts->path.empty()) throw CLI::RequiredError("FILE or --live");
    const int rc = run_stats(*opts, std::cout, std::cerr);
    std::cout.flush();
    std::exit(rc);
  });
}

}  // namespace softhca::tools
