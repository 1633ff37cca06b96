// A heap inside the device region (docs/live-mode.md: the device's whole state lives in one block
// of memory that every process maps at its own address). Blocks are powers of two from 64 bytes,
// one free list per size class, a bump pointer for memory never used; everything is an offset from
// the region base, never a pointer. The caller remembers each block's size (no headers). Control
// path only, under the device lock.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace softhca::hca {

// The memory the device state lives in: a private heap block, or a shared segment each process
// maps at a different base.
struct DeviceRegion {
  void* base = nullptr;
  size_t size = 0;
};

// kFormat lays out a fresh device in the region (the first process); kAttach uses the state a
// previous kFormat left there (any later process, at any base address).
enum class RegionInit : uint8_t { kFormat, kAttach };

inline constexpr unsigned kHeapMinLog = 6;   // 64-byte blocks: one cache line, so objects never share one
inline constexpr unsigned kHeapMaxLog = 40;  // 1 TiB: beyond any region we map
inline constexpr uint64_t kHeapNone = 0;     // offset 0 is the region header: never a block

// The heap's bookkeeping, stored in the region.
struct HeapState {
  uint64_t begin = 0;  // first heap byte (64-byte aligned)
  uint64_t end = 0;    // one past the last
  uint64_t bump = 0;   // first byte never handed out
  uint64_t bytes_in_use = 0;
  std::array<uint64_t, kHeapMaxLog + 1> free_head{};  // per size class: first free block or kHeapNone
};
static_assert(std::is_trivially_copyable_v<HeapState>);

class RegionHeap {
 public:
  RegionHeap(uint8_t* base, HeapState& state) : base_(base), st_(state) {}

  static void format(HeapState& st, uint64_t begin, uint64_t end);

  // A block of at least `bytes` (contents unspecified), or kHeapNone when the region is full.
  [[nodiscard]] uint64_t allocate(uint64_t bytes);
  // Returns a block; `bytes` is the size it was allocated with.
  void release(uint64_t offset, uint64_t bytes);

  template <class T>
  [[nodiscard]] T* at(uint64_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }
  [[nodiscard]] uint8_t* base() const { return base_; }
  [[nodiscard]] const HeapState& state() const { return st_; }

 private:
  static unsigned size_class(uint64_t bytes);

  uint8_t* base_;
  HeapState& st_;
};

}  // namespace softhca::hca
