// What a faulty link does to packets (docs/reliability.md): the probabilities of loss, duplication,
// reordering and corruption per packet, a fixed extra delay, and the seed that makes it all
// repeatable. Written as SOFTHCA_FAULTS / `softhca run --faults` spell it:
//   loss=0.01,dup=0.005,reorder=0.01,corrupt=0.001,delay=50us,seed=7
// Probabilities are fractions in [0, 1] ("1%" is 0.01 too); delay takes ns, us, ms or s.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "base/units.h"

namespace softhca::fabric {

struct FaultSpec {
  double loss = 0;         // the packet never arrives
  double dup = 0;          // it arrives twice, back to back
  double reorder = 0;      // it arrives after the packet sent behind it
  double corrupt = 0;      // one byte the ICRC covers is flipped: the receiver must drop it
  Picoseconds delay{0};    // every packet arrives this much later (order kept)
  uint64_t seed = 1;

  // True when the link does anything at all to packets.
  [[nodiscard]] bool any() const { return loss > 0 || dup > 0 || reorder > 0 || corrupt > 0 || delay.count() > 0; }
  bool operator==(const FaultSpec&) const = default;
};

// Parses the comma-separated key=value list above (empty: no faults). False with `error` naming
// the bad item on an unknown key, a probability outside [0, 1], a bad duration or seed.
bool parse_fault_spec(std::string_view text, FaultSpec& out, std::string& error);

// The spec in the same syntax, every key present (delay in whole nanoseconds).
std::string to_string(const FaultSpec& spec);

}  // namespace softhca::fabric
