// Device memory (ibv_alloc_dm(3)) as the device keeps it: a window of its own memory in the device
// region (max_dm_size bytes, whole 4 KiB pages, shared by every process of the host), which pages
// are in use, and per allocation its pages, its length and the memory keys that lie in it. Plain
// bytes in the region, as every other table. The device reaches the window at
// pcie::kDeviceMemoryDma with no PCIe traffic; the CPU through the BAR (hwif::kDeviceMemoryBarOffset).
#pragma once
#include <cstdint>
#include <type_traits>

#include "hca/object_table.h"

namespace softhca::hca {

// Pages of the window: one bit each in a 64-bit map (a 256 KiB window at most).
inline constexpr uint32_t kMaxDmPages = 64;

struct DeviceMemoryState {
  uint64_t window = 0;      // region offset of the window's first byte (page aligned)
  uint64_t bytes = 0;       // its size: caps.max_dm_size
  uint64_t used_pages = 0;  // bit p: page p is allocated
  TableState table;         // allocations (DeviceMemory), kMaxDmPages of them at most
};

struct DeviceMemory {
  uint32_t first_page = 0;
  uint32_t pages = 0;
  uint64_t length = 0;  // as asked for (the pages may hold more)
  uint32_t keys = 0;    // memory keys registered in it (FreeDm is EBUSY while any)
};
static_assert(std::is_trivially_copyable_v<DeviceMemoryState> && std::is_trivially_copyable_v<DeviceMemory>);

// The first page of `n` free pages in a row, starting at a multiple of `align` pages, among the
// `total` pages of `used` (bit p set: page p taken); -1 when no such run exists.
[[nodiscard]] constexpr int find_free_pages(uint64_t used, uint32_t total, uint32_t n, uint32_t align) {
  if (n == 0 || n > total || align == 0) return -1;
  const uint64_t run = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  for (uint32_t first = 0; first + n <= total; first += align) {
    if ((used & (run << first)) == 0) return static_cast<int>(first);
  }
  return -1;
}
[[nodiscard]] constexpr uint64_t page_run(uint32_t first, uint32_t n) {
  return (n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1) << first;
}

}  // namespace softhca::hca
