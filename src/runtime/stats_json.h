// The "packets" object of a SOFTHCA_STATS dump (docs/environment.md): a device's packet counters as
// JSON, the same for the private and the shared runtime (softhca stats reads both).
#pragma once
#include <nlohmann/json.hpp>

#include "hca/device_stats.h"

namespace softhca::runtime {

[[nodiscard]] nlohmann::json packet_stats_json(const hca::DeviceStats& s);

}  // namespace softhca::runtime
