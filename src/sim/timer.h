// A re-armable one-shot timer on a Scheduler (retransmission, RNR, ACK coalescing timers).
// Arming replaces any earlier deadline; the destructor cancels. Virtual time in picoseconds.
// Not copyable or movable: the scheduled event refers to this object.
#pragma once
#include <functional>
#include <optional>

#include "base/units.h"
#include "sim/scheduler.h"

namespace softhca::sim {

class Timer {
 public:
  // on_expire runs as a scheduler event; it may re-arm the timer.
  Timer(Scheduler& scheduler, std::function<void()> on_expire);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  void arm_at(Picoseconds deadline);
  void arm_after(Picoseconds delay);
  // Returns false if the timer was not armed.
  bool cancel();
  [[nodiscard]] bool armed() const { return scheduler_.is_pending(event_); }
  // The pending deadline, if armed.
  [[nodiscard]] std::optional<Picoseconds> deadline() const;

 private:
  void fire();

  Scheduler& scheduler_;
  std::function<void()> on_expire_;
  EventHandle event_;
  Picoseconds deadline_{0};
};

}  // namespace softhca::sim
