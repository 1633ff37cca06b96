// Which datagrams a host's UDP carrier hands to its device (docs/security.md "Packets"): on the
// InfiniBand link, those sent from the carrier endpoint (IPv4 address and UDP port) that the fabric
// registry names for their LRH SLID; on Ethernet, those sent from the RoCEv2 UDP port or from the
// RoCEv2 entropy range (kRoceSrcPortMin and up: Linux and softhca send each flow from one of those).
// The device checks the rest (Device::from_peer()).
//
// Who may call what: admits() from the carrier's receiving thread only (it owns the cache);
// forget() and refused() from any thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>

#include "fabric/udp_carrier.h"

namespace softhca::fabric {

class CarrierGate {
 public:
  // The carrier endpoint of the fabric's host with this LID, or nothing (no such host).
  using Lookup = std::function<std::optional<Ipv4Endpoint>(uint16_t lid)>;

  // kNativeIb: `lookup` names each SLID's endpoint. kRoceV2: datagrams must come from `roce_port` or
  // a port of the entropy range.
  CarrierGate(CarrierMode mode, uint16_t roce_port, Lookup lookup);
  CarrierGate(const CarrierGate&) = delete;
  CarrierGate& operator=(const CarrierGate&) = delete;

  // Whether `d` comes from a host of the fabric; a datagram refused is counted. An SLID's endpoint
  // is looked up once and kept (an unknown SLID too: a flood of them costs no lookups) until
  // forget().
  bool admits(const Datagram& d);
  // Looks every SLID up again from the next datagram on (a host may have restarted elsewhere, or a
  // new one joined): the runtime calls it every liveness sweep.
  void forget() { epoch_.fetch_add(1, std::memory_order_relaxed); }
  // Datagrams refused since construction.
  [[nodiscard]] uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  [[nodiscard]] std::optional<Ipv4Endpoint> endpoint_of(uint16_t slid);

  CarrierMode mode_;
  uint16_t roce_port_;
  Lookup lookup_;
  // Receiving thread only: SLID -> endpoint (nullopt: no host with that LID), valid for seen_epoch_.
  std::unordered_map<uint16_t, std::optional<Ipv4Endpoint>> endpoints_;
  uint64_t seen_epoch_ = 0;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint64_t> refused_{0};
};

}  // namespace softhca::fabric
