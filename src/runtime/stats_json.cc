#include "runtime/stats_json.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "hca/device_state.h"
#include "hca/queue_objects.h"

namespace softhca::runtime {

namespace {

using nlohmann::json;

std::string_view qp_type_name(hwif::QpType t) {
  switch (t) {
    case hwif::QpType::kRc: return "RC";
    case hwif::QpType::kUc: return "UC";
    case hwif::QpType::kUd: return "UD";
    case hwif::QpType::kXrcIni: return "XRC_INI";
    case hwif::QpType::kXrcTgt: return "XRC_TGT";
  }
  return "?";
}

// ibv_qp_state's names without the prefix (IBV_QPS_RTS -> "RTS").
std::string_view qp_state_name(hwif::QpState s) {
  switch (s) {
    case hwif::QpState::kReset: return "RESET";
    case hwif::QpState::kInit: return "INIT";
    case hwif::QpState::kRtr: return "RTR";
    case hwif::QpState::kRts: return "RTS";
    case hwif::QpState::kSqd: return "SQD";
    case hwif::QpState::kSqe: return "SQE";
    case hwif::QpState::kErr: return "ERR";
  }
  return "?";
}

// A copy of the T at `offset` of the region, when it lies inside; copied (not referenced) because
// another process may change it while we read.
template <class T>
std::optional<T> read_at(const hca::DeviceRegion& r, uint64_t offset) {
  if (r.base == nullptr || offset > r.size || r.size - offset < sizeof(T)) return std::nullopt;
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(r.base) + offset, sizeof(T));
  return v;
}

std::optional<hca::DeviceState> device_state(const hca::DeviceRegion& r) {
  std::optional<hca::DeviceState> st = read_at<hca::DeviceState>(r, 0);
  if (!st || st->magic != hca::DeviceState::kMagic || st->version != hca::DeviceState::kVersion) return std::nullopt;
  return st;
}

json qp_json(uint32_t qpn, const hca::QueuePair& qp) {
  const hca::QpCounters c = qp.total_counters();
  return {{"qpn", qpn},
          {"type", qp_type_name(qp.type)},
          {"state", qp_state_name(qp.attr.state)},
          {"packets_sent", c.packets_sent},
          {"bytes_sent", c.bytes_sent},
          {"packets_received", c.packets_received},
          {"bytes_received", c.bytes_received},
          {"packets_dropped", c.packets_dropped},
          {"retransmitted", c.retransmitted},
          {"naks_sent", c.naks_sent},
          {"naks_received", c.naks_received},
          {"doorbells", c.doorbells},
          {"blueflame_writes", c.blueflame_writes},
          {"cqes", c.cqes},
          {"error_cqes", c.error_cqes}};
}

}  // namespace

json packet_stats_json(const hca::DeviceStats& s) {
  json drops = json::object();
  for (size_t r = 0; r < s.dropped.size(); ++r)
    drops[std::string(hca::to_string(static_cast<hca::DropReason>(r)))] = s.dropped[r];
  return {{"sent", s.packets_sent},
          {"received", s.packets_received},
          {"bytes_sent", s.bytes_sent},
          {"bytes_received", s.bytes_received},
          {"acks_sent", s.acks_sent},
          {"naks_sent", s.naks_sent},
          {"rnr_naks_sent", s.rnr_naks_sent},
          {"retransmitted", s.retransmitted_packets},
          {"timeouts", s.timeouts},
          {"duplicates", s.duplicates},
          {"cqes_written", s.cqes_written},
          {"cq_overruns", s.cq_overruns},
          {"express_writes", s.express_writes},
          {"express_sends", s.express_sends},
          {"dropped", drops}};
}

json qp_stats_json(const hca::DeviceRegion& region) {
  json qps = json::array();
  const std::optional<hca::DeviceState> st = device_state(region);
  if (!st) return qps;
  const hca::TableState& t = st->qps;
  const uint32_t used = t.high_water <= t.capacity ? t.high_water : t.capacity;
  for (uint32_t i = 0; i < used; ++i) {
    const auto slot = read_at<hca::TableSlot>(region, t.slots + uint64_t{i} * sizeof(hca::TableSlot));
    if (!slot) break;
    if (slot->object == hca::kHeapNone) continue;
    const auto qp = read_at<hca::QueuePair>(region, slot->object);
    if (qp) qps.push_back(qp_json(t.first + i, *qp));
  }
  return qps;
}

hca::DeviceStats region_packet_stats(const hca::DeviceRegion& region) {
  const std::optional<hca::DeviceState> st = device_state(region);
  return st ? st->total_stats() : hca::DeviceStats{};
}

bool write_stats_dump(const std::string& path, const nlohmann::json& dump) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << dump.dump(2) << "\n";
    out.flush();
    if (!out) {
      ::unlink(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace softhca::runtime
