#include "sim/timing_params.h"

#include <cmath>
#include <stdexcept>

#include "sim/link_rate.h"

namespace softhca::sim {

Picoseconds ns_to_ps(double ns) { return Picoseconds(std::llround(ns * 1000.0)); }

TimingParams derive_timing(const MachineProfile& p) {
  if (auto err = validate(p)) throw std::invalid_argument(*err);
  TimingParams t;
  t.post_call = ns_to_ps(p.cpu.post_call_ns);
  t.wqe_build = ns_to_ps(p.cpu.wqe_build_ns);
  t.inline_per_64b = ns_to_ps(p.cpu.inline_ns_per_64b);
  t.doorbell = ns_to_ps(p.cpu.doorbell_ns);
  t.blueflame_line = ns_to_ps(p.cpu.blueflame_line_ns);
  t.poll = ns_to_ps(p.cpu.poll_ns);
  t.poll_cqe = ns_to_ps(p.cpu.poll_cqe_ns);

  t.pcie_raw_gbps = pcie_raw_gbps(p.pcie.generation, p.pcie.lanes);
  t.pcie_tlp_gbps = pcie_tlp_gbps(p.pcie.generation, p.pcie.lanes, p.pcie.mps_bytes);
  t.pcie_fs_per_byte = femtoseconds_per_byte(t.pcie_tlp_gbps);
  t.pcie_one_way = ns_to_ps(p.pcie.one_way_ns);
  t.pcie_turnaround = ns_to_ps(p.pcie.rtt_ns) - 2 * t.pcie_one_way;
  t.fc_update = ns_to_ps(p.pcie.fc_update_ns);
  t.rc_completion_gap = ns_to_ps(p.pcie.rc_completion_gap_ns);
  t.rc_posted_hdr_credits = p.pcie.rc_posted_hdr_credits;
  t.rc_posted_data_credits = p.pcie.rc_posted_data_credits;
  t.rc_nonposted_hdr_credits = p.pcie.rc_nonposted_hdr_credits;
  t.dev_posted_hdr_credits = p.pcie.dev_posted_hdr_credits;
  t.dev_posted_data_credits = p.pcie.dev_posted_data_credits;

  t.hca_unit[static_cast<size_t>(HcaUnit::kDoorbell)] = ns_to_ps(p.hca.doorbell_ns);
  t.hca_unit[static_cast<size_t>(HcaUnit::kWqe)] = ns_to_ps(p.hca.wqe_ns);
  t.hca_unit[static_cast<size_t>(HcaUnit::kTx)] = ns_to_ps(p.hca.tx_packet_ns);
  t.hca_unit[static_cast<size_t>(HcaUnit::kRx)] = ns_to_ps(p.hca.rx_packet_ns);
  t.hca_unit[static_cast<size_t>(HcaUnit::kCompletion)] = ns_to_ps(p.hca.cqe_ns);
  t.max_outstanding_reads = p.hca.max_outstanding_reads;
  t.qp_wqes_in_flight = p.hca.qp_wqes_in_flight;
  t.cut_through = p.hca.cut_through;

  t.ib_gbps = ib_data_gbps(p.ib.lane_gbps, p.ib.width);
  t.ib_fs_per_byte = femtoseconds_per_byte(t.ib_gbps);
  t.ib_packet_overhead_bytes = p.ib.packet_overhead_bytes;
  t.cable = ns_to_ps(p.ib.cable_ns);
  t.switch_hops = p.sw.hops;
  t.switch_hop = ns_to_ps(p.sw.hop_ns);
  t.credit_update = ns_to_ps(p.ib.credit_update_ns);
  t.switch_input_credits = p.sw.input_buffer_bytes / kIbCreditBytes;
  t.hca_rx_credits = p.hca.rx_buffer_bytes / kIbCreditBytes;
  return t;
}

}  // namespace softhca::sim
