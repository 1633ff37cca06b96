// The runtimes of live mode: the devices this process sees, each a device model (src/hca), with
// its PCIe counters and the background agent that runs its timers. Runtime::process() gives the
// shared host device of docs/live-mode.md (SOFTHCA_FABRIC, SOFTHCA_HOST: one device per host in
// shared memory, run by every process of the host), or the private in-process runtime when
// SOFTHCA_NUM_DEVICES is set. Configured from the environment (docs/environment.md):
//   SOFTHCA_NUM_DEVICES  private mode: devices softhca_0..N-1 inside this process only (each its
//                        own "host" with its own LID on one in-process fabric)
//   SOFTHCA_STATS=FILE   PCIe counters of every device dumped as JSON when the process exits
//   SOFTHCA_BLUEFLAME    auto (default) | off | prefer: when the driver writes WQEs through the BAR
//   SOFTHCA_VENDOR_ID, SOFTHCA_VENDOR_PART_ID, SOFTHCA_HW_VER: the device identity (docs/device.md)
//   SOFTHCA_PCAP=FILE    every packet, as ERF records in a pcap file (docs/observability.md)
//   SOFTHCA_TRACE=FILE   TLPs and packets as Chrome/Perfetto trace-event JSON, written at exit
//   SOFTHCA_TRACE_MAX_EVENTS  bound of the trace's ring of events (default 1,000,000)
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "hca/device.h"
#include "hwif/device_interface.h"
#include "pcie/counters.h"
#include "pcie/host_kernel.h"
#include "pcie/host_port.h"

namespace softhca::runtime {

// One device as the verbs layer sees it: its name, GUID and the two ways to reach it.
class DeviceSlot {
 public:
  virtual ~DeviceSlot() = default;
  [[nodiscard]] virtual const std::string& name() const = 0;
  // Node GUID in network byte order, as ibv_get_device_guid returns it.
  [[nodiscard]] virtual uint64_t node_guid_be() const = 0;
  virtual pcie::HostPort& host_port() = 0;
  virtual hwif::CommandInterface& commands() = 0;
  virtual pcie::Counters& counters() = 0;
  // The host kernel services of the device's host (DMA-coherent memory, pinning, interrupt
  // vectors) that the driver of every context opened on this device uses. Outlives the contexts.
  virtual pcie::HostKernel& kernel() = 0;
  // Allocates a UAR page index for a new context; released with release_uar.
  virtual uint32_t acquire_uar() = 0;
  virtual void release_uar(uint32_t uar_index) = 0;
  // BlueFlame policy for contexts opened from now on: 0 auto, 1 off, 2 prefer (the values of
  // driver::BlueFlameMode; the runtime does not depend on the driver).
  [[nodiscard]] virtual uint8_t blueflame_mode() const = 0;
  virtual void set_blueflame_mode(uint8_t mode) = 0;
};

// Observers of what the devices do, for captures, traces and the timing model. They see events in
// the order things happen: a doorbell's TLP first (on the posting thread, before the device lock),
// then the whole causal chain it starts, under the device lock. Several threads may post at once,
// so a tap must be thread-safe; it must not call back into verbs. `seq` is one counter across all
// devices and both kinds of event.
enum class PacketDirection : uint8_t { kSent, kReceived };
class PacketTap {
 public:
  virtual ~PacketTap() = default;
  virtual void on_packet(uint64_t seq, uint32_t device, PacketDirection dir, std::span<const uint8_t> packet) = 0;
};
class TlpTap {
 public:
  virtual ~TlpTap() = default;
  virtual void on_tlp(uint64_t seq, uint32_t device, const pcie::Tlp& tlp) = 0;
};

struct RuntimeOptions {
  uint32_t num_devices = 1;
  // PCIe byte model of every device; unset: the device default (docs/device.md).
  std::optional<pcie::PcieConfig> pcie;
  // Time for the devices' timers. Null: live wall-clock time and a background agent thread.
  // Given (sim mode): nothing runs by itself; the owner advances time and calls run_timers().
  hca::EngineClock* clock = nullptr;
  TlpTap* tlp_tap = nullptr;
  PacketTap* packet_tap = nullptr;
  // The seed of device i's keys and QPNs is device_seed + i (hca::DeviceConfig::seed): sim mode
  // and demonstrations give one, so a run repeats itself. Unset: fresh_device_seed() per device.
  std::optional<uint64_t> device_seed;
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  // The process-wide runtime, created on first use from the environment; lives until exit.
  static Runtime& process();
  // Makes `rt` the process-wide runtime (for example a sim-mode runtime for the timing model).
  // Must come before the first process() call; returns false (and drops rt) otherwise.
  static bool install_process(std::unique_ptr<Runtime> rt);
  // A runtime with n devices, independent of the environment (tests).
  static std::unique_ptr<Runtime> create(uint32_t num_devices);
  static std::unique_ptr<Runtime> create(const RuntimeOptions& options);

  [[nodiscard]] virtual std::span<DeviceSlot* const> devices() = 0;
  // Writes every device's counters as JSON to path.
  virtual void dump_stats(const std::string& path) = 0;
  // Runs the devices' timers due at `now` (sim mode; in live mode the agent does it).
  virtual void run_timers(Picoseconds now) = 0;
};

}  // namespace softhca::runtime
