// The time stamped on tap events (packet captures, traces): a clock that starts at 0 when the
// capture starts, plus the Unix time that 0 stands for (pcap files carry absolute time).
// Live mode uses SteadyTapClock: wall time from std::chrono::steady_clock, so timestamps never go
// backwards. Sim mode passes its scheduler's virtual time instead (and 0 as the Unix start), which
// is the seam the timing model plugs into. Units: picoseconds since the start; nanoseconds since the
// Unix epoch.
#pragma once
#include <chrono>

#include "base/units.h"

namespace softhca::runtime {

class TapClock {
 public:
  virtual ~TapClock() = default;
  // Time since the capture started; never decreases. May be called from any thread.
  virtual Picoseconds now() = 0;
  // The Unix time (since 1970-01-01T00:00:00Z) that now() == 0 stands for.
  [[nodiscard]] virtual Nanoseconds unix_time_at_start() const = 0;
};

// Live mode: wall time. Besides the agent (agent.h), the only place the runtime reads a clock, and
// only when a capture or trace was asked for.
class SteadyTapClock final : public TapClock {
 public:
  SteadyTapClock()
      : start_(std::chrono::steady_clock::now()),
        unix_start_(duration_cast<Nanoseconds>(std::chrono::system_clock::now().time_since_epoch())) {}
  Picoseconds now() override { return duration_cast<Picoseconds>(std::chrono::steady_clock::now() - start_); }
  [[nodiscard]] Nanoseconds unix_time_at_start() const override { return unix_start_; }

 private:
  std::chrono::steady_clock::time_point start_;
  Nanoseconds unix_start_;
};

}  // namespace softhca::runtime
