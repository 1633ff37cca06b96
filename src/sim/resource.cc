#include "sim/resource.h"

namespace softhca::sim {

void Pool::insert_return(const Return& r) {
  size_t i = returns_.size();
  while (i > 0 && returns_[i - 1].at > r.at) --i;
  returns_.insert(i, r);
}

}  // namespace softhca::sim
