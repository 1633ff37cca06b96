// The two kinds of resource the timing model places work on, in virtual time (picoseconds):
//  - Server: serializes work, first come first served in the order requests are made (the model
//    makes them in time order): CPU threads, PCIe link directions, HCA units, IB ports.
//  - Pool: a budget of units taken before work starts and given back later at a known time:
//    PCIe flow-control credits (header and data), DMA read tags, a QP's WQEs in flight.
// Neither knows about events; timing_model.h drives them.
#pragma once
#include <cstdint>
#include <limits>

#include "base/units.h"
#include "sim/ring_queue.h"

namespace softhca::sim {

class Server {
 public:
  // Occupies the server for `service` from the earliest time >= ready it is free; returns the start.
  Picoseconds reserve(Picoseconds ready, Picoseconds service) {
    const Picoseconds start = ready > free_at_ ? ready : free_at_;
    free_at_ = start + service;
    busy_ += service;
    queued_ += start - ready;
    ++operations_;
    return start;
  }
  [[nodiscard]] Picoseconds free_at() const { return free_at_; }
  [[nodiscard]] Picoseconds busy() const { return busy_; }
  [[nodiscard]] uint64_t operations() const { return operations_; }
  // Time work waited for the server, summed over its operations (from ready to start), and time
  // waited in a queue in front of it that reserve() did not see (an output port's queue).
  [[nodiscard]] Picoseconds queued() const { return queued_; }
  void add_queued(Picoseconds d) { queued_ += d; }
  void add_bytes(uint64_t n) { bytes_ += n; }
  [[nodiscard]] uint64_t bytes() const { return bytes_; }

 private:
  Picoseconds free_at_{0};
  Picoseconds busy_{0};
  Picoseconds queued_{0};
  uint64_t operations_ = 0;
  uint64_t bytes_ = 0;
};

// Units come back at known future times (`give_back`), in any order of registration. Takers are
// served in order: a request that cannot be met waits, and later requests wait behind it.
class Pool {
 public:
  static constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

  // `data` is a second budget taken together with the first (PCIe data credits next to header
  // credits); kUnlimited for none.
  explicit Pool(uint64_t units = kUnlimited, uint64_t data = kUnlimited)
      : units_(units), data_(data), unlimited_(units == kUnlimited && data == kUnlimited) {}

  [[nodiscard]] bool unlimited() const { return unlimited_; }

  // Takes (units, data) at `now` if available (after absorbing returns due by now): true.
  // Inline: the timing model calls it for most TLPs and WQEs.
  bool try_take(Picoseconds now, uint64_t units, uint64_t data) {
    if (unlimited_) return true;
    absorb(now);
    if (units_ < units || data_ < data) return false;
    if (units_ != kUnlimited) units_ -= units;
    if (data_ != kUnlimited) data_ -= data;
    return true;
  }
  // The earliest time >= now at which (units, data) will be available counting the returns known
  // so far, or nothing if they do not suffice yet. Inline: the timing model asks it each time a
  // request reaches the head of the line, and usually the first return or two answer.
  [[nodiscard]] bool earliest(Picoseconds now, uint64_t units, uint64_t data, Picoseconds& at) const {
    uint64_t u = units_;
    uint64_t d = data_;
    Picoseconds t = now;
    for (size_t i = 0; i < returns_.size(); ++i) {
      if (u >= units && d >= data) break;
      const Return& r = returns_[i];
      u = add(u, r.units);
      d = add(d, r.data);
      if (r.at > t) t = r.at;
    }
    if (u < units || d < data) return false;
    at = t;
    return true;
  }
  // Registers units and data coming back at `at`.
  void give_back(Picoseconds at, uint64_t units, uint64_t data) {
    if (unlimited_) return;
    // Almost always the latest return so far: append; otherwise insert in order.
    if (returns_.empty() || !(returns_.back().at > at)) {
      returns_.push_back(Return{at, units, data});
    } else {
      insert_return(Return{at, units, data});
    }
  }
  [[nodiscard]] uint64_t available_units() const { return units_; }

 private:
  struct Return {
    Picoseconds at;
    uint64_t units;
    uint64_t data;
  };
  void absorb(Picoseconds now) {
    while (!returns_.empty() && returns_.front().at <= now) {
      units_ = add(units_, returns_.front().units);
      data_ = add(data_, returns_.front().data);
      returns_.pop_front();
    }
  }
  void insert_return(const Return& r);
  // a + b, unlimited (kUnlimited) if either is: saturating, so one add and its carry, not two tests
  // (two finite budgets never add up to 2^64).
  static uint64_t add(uint64_t a, uint64_t b) {
    uint64_t sum = 0;
    return __builtin_add_overflow(a, b, &sum) ? kUnlimited : sum;
  }

  uint64_t units_;
  uint64_t data_;
  bool unlimited_;
  RingQueue<Return> returns_;  // sorted by `at`
};

}  // namespace softhca::sim
