#include "runtime/trace_recorder.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

namespace softhca::runtime {

namespace {
std::atomic<CpuTap*> g_cpu_tap{nullptr};  // set once by the runtime, before any context opens
}  // namespace

CpuTap* process_cpu_tap() { return g_cpu_tap.load(std::memory_order_acquire); }
void set_process_cpu_tap(CpuTap* tap) { g_cpu_tap.store(tap, std::memory_order_release); }

uint32_t current_tid() {
  thread_local const auto tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  return tid;
}

TraceRecorder::TraceRecorder(TapClock& clock, size_t max_events, bool cpu_events)
    : clock_(clock), max_events_(std::max<size_t>(max_events, 1)), cpu_events_(cpu_events) {}

void TraceRecorder::on_tlp(uint64_t seq, uint32_t device, const pcie::Tlp& tlp) {
  TraceEvent e;
  e.seq = seq;
  e.device = device;
  e.kind = TraceEventKind::kTlp;
  e.tlp = tlp;
  // A doorbell or BlueFlame TLP is made on the thread that rings it (runtime.h): that thread's
  // track shows the ring, just before the TLP.
  const bool ring = cpu_events_ && (tlp.cause == pcie::TlpCause::kDoorbell || tlp.cause == pcie::TlpCause::kBlueFlame);
  TraceEvent cpu;
  if (ring) {
    cpu.seq = seq;
    cpu.device = device;
    cpu.kind = TraceEventKind::kCpu;
    cpu.cpu = CpuEventInfo{tlp.cause == pcie::TlpCause::kDoorbell ? CpuEventKind::kDoorbell : CpuEventKind::kBlueFlame,
                           current_tid(), device, 1};
  }
  std::lock_guard<std::mutex> g(mu_);
  if (ring) push_locked(cpu);
  push_locked(e);
}

void TraceRecorder::on_cpu(CpuEventKind what, uint32_t object, uint32_t count) {
  if (!cpu_events_) return;
  TraceEvent e;
  e.kind = TraceEventKind::kCpu;
  e.cpu = CpuEventInfo{what, current_tid(), object, count};
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
