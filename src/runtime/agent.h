// The background agent of the live runtime: one thread that sleeps until the earliest timer any
// device asked for (retransmission, RNR wait), then runs the devices' timers under the device lock.
// Devices ask again for their later deadlines when their timers run, so one pending wake-up is
// all the agent keeps.
// It is the live implementation of hca::EngineClock: the only place live mode reads the wall clock.
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "hca/device.h"

namespace softhca::runtime {

class Agent final : public hca::EngineClock {
 public:
  // run_timers(now) is called with no agent lock held; it takes the device lock itself.
  explicit Agent(std::function<void(Picoseconds)> run_timers);
  ~Agent() override;
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Stops the thread (idempotent); after it no timer runs. Owners call it before the devices go.
  void stop();

  Picoseconds now() override;
  void request_wakeup(Picoseconds at) override;
  // CLOCK_REALTIME now, less the engine time since t.
  int64_t wall_clock_ns(Picoseconds t) override;

 private:
  void loop();

  std::function<void(Picoseconds)> run_timers_;
  std::mutex mu_;
  std::condition_variable cv_;
  Picoseconds next_ = Picoseconds::max();  // the earliest wake-up asked for
  bool stop_ = false;
  std::chrono::steady_clock::time_point epoch_;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace softhca::runtime
