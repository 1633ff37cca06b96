#include "runtime/shared_kernel.h"

#include <algorithm>
#include <vector>

namespace softhca::runtime {

namespace {
// The interrupts this thread raised in the device entry it is in (depth > 0), each vector once.
thread_local int t_hold_depth = 0;
thread_local std::vector<uint64_t> t_held;
}  // namespace

std::span<uint8_t> SharedBridge::map(uint64_t dma_addr, size_t len) {
  if (pcie::dma_slot(dma_addr) == 0) {
    ++refused_;  // a bare pointer: meaningless in whichever process runs the device now
    return {};
  }
  return peers_.map(dma_addr, len);
}

void SharedBridge::deliver_msi(uint64_t vector) {
  if (t_hold_depth == 0) {
    irq_.deliver(vector);
    return;
  }
  // A vector raised twice in one entry is one pending firing, as on an MSI-X vector.
  if (std::find(t_held.begin(), t_held.end(), vector) == t_held.end()) t_held.push_back(vector);
}

void SharedBridge::hold_interrupts() { ++t_hold_depth; }

void SharedBridge::release_interrupts() {
  if (t_hold_depth == 0 || --t_hold_depth > 0) return;
  for (const uint64_t v : t_held) irq_.deliver(v);
  t_held.clear();
}

}  // namespace softhca::runtime
