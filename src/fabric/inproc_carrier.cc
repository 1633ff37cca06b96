#include "fabric/inproc_carrier.h"

#include <algorithm>
#include <cstring>
#include <string>

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

void InprocCarrier::set_faults(const FaultSpec& spec, FaultClock clock) {
  faults_ = spec;
  fault_clock_ = std::move(clock);
  links_.clear();
  wake_asked_ = Picoseconds::max();
}

FaultCounters InprocCarrier::fault_counters(uint16_t lid) const {
  auto it = links_.find(lid);
  return it == links_.end() ? FaultCounters{} : it->second->counters();
}

FaultInjector& InprocCarrier::link_to(uint16_t dlid) {
  std::unique_ptr<FaultInjector>& link = links_[dlid];
  if (!link) link = std::make_unique<FaultInjector>(faults_, WireFormat::kNativeIb, "inproc/lid" + std::to_string(dlid));
  return *link;
}

void InprocCarrier::send(std::span<const uint8_t> packet) {
  if (packet.size() > kMaxPacketBytes) {
    ++unroutable_;
    return;
  }
  if (!faults_.any() || packet.size() < kLrhBytes) return enqueue(packet);
  const auto dlid = static_cast<uint16_t>((packet[2] << 8) | packet[3]);
  FaultInjector& link = link_to(dlid);
  link.send(packet, fault_clock_.now(), [this](std::span<const uint8_t> p) { enqueue(p); });
  const Picoseconds due = link.next_due();
  if (due < wake_asked_ && fault_clock_.wake_at) {
    wake_asked_ = due;
    fault_clock_.wake_at(due);
  }
}

// Held packets that are due join the queue.
void InprocCarrier::release_held() {
  if (links_.empty()) return;
  const Picoseconds now = fault_clock_.now();
  Picoseconds next = Picoseconds::max();
  for (auto& [lid, link] : links_) {
    link->release(now, [this](std::span<const uint8_t> p) { enqueue(p); });
    next = std::min(next, link->next_due());
  }
  // Asked again every time: a clock may keep one pending wake-up only and forget it once it fires
  // for an earlier deadline (runtime::Agent does).
  wake_asked_ = next;
  if (next != Picoseconds::max() && fault_clock_.wake_at) fault_clock_.wake_at(next);
}

void InprocCarrier::enqueue(std::span<const uint8_t> packet) {
  if (count_ == ring_.size()) grow();
  Slot& s = ring_[(head_ + count_) % ring_.size()];
  s.len = static_cast<uint32_t>(packet.size());
  std::memcpy(s.bytes.data(), packet.data(), packet.size());
  ++count_;
}

void InprocCarrier::drain() {
  release_held();
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
    if (dlid >= 0xc000 && dlid != 0xffff) {
      // A multicast LID (IBA 4.1.3): every port of the subnet gets a copy; each device keeps it
      // for the QPs attached to the group, if any.
      for (auto& [lid, port] : ports_) {
        ++delivered_;
        port->deliver(std::span<const uint8_t>(current_.bytes.data(), current_.len));
      }
      continue;
    }
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
