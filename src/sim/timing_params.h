// The timing model's costs, derived once from a MachineProfile: integer picoseconds for fixed
// costs and latencies, integer femtoseconds per byte for link serialization, so placing a chain
// does no floating-point arithmetic (and gives the same result on every machine).
#pragma once
#include <array>
#include <cstdint>

#include "base/units.h"
#include "sim/chain.h"
#include "sim/machine_profile.h"

namespace softhca::sim {

struct TimingParams {
  // CPU (the workload generator charges these to its threads)
  Picoseconds post_call{0};
  Picoseconds wqe_build{0};
  Picoseconds inline_per_64b{0};
  Picoseconds doorbell{0};
  Picoseconds blueflame_line{0};
  Picoseconds poll{0};
  Picoseconds poll_cqe{0};

  // PCIe
  uint64_t pcie_fs_per_byte = 0;  // at the TLP layer (link_rate.h)
  double pcie_raw_gbps = 0;       // for reports
  double pcie_tlp_gbps = 0;
  Picoseconds pcie_one_way{0};     // a TLP's last byte leaving one end to arriving at the other's core
  Picoseconds pcie_turnaround{0};  // read request arrival to its completion leaving (rtt - 2 one_way)
  Picoseconds fc_update{0};
  Picoseconds rc_completion_gap{0};  // between one read's completions (k-th: k gaps after the first)
  uint32_t rc_posted_hdr_credits = 0;
  uint32_t rc_posted_data_credits = 0;
  uint32_t rc_nonposted_hdr_credits = 0;
  uint32_t dev_posted_hdr_credits = 0;
  uint32_t dev_posted_data_credits = 0;

  // HCA
  std::array<Picoseconds, kHcaUnitCount> hca_unit{};  // indexed by HcaUnit
  uint32_t max_outstanding_reads = 0;
  uint32_t qp_wqes_in_flight = 0;
  bool cut_through = false;  // between the HCA's units (machine_profile.h HcaParams::cut_through)

  // InfiniBand
  uint64_t ib_fs_per_byte = 0;
  double ib_gbps = 0;
  uint32_t ib_packet_overhead_bytes = 0;
  Picoseconds cable{0};
  uint32_t switch_hops = 0;
  Picoseconds switch_hop{0};
  // Link-level flow control (more than two hosts): buffers in 64-byte credits (IBA 7.9.4).
  Picoseconds credit_update{0};
  uint32_t switch_input_credits = 0;  // per input port of the switch
  uint32_t hca_rx_credits = 0;        // per HCA port
};

// IBA 7.9.4: link-level flow control counts buffer space in blocks of 64 bytes.
inline constexpr uint32_t kIbCreditBytes = 64;

// A packet of `bytes` (LRH to VCRC) on the IB link: its bytes plus the link's per-packet overhead at
// the link's data rate (W5), rounded up to whole picoseconds.
[[nodiscard]] inline Picoseconds ib_serialization(const TimingParams& t, uint64_t bytes) {
  return Picoseconds(static_cast<int64_t>(((bytes + t.ib_packet_overhead_bytes) * t.ib_fs_per_byte + 999) / 1000));
}

// Throws std::invalid_argument when the profile does not validate (machine_profile.h validate()).
TimingParams derive_timing(const MachineProfile& p);

// ns (as profiles write them) to integer ps, rounded to nearest.
Picoseconds ns_to_ps(double ns);

}  // namespace softhca::sim
