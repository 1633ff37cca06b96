// The seed of a device about to be formatted in live mode (hca::DeviceConfig::seed): 64 bits from
// the kernel's random source, so that no two devices or runs hand out the same memory keys and
// QPNs (docs/security.md "Keys and QPNs"). Sim mode passes fixed seeds instead (STYLE.md rule 4).
#pragma once
#include <cstdint>

namespace softhca::runtime {

// getrandom(2), or /dev/urandom where it is missing. Throws std::runtime_error when neither gives
// 8 bytes: a device with guessable keys is not made silently.
uint64_t fresh_device_seed();

}  // namespace softhca::runtime
