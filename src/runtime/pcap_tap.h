// SOFTHCA_PCAP: a PacketTap that writes every packet on the wire to a pcap file (native IB in ERF
// records, fabric/capture/pcap_writer.h).
// Each packet is written once, when its sending device transmits it: the picture of a wire tap,
// with no duplicates for tshark's analysis to trip over. The receiving copies are the same bytes
// (the in-process carrier is lossless and does not alter packets; a packet to an unknown LID is
// still captured, as it was on the wire). When links can corrupt or drop packets, the receive side
// will be added with ERF capture interface 1; until then every record has interface 0.
// Thread-safe (one mutex); records are written in the order the tap is called.
#pragma once
#include <memory>
#include <mutex>

#include "fabric/capture/pcap_writer.h"
#include "runtime/runtime.h"
#include "runtime/tap_clock.h"

namespace softhca::runtime {

class PcapTap final : public PacketTap {
 public:
  PcapTap(std::unique_ptr<fabric::PcapWriter> writer, TapClock& clock);

  void on_packet(uint64_t seq, uint32_t device, PacketDirection dir, std::span<const uint8_t> packet) override;
  // Flushes and closes the file; later packets are ignored (for process exit, when a timer thread
  // may still send).
  void finish();
  [[nodiscard]] uint64_t packets_written();

 private:
  std::mutex mu_;
  std::unique_ptr<fabric::PcapWriter> writer_;  // null after finish()
  TapClock& clock_;
  uint64_t written_ = 0;
};

}  // namespace softhca::runtime
