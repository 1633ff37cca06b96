#include "runtime/range_table.h"

namespace softhca::runtime {

std::optional<RangeSnapshot> RangeTable::read(uint32_t index) const {
  if (index >= kRangeTableCapacity) return std::nullopt;
  const RangeEntry& e = entries[index];
  RangeSnapshot s;
  s.generation = e.generation.load(std::memory_order_acquire);
  if (s.generation == 0 || (s.generation & 1) != 0) return std::nullopt;
  // Seqlock without fences (TSan does not model them): acquire on each field keeps the second
  // generation load after it, and pairs with the owner's release stores of the fields, so a reader
  // that sees a new field value also sees the owner's odd generation.
  s.va = e.va.load(std::memory_order_acquire);
  s.length = e.length.load(std::memory_order_acquire);
  s.offset = e.offset.load(std::memory_order_acquire);
  s.fd = e.fd.load(std::memory_order_acquire);
  if (e.generation.load(std::memory_order_relaxed) != s.generation) return std::nullopt;
  return s;
}

void RangeTable::write(uint32_t index, const RangeSnapshot& range) {
  RangeEntry& e = entries[index];
  const uint64_t g = e.generation.load(std::memory_order_relaxed);
  const uint64_t odd = (g & 1) != 0 ? g : g + 1;
  e.generation.store(odd, std::memory_order_relaxed);
  // Seqlock writer: release on each field, so a reader that sees a new value sees the odd
  // generation too (read()).
  e.va.store(range.va, std::memory_order_release);
  e.length.store(range.length, std::memory_order_release);
  e.offset.store(range.offset, std::memory_order_release);
  e.fd.store(range.fd, std::memory_order_release);
  e.generation.store(odd + 1, std::memory_order_release);  // publish: the fields happen-before
  // `used` after the entry: a reader that sees the new count sees a complete entry or an odd one.
  if (index >= used.load(std::memory_order_relaxed)) used.store(index + 1, std::memory_order_release);
}

void RangeTable::retire(uint32_t index) {
  RangeEntry& e = entries[index];
  const uint64_t g = e.generation.load(std::memory_order_relaxed);
  if (g == 0 || (g & 1) != 0) return;
  // Odd: readers and caches holding the old generation now miss. Release: a peer that sees it
  // also sees that we are done with the range (a later close of the fd comes after).
  e.generation.store(g + 1, std::memory_order_release);
  // After the generation: a peer that sees the new count and then loads the generation sees it odd.
  unpublished.fetch_add(1, std::memory_order_release);
}

void RangeTable::clear_keeping_generations() {
  for (RangeEntry& e : entries) {
    const uint64_t g = e.generation.load(std::memory_order_relaxed);
    e.va.store(0, std::memory_order_relaxed);
    e.length.store(0, std::memory_order_relaxed);
    e.offset.store(0, std::memory_order_relaxed);
    e.fd.store(-1, std::memory_order_relaxed);
    e.generation.store(g | 1, std::memory_order_release);  // odd: no range (0 stays 1: "used before")
  }
  used.store(0, std::memory_order_release);
  unpublished.fetch_add(1, std::memory_order_release);
}

}  // namespace softhca::runtime
