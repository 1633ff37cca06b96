// A machine as the timing model sees it: CPU costs, the PCIe link, the HCA's units, the InfiniBand
// link and the switch. Plain numbers in the units their names say (ns, Gb/s, bytes, counts); the
// timing model derives picosecond costs from them (timing_params.h). Every parameter is listed in
// profile_keys() with its TOML key, its bounds, and where its default comes from (a row id of
// ../shared/reference/figures.md, the seed, or "assumed"). The defaults are the seed's machine,
// profiles/thunderx2-cx4-edr.toml. Leaves out: caches, NUMA, interrupts, the responder's CPU.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace softhca::sim {

struct CpuParams {
  double post_call_ns = 15;      // fixed cost of one ibv_post_send call (checks, lock) [assumed]
  double wqe_build_ns = 25;      // building one WQE in the send ring [assumed]
  double inline_ns_per_64b = 2;  // copying inline data into the WQE, per 64 bytes [assumed]
  double doorbell_ns = 40;       // the 8-byte doorbell MMIO store with its barrier [assumed]
  double blueflame_line_ns = 20; // one 64-byte write-combined BlueFlame line, copy and flush [assumed]
  double poll_ns = 30;           // one ibv_poll_cq call that returns completions [assumed]
  double poll_cqe_ns = 10;       // each CQE it returns [assumed]
  uint32_t cores = 32;           // cores that can post, one thread each (--threads at most) [assumed]
};

struct PcieParams {
  uint32_t generation = 3;         // P1: Gen1..Gen5; the seed's machine is Gen3
  uint32_t lanes = 16;             // x1..x32; the seed's machine is x16
  uint32_t mps_bytes = 256;        // max payload size (P7, P8)
  uint32_t mrrs_bytes = 512;       // max read request size (P7, P8)
  uint32_t completion_bytes = 128; // read completions cut at this boundary (K5, an RCB multiple)
  uint32_t address_bits = 64;      // P3: 64-bit addresses -> 4-DW request headers
  bool ecrc = false;               // P3: optional ECRC adds 4 bytes per TLP
  double rtt_ns = 125;             // S2: a small DMA read's round trip, serialization excluded
  double one_way_ns = 62.5;        // a posted write's device<->memory latency [assumed: rtt/2]
  double fc_update_ns = 40;        // TLP arrival to its credits being usable again (UpdateFC) [assumed]
  // The root complex returns one read's completions at least this far apart (its memory fetches,
  // pipelined per read, not shared between reads): a lone read's latency grows by this per
  // completion beyond the link's serialization, as pcie-bench measures (P9 in
  // docs/published-figures.md; fitted there) [0: none, assumed].
  double rc_completion_gap_ns = 0;
  uint32_t rc_posted_hdr_credits = 64;      // root complex -> device's posted budget [assumed]
  uint32_t rc_posted_data_credits = 512;    // 16-byte units [assumed]
  uint32_t rc_nonposted_hdr_credits = 64;   // read requests the root complex buffers [assumed]
  uint32_t dev_posted_hdr_credits = 32;     // device's budget for MMIO writes [assumed]
  uint32_t dev_posted_data_credits = 256;   // 16-byte units [assumed]
  // Completion credits are infinite at both ends (an endpoint must advertise them so; the root
  // complex only issues reads it can take the answer of).
};

struct HcaParams {
  double doorbell_ns = 10;             // decoding a doorbell or BlueFlame write [assumed]
  double wqe_ns = 10;                  // parsing one WQE, key checks [assumed]
  double tx_packet_ns = 5;             // the transmit scheduler, per packet (requests, ACKs) [assumed]
  double rx_packet_ns = 5;             // receive processing per packet [assumed]
  double cqe_ns = 5;                   // building one CQE [assumed]
  uint32_t max_outstanding_reads = 64; // DMA read tags in flight [assumed]
  uint32_t qp_wqes_in_flight = 4;      // WQEs of one QP between parse and transmit [assumed]
  // The HCA has read a receive WQE it knows of before the SEND that consumes it arrives: the read
  // is off the SEND's critical path (a doorbell-record read, when the RQ looked empty, stays on
  // it) [assumed; off in the built-in profiles].
  bool rq_prefetch = false;
  uint32_t rx_buffer_bytes = 65536;  // the port's receive buffer: the credits of the link into it [assumed]
  // Cut-through between the HCA's units: a packet's transmission starts once its payload's first
  // completion has arrived and the rest will arrive before its tail leaves (not after the last
  // completion); the responder writes each MPS piece once its bytes have arrived (not after the
  // packet's tail) [assumed; off in the built-in profiles].
  bool cut_through = false;
};

struct IbParams {
  double lane_gbps = 25.0;  // W5: EDR, data rate after 64b/66b
  uint32_t width = 4;       // W5: 4x port
  uint32_t mtu_bytes = 4096; // W4: path MTU the workloads connect with
  double cable_ns = 5;      // propagation per cable (about 1 m of copper) [assumed]
  uint32_t packet_overhead_bytes = 0;  // link-level bytes per packet beyond LRH..VCRC [assumed]
  // Link-level flow control (IBA 7.9.4: credits in 64-byte blocks): a receive buffer's space
  // freed to the sender's credits for it being usable again (a flow-control packet) [assumed].
  double credit_update_ns = 20;
};

struct SwitchParams {
  uint32_t hops = 1;   // switches between the two hosts (0: back to back) [assumed]
  double hop_ns = 90;  // W7: port-to-port latency of one switch
  // Each input port's buffer (one VL): the credits a host's port may use towards the switch. The
  // switch is output-queued: a packet waits at its egress port, in arrival order [assumed].
  uint32_t input_buffer_bytes = 65536;
};

struct MachineProfile {
  std::string name = "thunderx2-cx4-edr";
  std::string description = "Cavium ThunderX2 host, ConnectX-4 class HCA, PCIe Gen3 x16, EDR 4x";
  CpuParams cpu;
  PcieParams pcie;
  HcaParams hca;
  IbParams ib;
  SwitchParams sw;
};

// One settable parameter: its TOML key ("pcie.rtt_ns"), how to reach it, its bounds, its unit and
// where its default comes from.
struct ProfileKey {
  enum class Kind : uint8_t { kDouble, kUint, kBool };
  std::string_view key;
  Kind kind;
  double min;
  double max;
  std::string_view unit;
  std::string_view source;
  double* (*double_field)(MachineProfile&);
  uint32_t* (*uint_field)(MachineProfile&);
  bool* (*bool_field)(MachineProfile&);
};

std::span<const ProfileKey> profile_keys();
const ProfileKey* find_profile_key(std::string_view key);

// Sets one parameter from text ("250", "4", "true"). Returns an error message, or nothing.
std::optional<std::string> set_profile_value(MachineProfile& p, std::string_view key, std::string_view value);
// Sets one numeric parameter; error when out of bounds or not numeric.
std::optional<std::string> set_profile_number(MachineProfile& p, std::string_view key, double value);
// Like set_profile_value, for a user's what-if (--set, sweeps): setting pcie.rtt_ns also scales
// pcie.one_way_ns by the same factor, so the round trip can be changed alone.
std::optional<std::string> set_profile_what_if(MachineProfile& p, std::string_view key, std::string_view value);
// The value of one parameter as text (shortest round-trip form).
std::string profile_value_text(const MachineProfile& p, const ProfileKey& k);
// Checks relations between parameters (MPS, MRRS and completion sizes powers of two and ordered,
// one_way_ns <= rtt_ns/2, ...). Returns an error message, or nothing.
std::optional<std::string> validate(const MachineProfile& p);

}  // namespace softhca::sim
