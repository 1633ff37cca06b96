// Packet-level counters of one device: what it sent, received, dropped (by reason) and retried.
// Updated under the device lock; copied out by the runtime. Lives in the device region: plain
// counters only.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace softhca::hca {

enum class DropReason : uint8_t {
  kMalformed,     // failed to parse: truncated, bad CRC, bad opcode, bad length
  kWrongLid,      // DLID is not ours
  kUnknownQp,     // no such QP, or the QP cannot receive in its state
  kWrongTransport,// opcode of another transport than the QP's
  kBadPkey,
  kBadQkey,
  kNoReceiveWqe,  // UD/UC: nothing posted
  kPsnOutOfWindow,// UC gap, stale responses
  kBadSource,     // RC/UC: not from where the QP is connected (SLID, SGID; IBA 9.6.1.5)
  kNoMadAgent,    // to QP1: not a CM MAD, or no MAD agent of the host takes its service or id
  kNoMcastGroup,  // to a multicast address no QP of the host is attached to
  kPortDown,      // sent or arrived while the port was set down (hwif::SetPortStateIn)
  kCount,
};
std::string_view to_string(DropReason r);

// alignas(64): the region keeps banks of them, one per group of processes (DeviceState), each on
// lines of its own; those counted on every message come first, within one cache line.
struct alignas(64) DeviceStats {
  uint64_t packets_sent = 0;
  uint64_t packets_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t acks_sent = 0;
  uint64_t cqes_written = 0;
  uint64_t express_writes = 0;  // looped-back WRITEs carried out at once (transport/express.cc)
  uint64_t express_sends = 0;   // looped-back SENDs placed at once into a receive WQE (the same)
  uint64_t naks_sent = 0;
  uint64_t rnr_naks_sent = 0;
  uint64_t retransmitted_packets = 0;
  uint64_t timeouts = 0;
  uint64_t duplicates = 0;
  uint64_t cq_overruns = 0;
  uint64_t dma_faults = 0;  // DMA addresses the host bridge could not resolve
  std::array<uint64_t, static_cast<size_t>(DropReason::kCount)> dropped{};
  void drop(DropReason r) { ++dropped[static_cast<size_t>(r)]; }
  DeviceStats& operator+=(const DeviceStats& o);
  [[nodiscard]] uint64_t total_dropped() const {
    uint64_t n = 0;
    for (uint64_t d : dropped) n += d;
    return n;
  }
};

}  // namespace softhca::hca
