// Deterministic pseudo-random numbers for the simulation: one stream per component, derived from
// (run seed, component name), so adding a component or drawing more numbers in one does not
// change any other's sequence. Generators are the public-domain splitmix64 and xoshiro256**
// (Blackman and Vigna, https://prng.di.unimi.it/), written from their published definitions.
// Not for cryptography. Portable: no std:: distributions (their output is implementation-defined).
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace softhca::sim {

// splitmix64: advances state and returns the next output (used for seeding).
constexpr uint64_t splitmix64_next(uint64_t& state) {
  state += 0x9e3779b97f4a7c15ULL;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// FNV-1a 64-bit hash of a component name.
constexpr uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// A xoshiro256** stream. Satisfies std::uniform_random_bit_generator.
class RandomStream {
 public:
  using result_type = uint64_t;

  // The four state words are the first four splitmix64 outputs from `seed`.
  explicit RandomStream(uint64_t seed);
  // The stream of one component: splitmix64(seed) mixed with fnv1a64(component) seeds it.
  static RandomStream for_component(uint64_t seed, std::string_view component);
  // A stream with an explicit state (test vectors); the state must not be all zero.
  static RandomStream from_state(const std::array<uint64_t, 4>& state);

  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~uint64_t{0}; }
  result_type operator()() { return next(); }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n) without modulo bias; n must be > 0.
  uint64_t below(uint64_t n);
  // Uniform in [lo, hi], inclusive; lo <= hi.
  uint64_t between(uint64_t lo, uint64_t hi);
  // Uniform in [0, 1) with 53 bits of precision.
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // True with probability p (p <= 0 never, p >= 1 always).
  bool chance(double p) { return unit() < p; }

 private:
  RandomStream() = default;
  static constexpr uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::array<uint64_t, 4> s_{};
};

}  // namespace softhca::sim
