#include "runtime/live_device.h"

#include <endian.h>

namespace softhca::runtime {

LiveDevice::LiveDevice(const hca::DeviceConfig& config, uint32_t index, const DeviceEnv& env)
    : name_("softhca_" + std::to_string(index)),
      index_(index),
      lock_(env.lock),
      carrier_(env.carrier),
      tlp_tap_(env.tlp_tap),
      packet_tap_(env.packet_tap),
      seq_(env.seq),
      device_(config, *this, *this, env.clock),
      host_port_(*this, *this, device_.config().pcie) {
  std::lock_guard<std::mutex> g(lock_);
  carrier_.attach(device_.lid(), this);
}

LiveDevice::~LiveDevice() {
  std::lock_guard<std::mutex> g(lock_);
  carrier_.detach(device_.lid());
}

// Every TLP of this device, both ports: counted always; shown to the tap when one is attached.
// Host-port TLPs (doorbells, BlueFlame) arrive on the posting thread before the device lock.
void LiveDevice::on_tlp(const pcie::Tlp& tlp) {
  counters_.on_tlp(tlp);
  if (tlp_tap_ != nullptr) tlp_tap_->on_tlp(seq_->fetch_add(1, std::memory_order_relaxed), index_, tlp);
}

void LiveDevice::transmit(std::span<const uint8_t> packet) {
  if (packet_tap_ != nullptr) packet_tap_->on_packet(seq_->fetch_add(1, std::memory_order_relaxed), index_, PacketDirection::kSent, packet);
  carrier_.send(packet);
}

void LiveDevice::deliver(std::span<const uint8_t> packet) {
  if (packet_tap_ != nullptr) packet_tap_->on_packet(seq_->fetch_add(1, std::memory_order_relaxed), index_, PacketDirection::kReceived, packet);
  device_.receive(packet);
}

uint64_t LiveDevice::node_guid_be() const { return htobe64(device_.config().caps.node_guid); }

uint32_t LiveDevice::acquire_uar() {
  std::lock_guard<std::mutex> g(uar_lock_);
  for (uint32_t i = 0; i < uars_in_use_.size() && i < device_.config().caps.num_uars; ++i) {
    if (!uars_in_use_[i]) {
      uars_in_use_[i] = true;
      return i;
    }
  }
  return 0;  // all taken: share page 0 (doorbells carry the QPN, so sharing is safe)
}

void LiveDevice::release_uar(uint32_t uar_index) {
  std::lock_guard<std::mutex> g(uar_lock_);
  if (uar_index < uars_in_use_.size()) uars_in_use_[uar_index] = false;
}

hca::DeviceStats LiveDevice::stats() {
  std::lock_guard<std::mutex> g(lock_);
  return device_.stats();
}

void LiveDevice::mmio_write(uint64_t bar_offset, const void* data, size_t len) {
  std::lock_guard<std::mutex> g(lock_);
  device_.mmio_write(bar_offset, data, len);
  carrier_.drain();
}

void LiveDevice::mmio_read(uint64_t bar_offset, void* dst, size_t len) {
  std::lock_guard<std::mutex> g(lock_);
  device_.mmio_read(bar_offset, dst, len);
}

int LiveDevice::execute(hwif::CmdOpcode op, const void* in, size_t in_len, void* out, size_t out_len) {
  std::lock_guard<std::mutex> g(lock_);
  const int err = device_.execute(op, in, in_len, out, out_len);
  carrier_.drain();
  return err;
}

}  // namespace softhca::runtime
