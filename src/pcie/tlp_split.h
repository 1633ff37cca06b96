// How DMA transfers become TLPs (P6): writes are cut into MWr of at most MPS bytes at MPS-aligned
// boundaries; reads into MRd of at most MRRS bytes at MRRS-aligned boundaries, each answered by
// CplDs cut at completion_bytes-aligned boundaries. Alignment cuts also keep every TLP inside a
// 4 KiB page, as the PCIe base spec requires (MPS, MRRS and completion sizes divide 4096).
#pragma once
#include <cstdint>

#include "pcie/pcie_config.h"

namespace softhca::pcie {

// Calls f(chunk_addr, chunk_len) for each piece of [addr, addr+len) cut at multiples of `unit`.
template <class F>
void for_each_aligned_chunk(uint64_t addr, uint64_t len, uint64_t unit, F&& f) {
  while (len > 0) {
    uint64_t room = unit - (addr % unit);
    uint64_t n = room < len ? room : len;
    f(addr, n);
    addr += n;
    len -= n;
  }
}

inline uint64_t count_aligned_chunks(uint64_t addr, uint64_t len, uint64_t unit) {
  uint64_t n = 0;
  for_each_aligned_chunk(addr, len, unit, [&](uint64_t, uint64_t) { ++n; });
  return n;
}

}  // namespace softhca::pcie
