// Several observers behind the runtime's single TlpTap and PacketTap (a capture and a trace at
// once). The lists are fixed before the runtime starts, so calls need no lock of their own; each
// tap is thread-safe itself.
#pragma once
#include <vector>

#include "runtime/runtime.h"

namespace softhca::runtime {

class TapFanout final : public TlpTap, public PacketTap {
 public:
  void add(TlpTap* tap) { tlp_taps_.push_back(tap); }
  void add(PacketTap* tap) { packet_taps_.push_back(tap); }
  [[nodiscard]] bool has_tlp_taps() const { return !tlp_taps_.empty(); }
  [[nodiscard]] bool has_packet_taps() const { return !packet_taps_.empty(); }

  void on_tlp(uint64_t seq, uint32_t device, const pcie::Tlp& tlp) override {
    for (TlpTap* t : tlp_taps_) t->on_tlp(seq, device, tlp);
  }
  void on_packet(uint64_t seq, uint32_t device, PacketDirection dir, std::span<const uint8_t> packet) override {
    for (PacketTap* t : packet_taps_) t->on_packet(seq, device, dir, packet);
  }

 private:
  std::vector<TlpTap*> tlp_taps_;
  std::vector<PacketTap*> packet_taps_;
};

}  // namespace softhca::runtime
