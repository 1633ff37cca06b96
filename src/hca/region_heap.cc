#include "hca/region_heap.h"

#include <bit>
#include <cstring>

namespace softhca::hca {

namespace {
constexpr uint64_t kBlockAlign = uint64_t{1} << kHeapMinLog;
}  // namespace

void RegionHeap::format(HeapState& st, uint64_t begin, uint64_t end) {
  st = HeapState{};
  st.begin = (begin + kBlockAlign - 1) & ~(kBlockAlign - 1);
  st.end = end < st.begin ? st.begin : end;
  st.bump = st.begin;
}

unsigned RegionHeap::size_class(uint64_t bytes) {
  if (bytes <= kBlockAlign) return kHeapMinLog;
  return static_cast<unsigned>(std::bit_width(bytes - 1));
}

uint64_t RegionHeap::allocate(uint64_t bytes) {
  const unsigned c = size_class(bytes);
  if (c > kHeapMaxLog) return kHeapNone;
  const uint64_t block_bytes = uint64_t{1} << c;
  uint64_t off = st_.free_head[c];
  if (off != kHeapNone) {
    // A free block keeps the next free block's offset in its first 8 bytes.
    std::memcpy(&st_.free_head[c], base_ + off, sizeof(uint64_t));
  } else {
    if (st_.end - st_.bump < block_bytes) return kHeapNone;
    off = st_.bump;
    st_.bump += block_bytes;
  }
  st_.bytes_in_use += block_bytes;
  return off;
}

void RegionHeap::release(uint64_t offset, uint64_t bytes) {
  if (offset == kHeapNone) return;
  const unsigned c = size_class(bytes);
  std::memcpy(base_ + offset, &st_.free_head[c], sizeof(uint64_t));
  st_.free_head[c] = offset;
  st_.bytes_in_use -= uint64_t{1} << c;
}

}  // namespace softhca::hca
