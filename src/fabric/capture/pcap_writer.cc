#include "fabric/capture/pcap_writer.h"

#include <pcap/pcap.h>

#include <algorithm>
#include <cstring>

#include "fabric/capture/erf.h"

namespace softhca::fabric {

namespace {
// The snapshot length the file header announces: every record fits whole.
constexpr int kSnapLen = 65535;
static_assert(PcapWriter::kMaxRecordPacketBytes + erf::kHeaderBytes <= kSnapLen);
}  // namespace

std::unique_ptr<PcapWriter> PcapWriter::open(const std::string& path, std::string& error) {
  pcap_t* handle = pcap_open_dead_with_tstamp_precision(erf::kLinkTypeErf, kSnapLen, PCAP_TSTAMP_PRECISION_NANO);
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
  return std::unique_ptr<PcapWriter>(new PcapWriter(handle, dumper));
}

PcapWriter::PcapWriter(pcap* handle, pcap_dumper* dumper)
    : handle_(handle), dumper_(dumper), record_(erf::kHeaderBytes + kMaxRecordPacketBytes) {}

PcapWriter::~PcapWriter() {
  pcap_dump_close(dumper_);  // flushes
  pcap_close(handle_);
}

void PcapWriter::write(std::span<const uint8_t> packet, Nanoseconds time, uint8_t interface) {
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

  pcap_pkthdr ph{};
  const int64_t ns = time.count() < 0 ? 0 : time.count();
  ph.ts.tv_sec = static_cast<time_t>(ns / erf::kNanosPerSecond);
  ph.ts.tv_usec = static_cast<suseconds_t>(ns % erf::kNanosPerSecond);  // nanoseconds: NANO precision
  ph.caplen = static_cast<bpf_u_int32>(erf::kHeaderBytes + kept);
  ph.len = ph.caplen;
  pcap_dump(reinterpret_cast<u_char*>(dumper_), &ph, record_.data());
  ++records_;
}

bool PcapWriter::flush() { return pcap_dump_flush(dumper_) == 0; }

}  // namespace softhca::fabric
