#include "fabric/inproc_carrier.h"

#include <algorithm>
#include <cstring>

namespace softhca::fabric {

namespace {
constexpr size_t kInitialSlots = 64;
}

InprocCarrier::InprocCarrier() : ring_(kInitialSlots) {}

void InprocCarrier::attach(uint16_t lid, PacketReceiver* port) { ports_[lid] = port; }
void InprocCarrier::detach(uint16_t lid) { ports_.erase(lid); }

void InprocCarrier::grow() {
  std::vector<Slot> bigger(ring_.size() * 2);
  for (size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) % ring_.size()];
  ring_ = std::move(bigger);
  head_ = 0;
}

void InprocCarrier::send(std::span<const uint8_t> packet) {
  if (packet.size() > kMaxPacketBytes) {
    ++unroutable_;
    return;
  }
  if (count_ == ring_.size()) grow();
  Slot& s = ring_[(head_ + count_) % ring_.size()];
  s.len = static_cast<uint32_t>(packet.size());
  std::memcpy(s.bytes.data(), packet.data(), packet.size());
  ++count_;
}

void InprocCarrier::drain() {
  while (count_ > 0) {
    const Slot& s = ring_[head_];
    current_.len = s.len;
    std::memcpy(current_.bytes.data(), s.bytes.data(), s.len);
    head_ = (head_ + 1) % ring_.size();
    --count_;
    if (current_.len < kLrhBytes) {
      ++unroutable_;
      continue;
    }
    const auto dlid = static_cast<uint16_t>((current_.bytes[2] << 8) | current_.bytes[3]);
    auto it = ports_.find(dlid);
    if (it == ports_.end()) {
      ++unroutable_;
      continue;
    }
    ++delivered_;
    it->second->deliver(std::span<const uint8_t>(current_.bytes.data(), current_.len));
  }
}

}  // namespace softhca::fabric
