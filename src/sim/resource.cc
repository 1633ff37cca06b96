#include "sim/resource.h"

namespace softhca::sim {

void Pool::absorb(Picoseconds now) {
  while (!returns_.empty() && returns_.front().at <= now) {
    units_ = add(units_, returns_.front().units);
    data_ = add(data_, returns_.front().data);
    returns_.pop_front();
  }
}

bool Pool::try_take(Picoseconds now, uint64_t units, uint64_t data) {
  if (unlimited_) return true;
  absorb(now);
  if (units_ < units || data_ < data) return false;
  if (units_ != kUnlimited) units_ -= units;
  if (data_ != kUnlimited) data_ -= data;
  return true;
}

bool Pool::earliest(Picoseconds now, uint64_t units, uint64_t data, Picoseconds& at) const {
  uint64_t u = units_;
  uint64_t d = data_;
  Picoseconds t = now;
  for (const Return& r : returns_) {
    if (u >= units && d >= data) break;
    u = add(u, r.units);
    d = add(d, r.data);
    if (r.at > t) t = r.at;
  }
  if (u < units || d < data) return false;
  at = t;
  return true;
}

void Pool::give_back(Picoseconds at, uint64_t units, uint64_t data) {
  if (unlimited_) return;
  // Almost always the latest return so far: append; otherwise insert in order.
  auto it = returns_.end();
  while (it != returns_.begin() && std::prev(it)->at > at) --it;
  returns_.insert(it, Return{at, units, data});
}

}  // namespace softhca::sim
