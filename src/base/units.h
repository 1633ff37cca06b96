// Units: integer picoseconds for time (sim and live), plain uint64 byte counts named *_bytes.
#pragma once
#include <chrono>
#include <cstdint>

namespace softhca {

using Picoseconds = std::chrono::duration<int64_t, std::pico>;
using Nanoseconds = std::chrono::duration<int64_t, std::nano>;
using std::chrono::duration_cast;

constexpr Picoseconds operator""_ps(unsigned long long v) { return Picoseconds(static_cast<int64_t>(v)); }
constexpr Picoseconds operator""_ns(unsigned long long v) { return Picoseconds(static_cast<int64_t>(v) * 1000); }
constexpr Picoseconds operator""_us(unsigned long long v) { return Picoseconds(static_cast<int64_t>(v) * 1000000); }

constexpr uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
constexpr uint64_t align_up(uint64_t a, uint64_t b) { return ceil_div(a, b) * b; }
// std::has_single_bit() without POPCNT: the x86-64 baseline Debian builds for has none, and the
// libgcc call that stands in for it costs tens of instructions on the data path.
constexpr bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace softhca
