// This process's pins and coherent buffers, published for the other processes of its host with DMA
// addresses (slot << 52) | the device's own address (docs/live-mode.md). Leaves out where the table
// lives and who decides slots (the runtime). Units: bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "pcie/host_kernel.h"
#include "runtime/pinned_pages.h"
#include "runtime/range_table.h"

namespace softhca::runtime {

// Thread-safe (an internal mutex; PinnedPages's is taken inside it). Errors: 0 / invalid with
// errno, never exceptions. Each piece of a window is one entry of the table; a peer maps it by
// opening the memfd through /proc/<pid>/fd (PeerMemory).
//
// Errors of pin: those of PinnedPages::pin; EINVAL the window lies beyond the 52-bit DMA address
// space; ENOMEM the table is full; EPERM the object was inherited across fork (a child may
// construct a new one; its table is the parent's).
//
// The table given to the constructor may be a reused slot's: whatever it still publishes is
// unpublished. Destroying the publisher unpublishes everything; windows it made stay until exit
// (a process whose runtime goes keeps what it pinned). Free coherent memory before destroying it.
class MemoryPublisher {
 public:
  MemoryPublisher(RangeTable& mine, uint32_t my_slot);
  ~MemoryPublisher();
  MemoryPublisher(const MemoryPublisher&) = delete;
  MemoryPublisher& operator=(const MemoryPublisher&) = delete;

  // A buffer of PinnedPages::alloc_coherent (memfd-backed, MADV_DONTFORK, zeroed; its size
  // rounded as CoherentPool::rounded), in a chunk published whole when it was made. Invalid with
  // errno on failure.
  pcie::DmaMemory alloc_coherent(size_t bytes);
  void free_coherent(const pcie::DmaMemory& memory);

  // Pins [addr, addr + len) in a window of its own, publishes the window and returns the DMA
  // address of addr's byte in it, or 0 with errno. len 0 pins nothing and returns the address of
  // addr itself (nothing is ever reached through it). Each pin is undone by one unpin.
  uint64_t pin(const void* addr, size_t len, pcie::PinAccess access);
  // Unpublishes the pin that returned dma_addr (peers lose it at once: their next use misses,
  // and their device entries drop their mappings) and unpins its window.
  void unpin(uint64_t dma_addr, size_t len);

  // Entries published now (tests and stats).
  [[nodiscard]] size_t published_entries() const;

 private:
  // A pin's window or a coherent buffer, and the entries that publish its pieces.
  struct Published {
    uint64_t base = 0;
    uint64_t length = 0;
    bool coherent = false;
    bool arena = false;  // an arena chunk's view, shared by many pins
    std::vector<uint32_t> entries;
  };
  [[nodiscard]] bool inherited() const { return PinnedPages::fork_generation() != fork_generation_; }
  bool publish(uint64_t base, const std::vector<WindowPiece>& pieces, Published* out);
  void unpublish(Published& p);

  mutable std::mutex mu_;
  RangeTable& mine_;
  uint32_t slot_;
  uint64_t fork_generation_;  // PinnedPages::fork_generation() when made: another one is a child's
  std::vector<uint32_t> free_entries_;
  std::map<uint64_t, Published> published_;  // by base: unpin finds its pin in O(log n)
};

}  // namespace softhca::runtime
