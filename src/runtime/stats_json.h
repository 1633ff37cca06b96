// The per-device parts of a SOFTHCA_STATS dump (docs/observability.md): a device's packet counters
// ("packets") and its QPs with their counters ("qps"), as JSON, the same for the private and the
// shared runtime and for `softhca stats --live`, which reads a running host's device region; and
// the dump's writing.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "hca/device_stats.h"
#include "hca/region_heap.h"

namespace softhca::runtime {

[[nodiscard]] nlohmann::json packet_stats_json(const hca::DeviceStats& s);

// The "qps" array: one object per QP of the device whose state is in `region` (hca::DeviceState at
// its base), in QPN order: qpn, type ("RC", "UC", "UD"), state ("RESET" ... "ERR") and the
// counters of hca::QpCounters. Reads the QP table without the device lock, so it may be given a
// region that other processes change meanwhile (mapped read-only): every offset is checked against
// the region's size first, a QP created or destroyed meanwhile is either listed or not, and counts
// may be a moment old. An unformatted region gives an empty array.
[[nodiscard]] nlohmann::json qp_stats_json(const hca::DeviceRegion& region);

// The packet counters of the device whose state is in `region` (as above: no lock, checked); a
// zero DeviceStats when the region is not a formatted device.
[[nodiscard]] hca::DeviceStats region_packet_stats(const hca::DeviceRegion& region);

// Writes `dump` (and a newline) to `path` whole or not at all: into a file of this process's own
// beside it, then renamed over it. The processes of one program (an MPI job's ranks) all dump to
// the same SOFTHCA_STATS path as they exit; the last one's dump is what the file holds, never a
// mix of two. False when it could not be written (the file is then as it was).
bool write_stats_dump(const std::string& path, const nlohmann::json& dump);

}  // namespace softhca::runtime
