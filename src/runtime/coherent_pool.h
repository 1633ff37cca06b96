// Where DMA-coherent buffers lie inside a few large chunks of memory: small blocks (powers of two
// from 64 bytes to 2 KiB) carved from pages, larger buffers as runs of whole pages, and buffers
// above a quarter of a chunk in a chunk of their own. Bookkeeping only: the caller makes, maps and
// zeroes the chunks (pinned_pages.cc). Units: bytes, offsets from a chunk's base address.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace softhca::runtime {

// Not thread-safe: the caller serialises. Every operation is O(log chunks + log free runs): no
// scan of the buffers alive, so allocating and freeing cost the same with one buffer or a million.
class CoherentPool {
 public:
  static constexpr uint64_t kChunkBytes = uint64_t{32} << 20;
  static constexpr uint64_t kOwnChunkAbove = kChunkBytes / 4;  // larger buffers: a chunk of their own
  static constexpr uint64_t kMinBlockBytes = 64;               // a cache line: no two buffers share one
  static constexpr unsigned kSmallClasses = 6;                 // 64 .. 2048 bytes

  explicit CoherentPool(uint64_t page_bytes) : page_(page_bytes) {}

  // The size a buffer of `bytes` occupies: a small block's power of two, or whole pages (at least
  // one). 0 when bytes is too large to round.
  [[nodiscard]] uint64_t rounded(uint64_t bytes) const;

  // Where a buffer of rounded(bytes) goes: the address of a chunk added with add_chunk() and the
  // offset in it, or {0, 0} when no chunk has room, in which case new_chunk_bytes() says how large
  // the chunk to add is (kChunkBytes, or the buffer's own size above kOwnChunkAbove).
  struct Place {
    uint64_t chunk = 0;
    uint64_t offset = 0;
  };
  [[nodiscard]] Place allocate(uint64_t bytes);
  [[nodiscard]] uint64_t new_chunk_bytes(uint64_t bytes) const;
  // A chunk of `bytes` mapped at `base` (page-aligned, zero-filled). own: it is the buffer above
  // kOwnChunkAbove that allocate() found no room for, in use from now on (offset 0); otherwise its
  // pages join the free runs.
  // fd: the chunk's file, handed back by fd_of().
  void add_chunk(uint64_t base, uint64_t bytes, bool own, int fd);

  // Gives back the buffer at `address` of rounded(bytes). What the caller must do to the memory:
  // zero `zero_bytes` at `address` (a small block), punch the pages out (a page run: zeroes them and
  // returns them to the kernel), or, when the buffer had a chunk of its own, unmap and close the
  // chunk at `drop_chunk`. False when address is no buffer of the pool.
  struct Release {
    uint64_t zero_bytes = 0;  // small block: memset to 0
    uint64_t punch_bytes = 0;  // page run: punch [address, + punch_bytes) out of the chunk's file
    uint64_t drop_chunk = 0;   // own chunk: its base
    uint64_t chunk_bytes = 0;
  };
  bool release(uint64_t address, uint64_t bytes, Release* out);

  // The chunk holding `address`: its base and size, or {0, 0}.
  [[nodiscard]] std::pair<uint64_t, uint64_t> chunk_of(uint64_t address) const;

  // Whether the buffer at `address` is one with a chunk of its own (release() would drop it).
  [[nodiscard]] bool has_own_chunk(uint64_t address) const;
  // The fd given to add_chunk() for the chunk at `base`, or -1.
  [[nodiscard]] int fd_of(uint64_t base) const;
  // Forgets every chunk (a fork child: the chunks were never mapped in it).
  void reset();

  [[nodiscard]] size_t chunks() const { return chunks_.size(); }
  [[nodiscard]] uint64_t bytes_in_use() const { return in_use_; }

 private:
  struct Chunk {
    uint64_t bytes = 0;
    bool own = false;
    int fd = -1;
  };
  [[nodiscard]] static unsigned small_class(uint64_t bytes);
  // A run of `bytes` (whole pages) from the free runs of shared chunks, best fit; 0 when none.
  uint64_t take_run(uint64_t bytes);
  void give_run(uint64_t address, uint64_t bytes);

  uint64_t page_;
  std::map<uint64_t, Chunk> chunks_;                 // by base address
  std::map<uint64_t, uint64_t> free_runs_;           // address -> bytes (coalesced, shared chunks)
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (bytes, address) of the same runs
  std::vector<uint64_t> free_small_[kSmallClasses];  // addresses of free blocks per class
  uint64_t in_use_ = 0;
};

}  // namespace softhca::runtime
