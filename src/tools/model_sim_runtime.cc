#include "tools/model_sim_runtime.h"

#include <cstring>
#include <stdexcept>

namespace softhca::tools {

namespace {

// The devices' clock in sim mode: the current run's scheduler time. Timers are never run: the
// in-process fabric is lossless and every exchange completes inside its post (docs/decisions.md
// D1), so a retransmission or RNR timer can only fire on a broken run, which the generator
// detects (a completion that never comes).
class SimClock final : public hca::EngineClock {
 public:
  Picoseconds now() override { return scheduler_ != nullptr ? scheduler_->now() : Picoseconds(0); }
  void request_wakeup(Picoseconds) override {}
  void attach(const sim::Scheduler* s) { scheduler_ = s; }

 private:
  const sim::Scheduler* scheduler_ = nullptr;
};

// The runtime's taps, handed to the recorder of the run in progress (if any).
class TapForwarder final : public runtime::TlpTap, public runtime::PacketTap {
 public:
  void on_tlp(uint64_t seq, uint32_t device, const pcie::Tlp& tlp) override {
    if (target_ != nullptr) target_->on_tlp(seq, device, tlp);
  }
  void on_packet(uint64_t seq, uint32_t device, runtime::PacketDirection dir, std::span<const uint8_t> p) override {
    if (target_ != nullptr) target_->on_packet(seq, device, dir, p);
  }
  void attach(ChainRecorder* r) { target_ = r; }

 private:
  ChainRecorder* target_ = nullptr;
};

struct SimEnvironment {
  pcie::PcieConfig config;
  SimClock clock;
  TapForwarder taps;
};

// Created once, never destroyed: the process runtime refers to its clock and taps until exit.
SimEnvironment* g_sim_env = nullptr;

bool same_config(const pcie::PcieConfig& a, const pcie::PcieConfig& b) {
  return a.mps_bytes == b.mps_bytes && a.mrrs_bytes == b.mrrs_bytes && a.completion_bytes == b.completion_bytes &&
         a.mwr_overhead_bytes == b.mwr_overhead_bytes && a.mrd_overhead_bytes == b.mrd_overhead_bytes &&
         a.cpld_overhead_bytes == b.cpld_overhead_bytes && a.write_combine_bytes == b.write_combine_bytes;
}

}  // namespace

void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err) + " (errno " + std::to_string(err) + ")");
}

pcie::PcieConfig pcie_config_of(const sim::MachineProfile& p) {
  pcie::PcieConfig c;
  c.mps_bytes = p.pcie.mps_bytes;
  c.mrrs_bytes = p.pcie.mrrs_bytes;
  c.completion_bytes = p.pcie.completion_bytes;
  // P2-P4: 8 bytes of framing; request headers of 3 DW (32-bit addresses) or 4 DW; completion
  // headers 3 DW; ECRC 4 more.
  const uint32_t framing = 8;
  const uint32_t ecrc = p.pcie.ecrc ? 4 : 0;
  const uint32_t request_header = p.pcie.address_bits == 64 ? 16 : 12;
  c.mwr_overhead_bytes = framing + request_header + ecrc;
  c.mrd_overhead_bytes = framing + request_header + ecrc;
  c.cpld_overhead_bytes = framing + 12 + ecrc;
  c.write_combine_bytes = 64;  // K2
  return c;
}

void ensure_sim_runtime(const sim::MachineProfile& p) {
  const pcie::PcieConfig config = pcie_config_of(p);
  if (g_sim_env != nullptr) {
    if (!same_config(config, g_sim_env->config)) {
      throw std::runtime_error(
          "this process's sim runtime was created with another PCIe byte model (MPS, MRRS, completion "
          "size, header sizes); run profiles that differ in those in separate processes");
    }
    return;
  }
  auto* env = new SimEnvironment();
  env->config = config;
  runtime::RuntimeOptions options;
  options.num_devices = kModelHosts;
  options.pcie = config;
  options.clock = &env->clock;
  // The sim devices' keys and QPNs (hca::DeviceConfig::seed): one fixed seed, so a run is the
  // same run every time (STYLE.md rule 4).
  options.device_seed = 0;
  options.tlp_tap = &env->taps;
  options.packet_tap = &env->taps;
  if (!runtime::Runtime::install_process(runtime::Runtime::create(options))) {
    delete env;
    throw std::runtime_error("the timing model needs its own runtime, but this process already uses a live one");
  }
  g_sim_env = env;
  runtime::Runtime::process();
}

SimRunScope::SimRunScope(const sim::Scheduler& scheduler, ChainRecorder& recorder) {
  if (g_sim_env == nullptr) throw std::logic_error("SimRunScope: ensure_sim_runtime() first");
  g_sim_env->clock.attach(&scheduler);
  g_sim_env->taps.attach(&recorder);
}

SimRunScope::~SimRunScope() {
  g_sim_env->taps.attach(nullptr);
  g_sim_env->clock.attach(nullptr);
}

runtime::DeviceSlot& slot_named(const char* name) {
  for (runtime::DeviceSlot* s : runtime::Runtime::process().devices()) {
    if (s->name() == name) return *s;
  }
  throw std::runtime_error(std::string("device ") + name + " not found in the sim runtime");
}

}  // namespace softhca::tools
