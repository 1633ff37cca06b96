#include "fabric/carrier_gate.h"

#include <utility>

#include "base/endian.h"
#include "fabric/packet/headers.h"

namespace softhca::fabric {

namespace {
// The LRH's SLID (IBA 7.7); 0, no host's LID, for less than an LRH (the carrier hands on no
// datagram shorter than an LRH, BTH, ICRC and VCRC).
uint16_t lrh_slid(std::span<const uint8_t> packet) {
  return packet.size() < sizeof(Lrh) ? 0 : load_as<Lrh>(packet.data()).slid.get();
}
}  // namespace

CarrierGate::CarrierGate(CarrierMode mode, uint16_t roce_port, Lookup lookup)
    : mode_(mode), roce_port_(roce_port), lookup_(std::move(lookup)) {}

std::optional<Ipv4Endpoint> CarrierGate::endpoint_of(uint16_t slid) {
  const uint64_t epoch = epoch_.load(std::memory_order_relaxed);
  if (epoch != seen_epoch_) {
    endpoints_.clear();
    seen_epoch_ = epoch;
  }
  auto it = endpoints_.find(slid);
  if (it == endpoints_.end()) it = endpoints_.emplace(slid, lookup_ ? lookup_(slid) : std::nullopt).first;
  return it->second;
}

bool CarrierGate::admits(const Datagram& d) {
  bool ok = false;
  if (mode_ == CarrierMode::kRoceV2) {
    ok = d.source.port == roce_port_ || d.source.port >= kRoceSrcPortMin;
  } else {
    const std::optional<Ipv4Endpoint> from = endpoint_of(lrh_slid(d.bytes));
    ok = from.has_value() && *from == d.source;
  }
  if (!ok) refused_.fetch_add(1, std::memory_order_relaxed);
  return ok;
}

}  // namespace softhca::fabric
