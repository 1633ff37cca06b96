// The live runtime of one process: N devices on one in-process carrier, one device lock, one agent.
#include "runtime/runtime.h"

#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <fstream>
#include <mutex>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/agent.h"
#include "runtime/chrome_trace.h"
#include "runtime/device_seed.h"
#include "runtime/link_config.h"
#include "runtime/live_device.h"
#include "runtime/pcap_tap.h"
#include "runtime/shared_runtime.h"
#include "runtime/stats_json.h"
#include "runtime/tap_fanout.h"
#include "runtime/trace_recorder.h"

namespace softhca::runtime {

namespace {

constexpr uint32_t kMaxDevices = 64;

// An unsigned number from the environment (decimal or 0x-hex), or `fallback` when unset or bad.
uint64_t env_number(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 0);
  return (end != nullptr && *end == '\0') ? n : fallback;
}

// The default identity of device `index`, with the overrides of docs/environment.md.
hca::DeviceConfig config_from_env(uint32_t index) {
  hca::DeviceConfig c = hca::default_device_config(index);
  c.caps.vendor_id = static_cast<uint32_t>(env_number("SOFTHCA_VENDOR_ID", c.caps.vendor_id));
  c.caps.vendor_part_id = static_cast<uint32_t>(env_number("SOFTHCA_VENDOR_PART_ID", c.caps.vendor_part_id));
  c.caps.hw_ver = static_cast<uint32_t>(env_number("SOFTHCA_HW_VER", c.caps.hw_ver));
  return c;
}

class LiveRuntime final : public Runtime {
 public:
  // Devices take their identity from the environment (config_from_env) in both cases; the
  // options say how many, which PCIe model, which clock and which taps; `faults`, what the links
  // between them do (docs/reliability.md).
  explicit LiveRuntime(const RuntimeOptions& options, const fabric::FaultSpec& faults = {}) {
    if (options.clock == nullptr) agent_.emplace([this](Picoseconds now) { run_timers(now); });
    hca::EngineClock& clock = options.clock != nullptr ? *options.clock : static_cast<hca::EngineClock&>(*agent_);
    if (faults.any()) {
      // Held packets are delivered by the drain that follows the timers run at their due time.
      hca::EngineClock* c = &clock;  // the agent or the caller's clock: both outlive the carrier's use
      carrier_.set_faults(faults, {[c] { return c->now(); }, [c](Picoseconds t) { c->request_wakeup(t); }});
    }
    const DeviceEnv env{lock_, carrier_, clock, options.tlp_tap, options.packet_tap, &seq_};
    for (uint32_t i = 0; i < options.num_devices; ++i) {
      hca::DeviceConfig config = config_from_env(i);
      if (options.pcie) config.pcie = *options.pcie;
      config.seed = options.device_seed ? *options.device_seed + i : fresh_device_seed();
      lids_.push_back(config.port.lid);
      devices_.push_back(std::make_unique<LiveDevice>(config, i, env));
      slots_.push_back(devices_.back().get());
    }
  }
  ~LiveRuntime() override {
    if (agent_) agent_->stop();
  }

  void run_timers(Picoseconds now) override {
    std::lock_guard<std::mutex> g(lock_);
    for (auto& d : devices_) d->run_timers_locked(now);
    carrier_.drain();
  }

  std::span<DeviceSlot* const> devices() override { return slots_; }

  // "faults": what the link into the device at `lid` did, when faults are on.
  void add_fault_stats(nlohmann::json& device, uint16_t lid) {
    fabric::FaultCounters c;
    {
      std::lock_guard<std::mutex> g(lock_);
      c = carrier_.fault_counters(lid);
    }
    if (c.offered == 0) return;
    nlohmann::json& j = device["faults"];
    for_each_counter(c, [&j](std::string_view name, uint64_t v) { j[std::string(name)] = v; });
  }

  void dump_stats(const std::string& path) override {
    nlohmann::json all = nlohmann::json::array();
    for (auto& d : devices_) {
      const hca::DeviceStats s = d->stats();
      nlohmann::json qps;
      {
        std::lock_guard<std::mutex> g(lock_);
        qps = qp_stats_json(d->region());
      }
      all.push_back({{"device", d->name()},
                     {"pcie", nlohmann::json::parse(d->counters().snapshot().to_json())},
                     {"packets", packet_stats_json(s)},
                     {"qps", std::move(qps)}});
      add_fault_stats(all.back(), lids_[all.size() - 1]);
    }
    write_stats_dump(path, nlohmann::json{{"devices", all}});
  }

