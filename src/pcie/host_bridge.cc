#include "pcie/host_bridge.h"

#include <sys/socket.h>
#include <unistd.h>

#include <climits>

namespace softhca::pcie {

std::span<uint8_t> IdentityBridge::map(uint64_t dma_addr, size_t len) {
  // Slot 0 only (docs/live-mode.md): a DMA address of another process, or a null pointer, maps
  // to nothing here. The range is contiguous: this process's address space.
  if (dma_addr == 0 || dma_slot(dma_addr) != 0 || len > kDmaAddressMask - dma_addr + 1) return {};
  return {reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(dma_addr)), len};
}

void IdentityBridge::deliver_msi(uint64_t vector) {
  // The in-process host kernel's vectors are sockets to send on; anything else raises nothing.
  if (vector > static_cast<uint64_t>(INT_MAX)) return;
  const char one = 1;
  // EAGAIN: the queue is full, so the vector is already pending and the fd readable.
  [[maybe_unused]] const ssize_t n = ::send(static_cast<int>(vector), &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace softhca::pcie
