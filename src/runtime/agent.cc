#include "runtime/agent.h"

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

void Agent::request_wakeup(Picoseconds at) {
  {
    std::lock_guard<std::mutex> g(mu_);
    wakeups_.push(at);
  }
  cv_.notify_all();
}

void Agent::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    if (wakeups_.empty()) {
      cv_.wait(lk);
      continue;
    }
    const Picoseconds next = wakeups_.top();
    const Picoseconds t = now();
    if (next > t) {
      cv_.wait_for(lk, std::chrono::duration_cast<std::chrono::nanoseconds>(next - t));
      continue;
    }
    while (!wakeups_.empty() && wakeups_.top() <= t) wakeups_.pop();
    lk.unlock();
    run_timers_(t);
    lk.lock();
  }
}

}  // namespace softhca::runtime
