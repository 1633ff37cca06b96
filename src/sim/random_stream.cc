#include "sim/random_stream.h"

#include <stdexcept>

namespace softhca::sim {

RandomStream::RandomStream(uint64_t seed) {
  uint64_t sm = seed;
  for (auto& w : s_) w = splitmix64_next(sm);
}

RandomStream RandomStream::for_component(uint64_t seed, std::string_view component) {
  uint64_t sm = seed;
  // One splitmix64 step first, so (seed, name) pairs related by XOR do not share a stream.
  return RandomStream(splitmix64_next(sm) ^ fnv1a64(component));
}

RandomStream RandomStream::from_state(const std::array<uint64_t, 4>& state) {
  if (state[0] == 0 && state[1] == 0 && state[2] == 0 && state[3] == 0) {
    throw std::invalid_argument("sim::RandomStream: all-zero xoshiro256** state");
  }
  RandomStream r;
  r.s_ = state;
  return r;
}

uint64_t RandomStream::below(uint64_t n) {
  if (n == 0) throw std::invalid_argument("sim::RandomStream::below(0)");
  // Lemire's multiply-and-reject (ACM TOMACS 2019): the high word of x * n is uniform in [0, n)
  // once the low words that would bias it (fewer than 2^64 mod n of them) are rejected.
  __extension__ using Wide = unsigned __int128;
  Wide m = static_cast<Wide>(next()) * n;
  auto low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<Wide>(next()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

uint64_t RandomStream::between(uint64_t lo, uint64_t hi) {
  if (lo > hi) throw std::invalid_argument("sim::RandomStream::between: lo > hi");
  if (lo == 0 && hi == max()) return next();
  return lo + below(hi - lo + 1);
}

}  // namespace softhca::sim