 private:
  // Declaration order is teardown order reversed: devices go first, then the agent, the carrier
  // and the lock they use.
  std::mutex lock_;
  fabric::InprocCarrier carrier_;
  std::atomic<uint64_t> seq_{0};  // tap event counter
  std::optional<Agent> agent_;
  std::vector<std::unique_ptr<LiveDevice>> devices_;
  std::vector<DeviceSlot*> slots_;
  std::vector<uint16_t> lids_;  // of devices_, for the fault counters of the links into them
};

// SOFTHCA_NUM_DEVICES set (even to 1): the private in-process runtime; unset: the host's shared one.
bool private_mode_from_env() {
  const char* v = std::getenv("SOFTHCA_NUM_DEVICES");
  return v != nullptr && *v != '\0';
}

uint32_t devices_from_env() {
  const char* v = std::getenv("SOFTHCA_NUM_DEVICES");
  if (v == nullptr || *v == '\0') return 1;
  const long n = std::strtol(v, nullptr, 10);
  return n < 0 ? 0 : n > static_cast<long>(kMaxDevices) ? kMaxDevices : static_cast<uint32_t>(n);
}

uint8_t blueflame_from_env() {
  const char* v = std::getenv("SOFTHCA_BLUEFLAME");
  if (v == nullptr) return 0;
  const std::string s(v);
  return s == "off" ? 1 : s == "prefer" ? 2 : 0;
}

}  // namespace

std::unique_ptr<Runtime> Runtime::create(uint32_t num_devices) {
  RuntimeOptions options;
  options.num_devices = num_devices;
  return create(options);
}

std::unique_ptr<Runtime> Runtime::create(const RuntimeOptions& options) {
  return std::make_unique<LiveRuntime>(options);
}

namespace {
// The runtime install_process() was given, taken by the first process() call.
std::mutex g_install_lock;
std::unique_ptr<Runtime> g_installed;
bool g_process_created = false;
}  // namespace

bool Runtime::install_process(std::unique_ptr<Runtime> rt) {
  std::lock_guard<std::mutex> g(g_install_lock);
  if (g_process_created || g_installed) return false;
  g_installed = std::move(rt);
  return true;
}

namespace {

// The observers SOFTHCA_PCAP and SOFTHCA_TRACE ask for (docs/observability.md). Created with the
// process runtime, before its devices, and like it never destroyed: a timer thread may still send
// while the process exits. The files are finished by an atexit handler.
struct EnvObservers {
  SteadyTapClock clock;  // live mode: wall time
  std::unique_ptr<PcapTap> pcap;
  std::unique_ptr<TraceRecorder> trace;
  std::string trace_path;
  TapFanout fanout;
};
EnvObservers* g_observers = nullptr;  // set once, by process()

// The observers the environment asks for, or nullptr when it asks for none. A file that cannot
// be created is reported on stderr and left out; the program runs on.
EnvObservers* observers_from_env() {
  const char* pcap_path = std::getenv("SOFTHCA_PCAP");
  const char* trace_path = std::getenv("SOFTHCA_TRACE");
  const bool want_pcap = pcap_path != nullptr && *pcap_path != '\0';
  const bool want_trace = trace_path != nullptr && *trace_path != '\0';
  if (!want_pcap && !want_trace) return nullptr;
  auto* obs = new EnvObservers();
  if (want_pcap) {
    std::string error;
    // The host's shared device on an Ethernet port (SOFTHCA_LINK=roce) sends RoCEv2: Ethernet frames.
    LinkOptions link;
    const bool roce = !private_mode_from_env() && link_options_from_env(link, error) &&
                      link.layer == hwif::LinkLayer::kEthernet;
    if (auto writer = fabric::PcapWriter::open(pcap_path, error, roce ? fabric::PcapLink::kEthernet
                                                                      : fabric::PcapLink::kErfInfiniband)) {
      obs->pcap = std::make_unique<PcapTap>(std::move(writer), obs->clock);
      obs->fanout.add(static_cast<PacketTap*>(obs->pcap.get()));
    } else {
      std::fprintf(stderr, "softhca: SOFTHCA_PCAP=%s: %s; no capture is written\n", pcap_path, error.c_str());
    }
  }
  if (want_trace) {
    uint64_t max_events = env_number("SOFTHCA_TRACE_MAX_EVENTS", TraceRecorder::kDefaultMaxEvents);
    if (max_events == 0) max_events = TraceRecorder::kDefaultMaxEvents;
    obs->trace = std::make_unique<TraceRecorder>(obs->clock, static_cast<size_t>(max_events), /*cpu_events=*/true);
    set_process_cpu_tap(obs->trace.get());  // the verbs layer adds post_send and poll_cq hits
    obs->trace_path = trace_path;
    obs->fanout.add(static_cast<TlpTap*>(obs->trace.get()));
    obs->fanout.add(static_cast<PacketTap*>(obs->trace.get()));
  }
  return obs;
}

// At exit: close the capture and write the trace.
void finish_observers() {
  EnvObservers* obs = g_observers;
  if (obs == nullptr) return;
  if (obs->pcap) obs->pcap->finish();
  if (obs->trace) {
    ChromeTraceInfo info;
    for (DeviceSlot* d : Runtime::process().devices()) info.device_names.push_back(d->name());
    info.dropped_events = obs->trace->dropped();
    info.max_events = obs->trace->max_events();
    const std::vector<TraceEvent> events = obs->trace->events();
    if (!write_chrome_trace(obs->trace_path, events, info)) {
      std::fprintf(stderr, "softhca: SOFTHCA_TRACE=%s: cannot write the trace\n", obs->trace_path.c_str());
    }
  }
}

}  // namespace

