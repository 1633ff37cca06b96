// The process's sim-mode runtime for the timing model's workloads: two devices (softhca_0,
// softhca_1) on a virtual clock, with taps that hand every TLP and packet to the recorder of the
// run in progress; no agent thread, timers never run (the in-process fabric is lossless).
#pragma once
#include <cstdint>
#include <string>

#include "pcie/pcie_config.h"
#include "runtime/runtime.h"
#include "sim/machine_profile.h"
#include "sim/scheduler.h"
#include "tools/model_recorder.h"

namespace softhca::tools {

inline constexpr uint32_t kModelHosts = 2;
inline constexpr const char* kHostName[kModelHosts] = {"softhca_0", "softhca_1"};

// The PCIe byte model a profile implies (P3, P4, P6, K2), for the runtime's devices.
pcie::PcieConfig pcie_config_of(const sim::MachineProfile& p);

// Makes sure this process's runtime is the sim-mode one, with two devices and the byte model of
// `p`. The first call installs it (before any verbs call); later calls check that the byte model
// has not changed. Throws std::runtime_error when that cannot be (a live runtime is already in
// use, or a profile with another byte model was used first).
void ensure_sim_runtime(const sim::MachineProfile& p);

// While alive (one run at a time): the devices' clock is `scheduler`'s time and their taps feed
// `recorder`. Requires ensure_sim_runtime() first.
class SimRunScope {
 public:
  SimRunScope(const sim::Scheduler& scheduler, ChainRecorder& recorder);
  ~SimRunScope();
  SimRunScope(const SimRunScope&) = delete;
  SimRunScope& operator=(const SimRunScope&) = delete;
};

// The sim runtime's device of that name; throws std::runtime_error if there is none.
runtime::DeviceSlot& slot_named(const char* name);

// Throws std::runtime_error "what: strerror(err) (errno err)".
[[noreturn]] void fail(const std::string& what, int err);

}  // namespace softhca::tools
