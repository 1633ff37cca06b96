// One device of the live runtime: the device model with its counters, the locked BAR and command
// interface the driver reaches it through, and its attachment to the in-process carrier.
// Locking: every entry into the device model takes the runtime's device lock, runs the device,
// then drains the carrier so that the whole exchange (packets, ACKs, CQEs) is done before the
// lock is released. The device's timers are run by the runtime's agent thread.
#pragma once
#include <bitset>
#include <cstdint>
#include <mutex>
#include <string>

#include "fabric/inproc_carrier.h"
#include "hca/device.h"
#include "runtime/agent.h"
#include "runtime/runtime.h"

namespace softhca::runtime {

class LiveDevice final : public DeviceSlot,
                         private hca::PacketPort,
                         private fabric::PacketReceiver,
                         private hwif::MmioTarget,
                         private hwif::CommandInterface {
 public:
  LiveDevice(const hca::DeviceConfig& config, uint32_t index, std::mutex& device_lock,
             fabric::InprocCarrier& carrier, Agent& agent);
  ~LiveDevice() override;

  [[nodiscard]] const std::string& name() const override { return name_; }
  [[nodiscard]] uint64_t node_guid_be() const override;
  pcie::HostPort& host_port() override { return host_port_; }
  hwif::CommandInterface& commands() override { return *this; }
  pcie::Counters& counters() override { return counters_; }
  uint32_t acquire_uar() override;
  void release_uar(uint32_t uar_index) override;
  [[nodiscard]] uint8_t blueflame_mode() const override { return blueflame_mode_; }
  void set_blueflame_mode(uint8_t mode) override { blueflame_mode_ = mode; }

  // Under the device lock: run timers that are due.
  void run_timers_locked(Picoseconds now) { device_.on_timer(now); }
  // A copy of the device's packet counters, taken under the device lock.
  hca::DeviceStats stats();

 private:
  void transmit(std::span<const uint8_t> packet) override { carrier_.send(packet); }
  void deliver(std::span<const uint8_t> packet) override { device_.receive(packet); }
  void mmio_write(uint64_t bar_offset, const void* data, size_t len) override;
  int execute(hwif::CmdOpcode op, const void* in, size_t in_len, void* out, size_t out_len) override;

  std::string name_;
  std::mutex& lock_;
  fabric::InprocCarrier& carrier_;
  pcie::Counters counters_;
  hca::Device device_;
  pcie::HostPort host_port_;
  std::mutex uar_lock_;
  std::bitset<64> uars_in_use_;
  uint8_t blueflame_mode_ = 0;
};

}  // namespace softhca::runtime
