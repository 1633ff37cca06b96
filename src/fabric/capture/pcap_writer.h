// A packet capture file of native InfiniBand packets: libpcap's savefile format with link type
// ERF (197), one ERF record of type InfiniBand per packet (erf.h), nanosecond timestamps. Opens in
// tshark and Wireshark (docs/observability.md). Left out: RoCEv2 (Ethernet link type), pcapng,
// reading. Not thread-safe: the owner serialises calls. Sizes in bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/units.h"

// libpcap's handle types, declared here so that users of this header need no <pcap/pcap.h>.
struct pcap;
struct pcap_dumper;

namespace softhca::fabric {

class PcapWriter {
 public:
  // The largest packet a record holds whole; a longer one is cut and flagged truncated. An ERF
  // record length is 16 bits and covers its header.
  static constexpr size_t kMaxRecordPacketBytes = 65535 - 16;

  // Creates (or truncates) the file at path and writes the pcap file header. nullptr on failure,
  // with libpcap's reason in error.
  static std::unique_ptr<PcapWriter> open(const std::string& path, std::string& error);
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  // Appends one record: packet is LRH through VCRC, time is since the Unix epoch (the pcap record
  // and the ERF header both carry it), interface (0..3) goes into the ERF capture-interface flags.
  void write(std::span<const uint8_t> packet, Nanoseconds time, uint8_t interface = 0);
  // Pushes buffered records to the file; false on a write error.
  bool flush();
  [[nodiscard]] uint64_t records() const { return records_; }

 private:
  PcapWriter(pcap* handle, pcap_dumper* dumper);

  pcap* handle_;
  pcap_dumper* dumper_;
  std::vector<uint8_t> record_;  // one record, reused: no allocation per packet
  uint64_t records_ = 0;
};

}  // namespace softhca::fabric
