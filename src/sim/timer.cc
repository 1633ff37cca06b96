#include "sim/timer.h"

#include <stdexcept>
#include <utility>

namespace softhca::sim {

Timer::Timer(Scheduler& scheduler, std::function<void()> on_expire)
    : scheduler_(scheduler), on_expire_(std::move(on_expire)) {
  if (!on_expire_) throw std::invalid_argument("sim::Timer: empty expiry callback");
}

Timer::~Timer() { cancel(); }

void Timer::arm_at(Picoseconds deadline) {
  cancel();
  event_ = scheduler_.schedule_at(deadline, [this] { fire(); });
  deadline_ = deadline;
}

void Timer::arm_after(Picoseconds delay) {
  if (delay < Picoseconds::zero()) throw std::invalid_argument("sim::Timer: negative delay");
  arm_at(scheduler_.now() + delay);
}

bool Timer::cancel() {
  bool was_armed = scheduler_.cancel(event_);
  event_ = EventHandle();
  return was_armed;
}

std::optional<Picoseconds> Timer::deadline() const {
  if (!armed()) return std::nullopt;
  return deadline_;
}

void Timer::fire() {
  event_ = EventHandle();
  on_expire_();
}

}  // namespace softhca::sim