namespace {

// This process's attachment to its host's shared device (docs/live-mode.md), detached at exit: its
// objects destroyed, the host segment removed when it is the host's last process. When attaching
// fails (a bad SOFTHCA_FABRIC/SOFTHCA_HOST, no /dev/shm) the reason goes to stderr and the process
// sees no device, as on a machine whose HCA is absent.
SharedRuntime* g_shared = nullptr;

Runtime* shared_from_env(const RuntimeOptions& options) {
  SharedRuntimeOptions so;
  std::string error;
  if (!host_names_from_env(so.names, error)) {
    std::fprintf(stderr, "softhca: %s; no device\n", error.c_str());
    return new LiveRuntime(RuntimeOptions{0, options.pcie, nullptr, nullptr, nullptr, std::nullopt});
  }
  so.config_for_lid = [](uint16_t lid) { return config_from_env(lid > 0 ? lid - 1u : 0u); };
  so.pcie = options.pcie;
  so.tlp_tap = options.tlp_tap;
  so.packet_tap = options.packet_tap;
  std::unique_ptr<SharedRuntime> rt = SharedRuntime::create(so, error);
  if (rt == nullptr) {
    std::fprintf(stderr, "softhca: cannot attach host %s of fabric %s: %s; no device\n", so.names.host.c_str(),
                 so.names.fabric.c_str(), error.c_str());
    return new LiveRuntime(RuntimeOptions{0, options.pcie, nullptr, nullptr, nullptr, std::nullopt});
  }
  g_shared = rt.release();
  // Registered before SOFTHCA_STATS's handler, so it runs after it (atexit runs in reverse).
  std::atexit([] { g_shared->detach(); });
  return g_shared;
}

// The private runtime of SOFTHCA_NUM_DEVICES, with the faults of SOFTHCA_FAULTS on its carrier. A
// bad SOFTHCA_FAULTS leaves the process without devices, said on stderr: a test that asked for
// faults must not run without them.
Runtime* private_from_env(const RuntimeOptions& options) {
  fabric::FaultSpec faults;
  std::string error;
  if (!fault_spec_from_env(faults, error)) {
    std::fprintf(stderr, "softhca: %s; no device\n", error.c_str());
    return new LiveRuntime(RuntimeOptions{0, options.pcie, nullptr, nullptr, nullptr, std::nullopt});
  }
  return new LiveRuntime(options, faults);
}

}  // namespace

Runtime& Runtime::process() {
  // Created on first use and never destroyed: verbs objects may be used until the very end of
  // the process, from any thread. SOFTHCA_STATS, SOFTHCA_PCAP and SOFTHCA_TRACE are finished at
  // exit. An installed runtime keeps its own taps: the environment's observers are not attached.
  static Runtime* const instance = []() -> Runtime* {
    {
      std::lock_guard<std::mutex> g(g_install_lock);
      g_process_created = true;
      if (g_installed) return g_installed.release();
    }
    RuntimeOptions options;
    options.num_devices = devices_from_env();
    g_observers = observers_from_env();
    if (g_observers != nullptr) {
      if (g_observers->fanout.has_tlp_taps()) options.tlp_tap = &g_observers->fanout;
      if (g_observers->fanout.has_packet_taps()) options.packet_tap = &g_observers->fanout;
      std::atexit(finish_observers);
    }
    Runtime* rt = private_mode_from_env() ? private_from_env(options) : shared_from_env(options);
    const uint8_t bf = blueflame_from_env();
    for (DeviceSlot* d : rt->devices()) d->set_blueflame_mode(bf);
    if (std::getenv("SOFTHCA_STATS") != nullptr) {
      std::atexit([] {
        if (const char* path = std::getenv("SOFTHCA_STATS")) Runtime::process().dump_stats(path);
      });
    }
    return rt;
  }();
  return *instance;
}

}  // namespace softhca::runtime
