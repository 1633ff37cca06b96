#include "runtime/trace_recorder.h"

#include <algorithm>

namespace softhca::runtime {

TraceRecorder::TraceRecorder(TapClock& clock, size_t max_events)
    : clock_(clock), max_events_(std::max<size_t>(max_events, 1)) {}

void TraceRecorder::on_tlp(uint64_t seq, uint32_t device, const pcie::Tlp& tlp) {
  TraceEvent e;
  e.seq = seq;
  e.device = device;
  e.kind = TraceEventKind::kTlp;
  e.tlp = tlp;
  std::lock_guard<std::mutex> g(mu_);
  push_locked(e);
}

void TraceRecorder::on_packet(uint64_t seq, uint32_t device, PacketDirection dir, std::span<const uint8_t> packet) {
  TraceEvent e;
  e.seq = seq;
  e.device = device;
  e.kind = TraceEventKind::kPacket;
  e.packet_dir = dir;
  e.packet = fabric::summarize(packet);  // outside the lock: only the header fields are kept
  std::lock_guard<std::mutex> g(mu_);
  push_locked(e);
}

void TraceRecorder::push_locked(TraceEvent& e) {
  e.time = clock_.now();  // under the lock: times never decrease along the ring
  if (ring_.size() < max_events_) {
    ring_.push_back(e);
    return;
  }
  ring_[next_] = e;
  next_ = (next_ + 1) % max_events_;
  ++dropped_;
}

std::vector<TraceEvent> TraceRecorder::events() {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<TraceEvent> out;
  out.reserve(ring_.size());
  out.insert(out.end(), ring_.begin() + static_cast<ptrdiff_t>(next_), ring_.end());
  out.insert(out.end(), ring_.begin(), ring_.begin() + static_cast<ptrdiff_t>(next_));
  return out;
}

uint64_t TraceRecorder::dropped() {
  std::lock_guard<std::mutex> g(mu_);
  return dropped_;
}

void TraceRecorder::clear() {
  std::lock_guard<std::mutex> g(mu_);
  ring_.clear();
  next_ = 0;
  dropped_ = 0;
}

}  // namespace softhca::runtime
