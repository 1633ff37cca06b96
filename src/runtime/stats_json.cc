#include "runtime/stats_json.h"

#include <string>

namespace softhca::runtime {

nlohmann::json packet_stats_json(const hca::DeviceStats& s) {
  nlohmann::json drops = nlohmann::json::object();
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
          {"dropped", drops}};
}

}  // namespace softhca::runtime
