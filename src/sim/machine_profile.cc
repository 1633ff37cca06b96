#include "sim/machine_profile.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace softhca::sim {

namespace {

using Kind = ProfileKey::Kind;

// Key constructors: G is the parameter group of MachineProfile, F the field inside it.
template <auto G, auto F>
constexpr ProfileKey dkey(std::string_view key, double lo, double hi, std::string_view unit, std::string_view source) {
  return ProfileKey{key, Kind::kDouble, lo, hi, unit, source,
                    [](MachineProfile& p) -> double* { return &(p.*G.*F); }, nullptr, nullptr};
}
template <auto G, auto F>
constexpr ProfileKey ukey(std::string_view key, double lo, double hi, std::string_view unit, std::string_view source) {
  return ProfileKey{key, Kind::kUint, lo, hi, unit, source, nullptr,
                    [](MachineProfile& p) -> uint32_t* { return &(p.*G.*F); }, nullptr};
}
template <auto G, auto F>
constexpr ProfileKey bkey(std::string_view key, std::string_view source) {
  return ProfileKey{key, Kind::kBool, 0, 1, "", source, nullptr, nullptr,
                    [](MachineProfile& p) -> bool* { return &(p.*G.*F); }};
}

using M = MachineProfile;

constexpr double kMaxNs = 1e9;  // one second: larger latencies are typos
constexpr double kMaxCredits = 1u << 20;

// The table every tool reads: the TOML loader, --set, sweeps and `softhca model --list-keys`.
const std::array kKeys = {
    dkey<&M::cpu, &CpuParams::post_call_ns>("cpu.post_call_ns", 0, kMaxNs, "ns", "assumed"),
    dkey<&M::cpu, &CpuParams::wqe_build_ns>("cpu.wqe_build_ns", 0, kMaxNs, "ns", "assumed"),
    dkey<&M::cpu, &CpuParams::inline_ns_per_64b>("cpu.inline_ns_per_64b", 0, kMaxNs, "ns", "assumed"),
    dkey<&M::cpu, &CpuParams::doorbell_ns>("cpu.doorbell_ns", 0, kMaxNs, "ns", "assumed"),
    dkey<&M::cpu, &CpuParams::blueflame_line_ns>("cpu.blueflame_line_ns", 0, kMaxNs, "ns", "assumed"),
    dkey<&M::cpu, &CpuParams::poll_ns>("cpu.poll_ns", 0, kMaxNs, "ns", "assumed"),
    dkey<&M::cpu, &CpuParams::poll_cqe_ns>("cpu.poll_cqe_ns", 0, kMaxNs, "ns", "assumed"),
    ukey<&M::cpu, &CpuParams::cores>("cpu.cores", 1, 255, "", "assumed"),
    ukey<&M::pcie, &PcieParams::generation>("pcie.generation", 1, 5, "", "P1"),
    ukey<&M::pcie, &PcieParams::lanes>("pcie.lanes", 1, 32, "", "P1"),
    ukey<&M::pcie, &PcieParams::mps_bytes>("pcie.mps_bytes", 128, 4096, "B", "P6, P7"),
    ukey<&M::pcie, &PcieParams::mrrs_bytes>("pcie.mrrs_bytes", 128, 4096, "B", "P6, P7"),
    ukey<&M::pcie, &PcieParams::completion_bytes>("pcie.completion_bytes", 64, 4096, "B", "P6, K5"),
    ukey<&M::pcie, &PcieParams::address_bits>("pcie.address_bits", 32, 64, "", "P3"),
    bkey<&M::pcie, &PcieParams::ecrc>("pcie.ecrc", "P3"),
    dkey<&M::pcie, &PcieParams::rtt_ns>("pcie.rtt_ns", 0, kMaxNs, "ns", "S2"),
    dkey<&M::pcie, &PcieParams::one_way_ns>("pcie.one_way_ns", 0, kMaxNs, "ns", "assumed"),
    dkey<&M::pcie, &PcieParams::fc_update_ns>("pcie.fc_update_ns", 0, kMaxNs, "ns", "assumed"),
    dkey<&M::pcie, &PcieParams::rc_completion_gap_ns>("pcie.rc_completion_gap_ns", 0, kMaxNs, "ns", "P9, assumed"),
    ukey<&M::pcie, &PcieParams::rc_posted_hdr_credits>("pcie.rc_posted_hdr_credits", 1, kMaxCredits, "", "assumed"),
    ukey<&M::pcie, &PcieParams::rc_posted_data_credits>("pcie.rc_posted_data_credits", 1, kMaxCredits, "16 B", "assumed"),
    ukey<&M::pcie, &PcieParams::rc_nonposted_hdr_credits>("pcie.rc_nonposted_hdr_credits", 1, kMaxCredits, "", "assumed"),
    ukey<&M::pcie, &PcieParams::dev_posted_hdr_credits>("pcie.dev_posted_hdr_credits", 1, kMaxCredits, "", "assumed"),
    ukey<&M::pcie, &PcieParams::dev_posted_data_credits>("pcie.dev_posted_data_credits", 1, kMaxCredits, "16 B", "assumed"),
    dkey<&M::hca, &HcaParams::doorbell_ns>("hca.doorbell_ns", 0, kMaxNs, "ns", "assumed"),
    dkey<&M::hca, &HcaParams::wqe_ns>("hca.wqe_ns", 0, kMaxNs, "ns", "assumed"),
    dkey<&M::hca, &HcaParams::tx_packet_ns>("hca.tx_packet_ns", 0, kMaxNs, "ns", "assumed"),
    dkey<&M::hca, &HcaParams::rx_packet_ns>("hca.rx_packet_ns", 0, kMaxNs, "ns", "assumed"),
    dkey<&M::hca, &HcaParams::cqe_ns>("hca.cqe_ns", 0, kMaxNs, "ns", "assumed"),
    ukey<&M::hca, &HcaParams::max_outstanding_reads>("hca.max_outstanding_reads", 1, 4096, "", "assumed"),
    ukey<&M::hca, &HcaParams::qp_wqes_in_flight>("hca.qp_wqes_in_flight", 1, 65536, "", "assumed"),
    bkey<&M::hca, &HcaParams::rq_prefetch>("hca.rq_prefetch", "assumed"),
    bkey<&M::hca, &HcaParams::cut_through>("hca.cut_through", "assumed"),
    ukey<&M::hca, &HcaParams::rx_buffer_bytes>("hca.rx_buffer_bytes", 512, 1u << 26, "B", "assumed"),
    dkey<&M::ib, &IbParams::lane_gbps>("ib.lane_gbps", 0.1, 1000, "Gb/s", "W5"),
    ukey<&M::ib, &IbParams::width>("ib.width", 1, 12, "", "W5"),
    ukey<&M::ib, &IbParams::mtu_bytes>("ib.mtu_bytes", 256, 4096, "B", "W4"),
    dkey<&M::ib, &IbParams::cable_ns>("ib.cable_ns", 0, kMaxNs, "ns", "assumed"),
    ukey<&M::ib, &IbParams::packet_overhead_bytes>("ib.packet_overhead_bytes", 0, 4096, "B", "assumed"),
    dkey<&M::ib, &IbParams::credit_update_ns>("ib.credit_update_ns", 0, kMaxNs, "ns", "assumed"),
    ukey<&M::sw, &SwitchParams::hops>("switch.hops", 0, 64, "", "assumed"),
    dkey<&M::sw, &SwitchParams::hop_ns>("switch.hop_ns", 0, kMaxNs, "ns", "W7"),
    ukey<&M::sw, &SwitchParams::input_buffer_bytes>("switch.input_buffer_bytes", 512, 1u << 26, "B", "assumed"),
};

bool is_power_of_two(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

std::string format_number(double v) {
  char buf[64];
  // Shortest text that reads back to the same double (C++17 to_chars).
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

std::span<const ProfileKey> profile_keys() { return kKeys; }

const ProfileKey* find_profile_key(std::string_view key) {
  for (const ProfileKey& k : kKeys) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

std::optional<std::string> set_profile_number(MachineProfile& p, std::string_view key, double value) {
  const ProfileKey* k = find_profile_key(key);
  if (k == nullptr) return "unknown profile key \"" + std::string(key) + "\"";
  if (!std::isfinite(value) || value < k->min || value > k->max) {
    return std::string(key) + " = " + format_number(value) + " is out of range [" + format_number(k->min) + ", " +
           format_number(k->max) + "]";
  }
  switch (k->kind) {
    case Kind::kDouble: *k->double_field(p) = value; break;
    case Kind::kUint:
      if (value != std::floor(value)) return std::string(key) + " must be a whole number, not " + format_number(value);
      *k->uint_field(p) = static_cast<uint32_t>(value);
      break;
    case Kind::kBool:
      if (value != 0 && value != 1) return std::string(key) + " must be true or false";
      *k->bool_field(p) = value != 0;
      break;
  }
  return std::nullopt;
}

std::optional<std::string> set_profile_value(MachineProfile& p, std::string_view key, std::string_view value) {
  const ProfileKey* k = find_profile_key(key);
  if (k == nullptr) return "unknown profile key \"" + std::string(key) + "\"";
  if (k->kind == Kind::kBool) {
    if (value == "true" || value == "1") return set_profile_number(p, key, 1);
    if (value == "false" || value == "0") return set_profile_number(p, key, 0);
    return std::string(key) + " must be true or false, not \"" + std::string(value) + "\"";
  }
  double v = 0;
  const auto r = std::from_chars(value.data(), value.data() + value.size(), v);
  if (r.ec != std::errc() || r.ptr != value.data() + value.size()) {
    return std::string(key) + " needs a number, not \"" + std::string(value) + "\"";
  }
  return set_profile_number(p, key, v);
}

std::optional<std::string> set_profile_what_if(MachineProfile& p, std::string_view key, std::string_view value) {
  const double rtt = p.pcie.rtt_ns;
  const double one_way = p.pcie.one_way_ns;
  if (auto err = set_profile_value(p, key, value)) return err;
  if (key == "pcie.rtt_ns" && rtt > 0) p.pcie.one_way_ns = one_way * (p.pcie.rtt_ns / rtt);
  return std::nullopt;
}

std::string profile_value_text(const MachineProfile& p, const ProfileKey& k) {
  auto& m = const_cast<MachineProfile&>(p);  // the accessors are shared with the setters
  switch (k.kind) {
    case Kind::kDouble: return format_number(*k.double_field(m));
    case Kind::kUint: return std::to_string(*k.uint_field(m));
    case Kind::kBool: return *k.bool_field(m) ? "true" : "false";
  }
  return {};
}

std::optional<std::string> validate(const MachineProfile& p) {
  const PcieParams& c = p.pcie;
  if (!is_power_of_two(c.lanes)) return "pcie.lanes must be 1, 2, 4, 8, 16 or 32";
  if (!is_power_of_two(c.mps_bytes)) return "pcie.mps_bytes must be a power of two (128..4096)";
  if (!is_power_of_two(c.mrrs_bytes)) return "pcie.mrrs_bytes must be a power of two (128..4096)";
  if (!is_power_of_two(c.completion_bytes)) return "pcie.completion_bytes must be a power of two";
  if (c.completion_bytes > c.mps_bytes) return "pcie.completion_bytes must not exceed pcie.mps_bytes (P6)";
  if (c.address_bits != 32 && c.address_bits != 64) return "pcie.address_bits must be 32 or 64 (P3)";
  if (c.one_way_ns * 2 > c.rtt_ns) {
    return "pcie.one_way_ns must be at most half of pcie.rtt_ns (a read's round trip contains two one-way trips)";
  }
  if (!is_power_of_two(p.ib.mtu_bytes)) return "ib.mtu_bytes must be 256, 512, 1024, 2048 or 4096 (W4)";
  if (p.ib.width != 1 && p.ib.width != 2 && p.ib.width != 4 && p.ib.width != 8 && p.ib.width != 12) {
    return "ib.width must be 1, 2, 4, 8 or 12 (W5)";
  }
  // A receive buffer must hold the largest packet (its MTU's payload and up to 128 bytes of
  // headers, W1), or a sender could never get the credits for it.
  const uint32_t largest = p.ib.mtu_bytes + 128 + p.ib.packet_overhead_bytes;
  if (p.hca.rx_buffer_bytes < largest || p.sw.input_buffer_bytes < largest) {
    return "hca.rx_buffer_bytes and switch.input_buffer_bytes must hold a whole packet (ib.mtu_bytes + 128)";
  }
  return std::nullopt;
}

}  // namespace softhca::sim
