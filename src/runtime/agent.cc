#include "runtime/agent.h"

#include <chrono>

namespace softhca::runtime {

Agent::Agent(std::function<void(Picoseconds)> run_timers)
    : run_timers_(std::move(run_timers)), epoch_(std::chrono::steady_clock::now()), thread_([this] { loop(); }) {}

Agent::~Agent() { stop(); }

void Agent::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Picoseconds Agent::now() {
  return std::chrono::duration_cast<Picoseconds>(std::chrono::steady_clock::now() - epoch_);
}

int64_t Agent::wall_clock_ns(Picoseconds t) {
  const int64_t wall_now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return wall_now - (now() - t).count() / 1000;
}

void Agent::request_wakeup(Picoseconds at) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (at >= next_) return;
    next_ = at;
  }
  cv_.notify_all();
}

void Agent::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    if (next_ == Picoseconds::max()) {
      cv_.wait(lk);
      continue;
    }
    const Picoseconds t = now();
    if (next_ > t) {
      cv_.wait_for(lk, std::chrono::duration_cast<std::chrono::nanoseconds>(next_ - t));
      continue;
    }
    next_ = Picoseconds::max();
    lk.unlock();
    run_timers_(t);
    lk.lock();
  }
}

}  // namespace softhca::runtime
