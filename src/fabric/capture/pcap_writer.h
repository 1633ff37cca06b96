// A packet capture file: libpcap's savefile format, nanosecond timestamps, in one of two link types.
// InfiniBand ports: link type ERF (197), one ERF record of type InfiniBand per native packet
// (erf.h). Ethernet ports: link type Ethernet (1), each RoCEv2 IPv4 packet in an Ethernet II frame
// (no FCS) between the MACs roce.h derives from the IPv4 addresses. Opens in tshark and Wireshark
// (docs/observability.md). Left out: pcapng, reading. Not thread-safe: the owner serialises calls.
// Sizes in bytes.
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

enum class PcapLink : uint8_t {
  kErfInfiniband,  // packets are LRH..VCRC
  kEthernet,       // packets are RoCEv2 IPv4 packets (IPv4 header..ICRC)
};

class PcapWriter {
 public:
  // The largest packet a record holds whole; a longer one is cut and flagged truncated. An ERF
  // record length is 16 bits and covers its header.
  static constexpr size_t kMaxRecordPacketBytes = 65535 - 16;

  // Creates (or truncates) the file at path and writes the pcap file header. nullptr on failure,
  // with libpcap's reason in error.
  static std::unique_ptr<PcapWriter> open(const std::string& path, std::string& error,
                                          PcapLink link = PcapLink::kErfInfiniband);
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  // Appends one record: packet is LRH through VCRC (ERF) or an IPv4 packet (Ethernet), time is since
  // the Unix epoch (the pcap record and the ERF header both carry it), interface (0..3) goes into
  // the ERF capture-interface flags (ignored on Ethernet). An Ethernet packet shorter than an IPv4
  // header is framed as it is, between zero MACs.
  void write(std::span<const uint8_t> packet, Nanoseconds time, uint8_t interface = 0);
  // Pushes buffered records to the file; false on a write error.
  bool flush();
  [[nodiscard]] uint64_t records() const { return records_; }

 private:
  PcapWriter(pcap* handle, pcap_dumper* dumper, PcapLink link);
  void write_ethernet(std::span<const uint8_t> ipv4_packet, Nanoseconds time);
  void dump(const uint8_t* bytes, size_t len, Nanoseconds time);

  pcap* handle_;
  pcap_dumper* dumper_;
  PcapLink link_;
  std::vector<uint8_t> record_;  // one record, reused: no allocation per packet
  uint64_t records_ = 0;
};

}  // namespace softhca::fabric
