#include "runtime/shared_kernel.h"

namespace softhca::runtime {

std::span<uint8_t> SharedBridge::map(uint64_t dma_addr, size_t len) {
  if (pcie::dma_slot(dma_addr) == 0) {
    ++refused_;  // a bare pointer: meaningless in whichever process runs the device now
    return {};
  }
  return peers_.map(dma_addr, len);
}

}  // namespace softhca::runtime
