// The ranges of device-reachable memory one process publishes for the others of its host: plain
// data in the host segment, written by the owner, read lock-free by peers. Leaves out how the
// ranges came to be (memory_publisher.h). Units: bytes, virtual addresses of the owning process.
#pragma once
#include <atomic>
#include <cstdint>
#include <optional>
#include <type_traits>

namespace softhca::runtime {

// Published ranges per process. 2048 entries x 40 bytes = 80 KiB per slot. A coherent chunk
// (coherent_pool.h) or an arena chunk's view (pin_arena.h) takes one entry for all the buffers and
// registrations in it; only a registration with a window of its own takes one entry per piece.
inline constexpr uint32_t kRangeTableCapacity = 2048;

// One published range: [va, va + length) of the owner is the memfd `fd` of the owner from `offset`.
// Seqlock: the owner makes `generation` odd, writes the fields (release), then makes it even (release);
// generation 0 (never used) and odd values (free or being rewritten) are not ranges. The fields of
// one generation never change, so a reader caching (index, generation) needs only to re-check the
// generation. All fields are lock-free atomics so readers in other processes race on nothing.
struct RangeEntry {
  std::atomic<uint64_t> generation;
  std::atomic<uint64_t> va;
  std::atomic<uint64_t> length;
  std::atomic<uint64_t> offset;
  std::atomic<int32_t> fd;
  uint32_t reserved_2c;
};

// What a reader copies out of an entry, consistent for `generation`.
struct RangeSnapshot {
  uint64_t generation = 0;
  uint64_t va = 0;
  uint64_t length = 0;
  uint64_t offset = 0;
  int32_t fd = -1;
};

// One process's published ranges, placed in the host segment by the runtime. No pointers; all-zero
// bytes are an empty table, so a zero-filled shared mapping can be used as one.
struct RangeTable {
  std::atomic<uint32_t> used;  // entries [0, used) may hold ranges; only grows (release)
  // Bumped (release) after every unpublish: a peer that sees it change drops its mappings of
  // entries whose generation moved (PeerMemory::drop_unpublished). Wraps; compared for equality.
  std::atomic<uint32_t> unpublished;
  RangeEntry entries[kRangeTableCapacity];

  // The entry's range if it currently holds one (seqlock read, no system call).
  [[nodiscard]] std::optional<RangeSnapshot> read(uint32_t index) const;
  // The generation of entry `index` now (acquire): what a cached reader compares.
  [[nodiscard]] uint64_t generation(uint32_t index) const {
    return entries[index].generation.load(std::memory_order_acquire);
  }

  // Owner side, serialised by the owner: writes `range` into entry `index` (its generation moves
  // from even to odd to even) and makes sure `used` covers it.
  void write(uint32_t index, const RangeSnapshot& range);
  // Owner side: entry `index` is no range any more (its generation turns odd), then `unpublished`
  // moves on.
  void retire(uint32_t index);
  // The slot is freed (its process left or died): every entry is no range, and every generation
  // stays where it was or turns odd, never back to 0 — a peer still caching a mapping of the old
  // process (one that did not see it go) must miss when the next process of this slot publishes
  // at the same index, not read that process's index as the old one's (slot_data.h).
  void clear_keeping_generations();
};
static_assert(std::is_standard_layout_v<RangeEntry> && sizeof(RangeEntry) == 40);
static_assert(std::is_standard_layout_v<RangeTable>);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free &&
              std::atomic<uint32_t>::is_always_lock_free);

}  // namespace softhca::runtime
