#include "runtime/shared_kernel.h"

#include <algorithm>
#include <array>

namespace softhca::runtime {

namespace {
// The interrupts this thread raised in the device entry it is in (depth > 0), each vector once.
// Trivially destructible: exit handlers (the runtime's detach) enter the device after the thread's
// thread_local destructors have run. More vectors than fit go out at once.
constexpr size_t kHeldMax = 64;
thread_local int t_hold_depth = 0;
thread_local size_t t_held_count = 0;
thread_local std::array<uint64_t, kHeldMax> t_held;
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
  const auto held = std::span(t_held).first(t_held_count);
  if (std::find(held.begin(), held.end(), vector) != held.end()) return;
  if (t_held_count == kHeldMax) {
    irq_.deliver(vector);
    return;
  }
  t_held[t_held_count++] = vector;
}

void SharedBridge::hold_interrupts() { ++t_hold_depth; }

void SharedBridge::release_interrupts() {
  if (t_hold_depth == 0 || --t_hold_depth > 0) return;
  for (const uint64_t v : std::span(t_held).first(t_held_count)) irq_.deliver(v);
  t_held_count = 0;
}

}  // namespace softhca::runtime
