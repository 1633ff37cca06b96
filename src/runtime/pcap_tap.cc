#include "runtime/pcap_tap.h"

namespace softhca::runtime {

PcapTap::PcapTap(std::unique_ptr<fabric::PcapWriter> writer, TapClock& clock)
    : writer_(std::move(writer)), clock_(clock) {}

void PcapTap::on_packet(uint64_t /*seq*/, uint32_t /*device*/, PacketDirection dir, std::span<const uint8_t> packet) {
  if (dir != PacketDirection::kSent) return;
  std::lock_guard<std::mutex> g(mu_);
  if (!writer_) return;
  // The time is read under the lock, so records are in time order.
  writer_->write(packet, clock_.unix_time_at_start() + duration_cast<Nanoseconds>(clock_.now()));
  ++written_;
}

void PcapTap::finish() {
  std::lock_guard<std::mutex> g(mu_);
  writer_.reset();  // flushes and closes
}

uint64_t PcapTap::packets_written() {
  std::lock_guard<std::mutex> g(mu_);
  return written_;
}

}  // namespace softhca::runtime
