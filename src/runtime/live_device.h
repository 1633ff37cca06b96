// One device of the live runtime: the device model with its counters, the locked BAR and command
// interface the driver reaches it through, and its attachment to the in-process carrier.
// Locking: every entry into the device model takes the runtime's device lock, runs the device,
// then drains the carrier so that the whole exchange (packets, ACKs, CQEs) is done before the
// lock is released. The device's timers are run by the runtime's agent thread.
#pragma once
#include <atomic>
#include <bitset>
#include <cstdint>
#include <mutex>
#include <string>

#include "fabric/inproc_carrier.h"
#include "hca/device.h"
#include "runtime/inproc_kernel.h"
#include "runtime/runtime.h"

namespace softhca::runtime {

// Everything a device shares with its runtime.
struct DeviceEnv {
  std::mutex& lock;
  fabric::InprocCarrier& carrier;
  hca::EngineClock& clock;
  TlpTap* tlp_tap = nullptr;
  PacketTap* packet_tap = nullptr;
  std::atomic<uint64_t>* seq = nullptr;  // the runtime's event counter
};

class LiveDevice final : public DeviceSlot,
                         private pcie::TlpSink,
                         private hca::PacketPort,
                         private fabric::PacketReceiver,
                         private hwif::MmioTarget,
                         private hwif::CommandInterface {
 public:
  LiveDevice(const hca::DeviceConfig& config, uint32_t index, const DeviceEnv& env);
  ~LiveDevice() override;

  [[nodiscard]] const std::string& name() const override { return name_; }
  [[nodiscard]] uint64_t node_guid_be() const override;
  pcie::HostPort& host_port() override { return host_port_; }
  hwif::CommandInterface& commands() override { return *this; }
  pcie::Counters& counters() override { return counters_; }
  pcie::HostKernel& kernel() override { return kernel_; }
  uint32_t acquire_uar() override;
  void release_uar(uint32_t uar_index) override;
  [[nodiscard]] uint8_t blueflame_mode() const override { return blueflame_mode_; }
  void set_blueflame_mode(uint8_t mode) override { blueflame_mode_ = mode; }

  // Under the device lock: run timers that are due.
  void run_timers_locked(Picoseconds now) { device_.on_timer(now); }
  // A copy of the device's packet counters, taken under the device lock.
  hca::DeviceStats stats();
  // Where the device keeps its state (its QPs and their counters); read it under the device lock.
  [[nodiscard]] hca::DeviceRegion region() const { return device_.region(); }

 private:
  void on_tlp(const pcie::Tlp& tlp) override;
  void transmit(std::span<const uint8_t> packet) override;
  void deliver(std::span<const uint8_t> packet) override;
  void mmio_write(uint64_t bar_offset, const void* data, size_t len) override;
  void mmio_read(uint64_t bar_offset, void* dst, size_t len) override;
  int execute(hwif::CmdOpcode op, const void* in, size_t in_len, void* out, size_t out_len) override;

  std::string name_;
  uint32_t index_;
  std::mutex& lock_;
  fabric::InprocCarrier& carrier_;
  TlpTap* tlp_tap_;
  PacketTap* packet_tap_;
  std::atomic<uint64_t>* seq_;
  InprocKernel kernel_;  // before device_: outlives what the device was given
  pcie::Counters counters_;
  hca::Device device_;
  pcie::HostPort host_port_;
  std::mutex uar_lock_;
  std::bitset<64> uars_in_use_;
  uint8_t blueflame_mode_ = 0;
};

}  // namespace softhca::runtime
