#include "fabric/fault_spec.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace softhca::fabric {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A probability: "0.01" or "1%". std::from_chars for double is in GCC 12's libstdc++.
bool parse_probability(std::string_view v, double& out) {
  bool percent = false;
  if (!v.empty() && v.back() == '%') {
    percent = true;
    v.remove_suffix(1);
  }
  double x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc{} || end != v.data() + v.size() || v.empty()) return false;
  if (percent) x /= 100;
  if (!(x >= 0 && x <= 1)) return false;
  out = x;
  return true;
}

// A duration: an integer with a unit ns, us, ms or s ("0" alone is allowed).
bool parse_duration(std::string_view v, Picoseconds& out) {
  struct Unit {
    std::string_view suffix;
    int64_t ps;
  };
  static constexpr Unit kUnits[] = {{"ns", 1'000}, {"us", 1'000'000}, {"ms", 1'000'000'000}, {"s", 1'000'000'000'000}};
  int64_t scale = 0;
  for (const Unit& u : kUnits) {
    if (v.size() > u.suffix.size() && v.substr(v.size() - u.suffix.size()) == u.suffix) {
      // "ms" ends with "s" too: the longer suffixes come first in kUnits.
      scale = u.ps;
      v.remove_suffix(u.suffix.size());
      break;
    }
  }
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc{} || end != v.data() + v.size() || v.empty()) return false;
  if (scale == 0 && n != 0) return false;  // a bare number other than 0 has no unit
  // At most an hour: anything longer is a typo, and keeps the product far from overflow.
  if (scale != 0 && n > static_cast<uint64_t>(3'600'000'000'000'000 / scale)) return false;
  out = Picoseconds(static_cast<int64_t>(n) * scale);
  return true;
}

}  // namespace

bool parse_fault_spec(std::string_view text, FaultSpec& out, std::string& error) {
  FaultSpec spec;
  text = trim(text);
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string_view key = trim(item.substr(0, eq));
    const std::string_view value = eq == std::string_view::npos ? std::string_view{} : trim(item.substr(eq + 1));
    bool ok = eq != std::string_view::npos;
    if (!ok) {
    } else if (key == "loss") {
      ok = parse_probability(value, spec.loss);
    } else if (key == "dup") {
      ok = parse_probability(value, spec.dup);
    } else if (key == "reorder") {
      ok = parse_probability(value, spec.reorder);
    } else if (key == "corrupt") {
      ok = parse_probability(value, spec.corrupt);
    } else if (key == "delay") {
      ok = parse_duration(value, spec.delay);
    } else if (key == "seed") {
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), spec.seed);
      ok = ec == std::errc{} && end == value.data() + value.size() && !value.empty();
    } else {
      error = std::string("unknown fault \"") + std::string(key) + "\" (expected loss, dup, reorder, corrupt, delay, seed)";
      return false;
    }
    if (!ok) {
      error = std::string("bad fault item \"") + std::string(item) +
              "\" (probabilities 0..1 or N%, delay N{ns,us,ms,s}, seed an unsigned integer)";
      return false;
    }
  }
  out = spec;
  return true;
}

std::string to_string(const FaultSpec& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "loss=%.17g,dup=%.17g,reorder=%.17g,corrupt=%.17g,delay=%lldns,seed=%llu", s.loss, s.dup,
                s.reorder, s.corrupt, static_cast<long long>(s.delay.count() / 1000),
                static_cast<unsigned long long>(s.seed));
  return buf;
}

}  // namespace softhca::fabric
