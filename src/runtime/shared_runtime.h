// The live runtime across processes and hosts (docs/live-mode.md): this process's attachment to
// its host's shared device. One DeviceSlot, "softhca_0", whose state lives in the host segment;
// every entry (BAR write, command, received packet, timer) takes the segment's robust device lock,
// runs the device as this process (commands tag new objects with this process's slot), then loops
// packets addressed to the host's own LID (Ethernet: own IPv4 address) back into the device before
// the lock is released. Other packets go out through the UDP carrier: on InfiniBand, native packets
// between the hosts' ports listed in the fabric registry; on Ethernet (SOFTHCA_LINK=roce), RoCEv2
// from <host ip>:<roce port> to the same port of the destination IPv4 address. Two background threads per process: the agent
// (timers at CLOCK_MONOTONIC deadlines shared by the host's processes, and the liveness sweep
// every kSweepPeriod) and the UDP receiver.
// Per process, not per host: PCIe counters, taps (SOFTHCA_PCAP/TRACE see this process's
// traffic), the BlueFlame policy. Per host: the device and its packet counters.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "hca/device.h"
#include "runtime/host_segment.h"
#include "runtime/link_config.h"
#include "runtime/runtime.h"

namespace softhca::runtime {

struct SharedRuntimeOptions {
  HostNames names;
  // The base of the host segment and the fabric registry (SegmentOptions::dir).
  std::string dir = "/dev/shm";
  // The device's configuration for a LID (identity overrides from the environment included); the
  // runtime fills the LID from the fabric registry. Unset: hca::default_device_config(lid - 1).
  std::function<hca::DeviceConfig(uint16_t lid)> config_for_lid;
  std::optional<pcie::PcieConfig> pcie;
  TlpTap* tlp_tap = nullptr;
  PacketTap* packet_tap = nullptr;
  // Open the UDP carrier to other hosts (off: packets to other LIDs are counted and dropped).
  bool udp = true;
  // The port's wire (link_config.h). Unset: link_options_from_env(). Every process of a host must
  // give the same; a process that differs from the one that created the host fails to attach.
  std::optional<LinkOptions> link;
  // What the port's links do to packets (docs/reliability.md). Unset: fault_spec_from_env().
  std::optional<fabric::FaultSpec> faults;
};

class SharedRuntime final : public Runtime {
 public:
  static constexpr std::chrono::milliseconds kSweepPeriod{100};

  // Attaches this process to its host (creating the host when it is the first). Null with
  // `error` set on failure.
  static std::unique_ptr<SharedRuntime> create(const SharedRuntimeOptions& options, std::string& error);
  ~SharedRuntime() override;

  std::span<DeviceSlot* const> devices() override;
  void dump_stats(const std::string& path) override;
  void run_timers(Picoseconds now) override;

  // Destroys this process's device objects, frees its slot and, when it was the host's last
  // process, removes the host segment and the host's registry entry. Idempotent; only in the
  // process that attached (a no-op in a fork child). Later entries into the device fail with EIO
  // (commands) or are ignored (BAR writes).
  void detach();
  // Reclaims every slot whose process is gone: returns how many.
  uint32_t sweep();

  [[nodiscard]] uint32_t slot() const;
  [[nodiscard]] uint16_t lid() const;
  [[nodiscard]] const std::string& segment_path() const;
  // Packets to another LID that no carrier could take (no UDP carrier, unknown LID, send error).
  [[nodiscard]] uint64_t packets_unroutable() const;
  [[nodiscard]] uint64_t packets_to_other_hosts() const;
  [[nodiscard]] uint64_t packets_from_other_hosts() const;
  // Datagrams the UDP carrier refused: not from a host of the fabric (fabric::CarrierGate).
  [[nodiscard]] uint64_t packets_refused_at_carrier() const;
  [[nodiscard]] hca::Device::ObjectCounts object_counts();
  // The host device's packet counters (all its processes), read under the device lock.
  [[nodiscard]] hca::DeviceStats packet_stats();

  class Impl;

 private:
  explicit SharedRuntime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::mutex child_mu_;  // a fork child attaching anew (devices())
};

}  // namespace softhca::runtime
