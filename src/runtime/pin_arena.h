// Where registered pages go when they are converted to shared pages: large sparse memfds
// ("chunks"), an application page at address va at file offset va mod kChunkBytes, so pages that
// neighbour in the application neighbour in the file (the kernel merges their mappings into one,
// however many registrations made them) and the device reaches them all through one view of the
// chunk. Keeps how many pins use each page. Bookkeeping only: pinned_pages.cc makes the memfds,
// views and conversions. Units: bytes, file offsets, virtual addresses.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace softhca::runtime {

// Not thread-safe: the caller serialises. Costs O(log n) per call in the ranges counted, nothing
// per pin alive.
class PinArena {
 public:
  // 64 GiB of file (sparse: only converted pages hold memory) and of address space per view.
  static constexpr uint64_t kChunkBytes = uint64_t{64} << 30;
  // Longer runs, and runs that would cross a chunk's end, are not placed (their own memfd).
  static constexpr uint64_t kLargestRun = kChunkBytes / 4;
  // Pins count whole blocks of the file (a registration converts only its own pages: pinned_pages.cc
  // kConvertHeapNeighbours says why).
  static constexpr uint64_t kBlockBytes = uint64_t{64} << 10;
  static constexpr int kNoRoom = -1;  // place(): every chunk has a page of the run in use
  static constexpr int kNever = -2;   // place(): the run cannot go into any chunk

  struct Chunk {
    uint64_t view = 0;  // this process's mapping of the whole file
    int fd = -1;
    uint64_t inode = 0;
  };
  // A range whose pages no pin uses any more: `delta` is what the application's address of a page
  // minus its offset was when it was counted (where to look for the application's mapping).
  struct Idle {
    uint32_t chunk = 0;
    uint64_t offset = 0;
    uint64_t end = 0;
    uint64_t delta = 0;
  };

  [[nodiscard]] static uint64_t offset_for(uint64_t va) { return va % kChunkBytes; }

  // The first chunk where [offset_for(va), + len) is free for va's pages: no page in use, or only
  // pages counted for va itself (a block a pin of a neighbour reserved) that holes(chunk, offset,
  // end) says hold no data (nothing of an earlier mapping of va still pinned). kNoRoom (add a
  // chunk), or kNever. va and len page-aligned.
  using Holes = std::function<bool(uint32_t chunk, uint64_t offset, uint64_t end)>;
  [[nodiscard]] int place(uint64_t va, uint64_t len, const Holes& holes) const;
  [[nodiscard]] static uint64_t block_down(uint64_t v) { return v / kBlockBytes * kBlockBytes; }
  [[nodiscard]] static uint64_t block_up(uint64_t v) { return (v + kBlockBytes - 1) / kBlockBytes * kBlockBytes; }
  uint32_t add_chunk(const Chunk& c);
  [[nodiscard]] const Chunk& chunk(uint32_t index) const { return chunks_[index].c; }
  [[nodiscard]] size_t chunks() const { return chunks_.size(); }
  // The chunk of memfd inode `inode`, or -1; the chunk whose view holds `address`, or -1.
  [[nodiscard]] int chunk_of_inode(uint64_t inode) const;
  [[nodiscard]] int chunk_of_view(uint64_t address) const;

  // One more pin uses every page of [offset, end) of chunk `c`; pages no pin used remember delta.
  void use(uint32_t c, uint64_t offset, uint64_t end, uint64_t delta);
  // Whether every page of [offset, end) is used by some pin.
  [[nodiscard]] bool in_use(uint32_t c, uint64_t offset, uint64_t end) const;
  // One pin fewer on every page of [offset, end) (each must be in use); ranges no pin uses any
  // more are appended to *idle.
  void release(uint32_t c, uint64_t offset, uint64_t end, std::vector<Idle>* idle);
  // Pages counted in use (tests, stats).
  [[nodiscard]] uint64_t bytes_in_use() const;
  // Forgets everything (a fork child: the chunks' views were never its own).
  void reset();

 private:
  struct Count {
    uint64_t end = 0;
    uint32_t uses = 0;
    uint64_t delta = 0;
  };
  using Counts = std::map<uint64_t, Count>;  // by offset; non-overlapping, uses >= 1
  struct Entry {
    Chunk c;
    Counts counts;
  };
  static void split(Counts& m, uint64_t at);
  static void merge_around(Counts& m, uint64_t from, uint64_t to);

  std::vector<Entry> chunks_;
};

}  // namespace softhca::runtime
