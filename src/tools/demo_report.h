// The demo's output: per-message PCIe costs derived from a row's counter deltas, printed as a
// perftest-style table or as JSON. Counts are TLPs, sizes bytes; wire bytes include TLP header and
// framing (figures.md P2-P4); "down" is towards the device, "up" towards the host.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "pcie/counters.h"
#include "sim/machine_profile.h"
#include "tools/demo_sim.h"
#include "tools/demo_workload.h"

namespace softhca::tools {

// Totals over a row for one device, the columns of the table.
struct SideTotals {
  uint64_t doorbells = 0;         // 8-byte send doorbell MWr
  uint64_t blueflame_writes = 0;  // write-combined BlueFlame MWr (64-byte chunks)
  uint64_t mmio_bytes = 0;        // payload of every CPU -> device MWr (doorbells, BlueFlame, arms)
  uint64_t wqe_reads = 0;         // MRd fetching send WQEs
  uint64_t payload_reads = 0;     // MRd gathering payload
  uint64_t payload_writes = 0;    // MWr scattering payload (responder)
  uint64_t cqe_writes = 0;        // MWr of 64-byte CQEs
  uint64_t mrd_total = 0;         // every MRd, whatever its cause
  uint64_t wire_down_bytes = 0;
  uint64_t wire_up_bytes = 0;
};

SideTotals side_totals(const pcie::CounterSnapshot& s);

// "3", "1/32" or "0.281": a count per message, exact where it is a simple fraction.
std::string format_per_message(uint64_t total, uint64_t messages);

std::string format_table(std::span<const RowMeasurement> rows, const WorkloadParams& params);
std::string format_json(std::span<const RowMeasurement> rows, const WorkloadParams& params);

// The sim demo (demo_sim.h): the same counts table plus the modeled post latency and message
// rate, then each row's latency along the seed's steps 0-5.
std::string format_sim_table(std::span<const SimRow> rows, const WorkloadParams& params, const sim::MachineProfile& profile);
std::string format_sim_json(std::span<const SimRow> rows, const WorkloadParams& params, const sim::MachineProfile& profile);

}  // namespace softhca::tools
