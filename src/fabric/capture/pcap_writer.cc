#include "fabric/capture/pcap_writer.h"

#include <pcap/pcap.h>

#include <algorithm>
#include <cstring>

#include "fabric/capture/erf.h"
#include "fabric/packet/roce.h"

namespace softhca::fabric {

namespace {
// The snapshot length the file header announces: every record fits whole.
constexpr int kSnapLen = 65535;
constexpr int kLinkTypeEthernet = 1;  // LINKTYPE_ETHERNET (tcpdump.org link-layer header types)
static_assert(PcapWriter::kMaxRecordPacketBytes + erf::kHeaderBytes <= kSnapLen);
}  // namespace

std::unique_ptr<PcapWriter> PcapWriter::open(const std::string& path, std::string& error, PcapLink link) {
  const int link_type = link == PcapLink::kEthernet ? kLinkTypeEthernet : erf::kLinkTypeErf;
  pcap_t* handle = pcap_open_dead_with_tstamp_precision(link_type, kSnapLen, PCAP_TSTAMP_PRECISION_NANO);
  if (handle == nullptr) {
    error = "pcap_open_dead failed";
    return nullptr;
  }
  pcap_dumper_t* dumper = pcap_dump_open(handle, path.c_str());
  if (dumper == nullptr) {
    error = pcap_geterr(handle);
    pcap_close(handle);
    return nullptr;
  }
  return std::unique_ptr<PcapWriter>(new PcapWriter(handle, dumper, link));
}

PcapWriter::PcapWriter(pcap* handle, pcap_dumper* dumper, PcapLink link)
    : handle_(handle), dumper_(dumper), link_(link), record_(erf::kHeaderBytes + kMaxRecordPacketBytes) {}

PcapWriter::~PcapWriter() {
  pcap_dump_close(dumper_);  // flushes
  pcap_close(handle_);
}

void PcapWriter::write(std::span<const uint8_t> packet, Nanoseconds time, uint8_t interface) {
  if (link_ == PcapLink::kEthernet) return write_ethernet(packet, time);
  const size_t kept = std::min(packet.size(), kMaxRecordPacketBytes);
  erf::Header h;
  h.ts = erf::timestamp(time);
  h.type = erf::kTypeInfiniband;
  h.flags = static_cast<uint8_t>(erf::kFlagVaryingLength | (interface & erf::kFlagInterfaceMask) |
                                 (kept < packet.size() ? erf::kFlagTruncated : 0));
  h.rlen = static_cast<uint16_t>(erf::kHeaderBytes + kept);
  h.wlen = static_cast<uint16_t>(std::min<size_t>(packet.size(), 0xffff));
  const auto header = erf::encode(h);
  std::memcpy(record_.data(), header.data(), header.size());
  if (kept > 0) std::memcpy(record_.data() + erf::kHeaderBytes, packet.data(), kept);

  dump(record_.data(), erf::kHeaderBytes + kept, time);
}

void PcapWriter::write_ethernet(std::span<const uint8_t> ipv4_packet, Nanoseconds time) {
  const size_t kept = std::min(ipv4_packet.size(), kMaxRecordPacketBytes - kEthernetHeaderBytes);
  MacAddress src{};
  MacAddress dst{};
  if (ipv4_packet.size() >= kIpv4HeaderBytes) {
    auto be32 = [&](size_t at) {
      return (uint32_t{ipv4_packet[at]} << 24) | (uint32_t{ipv4_packet[at + 1]} << 16) |
             (uint32_t{ipv4_packet[at + 2]} << 8) | ipv4_packet[at + 3];
    };
    src = mac_for_ipv4(be32(12));  // RFC 791: source address at 12, destination at 16
    dst = mac_for_ipv4(be32(16));
  }
  const size_t n = wrap_ethernet(dst, src, ipv4_packet.first(kept), record_);
  dump(record_.data(), n, time);
}

void PcapWriter::dump(const uint8_t* bytes, size_t len, Nanoseconds time) {
  pcap_pkthdr ph{};
  const int64_t ns = time.count() < 0 ? 0 : time.count();
  ph.ts.tv_sec = static_cast<time_t>(ns / erf::kNanosPerSecond);
  ph.ts.tv_usec = static_cast<suseconds_t>(ns % erf::kNanosPerSecond);  // nanoseconds: NANO precision
  ph.caplen = static_cast<bpf_u_int32>(len);
  ph.len = ph.caplen;
  pcap_dump(reinterpret_cast<u_char*>(dumper_), &ph, bytes);
  ++records_;
}

bool PcapWriter::flush() { return pcap_dump_flush(dumper_) == 0; }

}  // namespace softhca::fabric
