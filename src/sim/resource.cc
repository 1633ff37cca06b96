#include "sim/resource.h"

namespace softhca::sim {

bool Pool::earliest(Picoseconds now, uint64_t units, uint64_t data, Picoseconds& at) const {
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

void Pool::insert_return(const Return& r) {
  size_t i = returns_.size();
  while (i > 0 && returns_[i - 1].at > r.at) --i;
  returns_.insert(i, r);
}

}  // namespace softhca::sim
