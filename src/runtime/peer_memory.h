// DMA addresses of any process of the host resolved in this process (HostBridge::map across
// processes): own addresses are pointers; a peer's published ranges are mapped on first use and
// cached. Leaves out publishing (memory_publisher.h). Units: bytes, DMA addresses.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/range_table.h"

namespace softhca::runtime {

// Not thread-safe: the caller serialises (it holds the device lock). A cache hit costs no system
// call and no allocation: a scan of the slot's few cached mappings and one atomic load. Mappings
// are MADV_DONTFORK (a fork child is no device).
class PeerMemory {
 public:
  // table_of(slot) / pid_of(slot): the slot's RangeTable and pid (nullptr / 0 when the slot is
  // free). Addresses of my_slot resolve directly to this process's pointers.
  PeerMemory(uint32_t my_slot, std::function<const RangeTable*(uint32_t)> table_of,
             std::function<pid_t(uint32_t)> pid_of);
  ~PeerMemory();
  PeerMemory(const PeerMemory&) = delete;
  PeerMemory& operator=(const PeerMemory&) = delete;

  // The memory at dma_addr: at most len bytes, contiguous, inside one published range; empty when
  // nothing is published there (a DMA fault) or the owner cannot be opened.
  std::span<uint8_t> map(uint64_t dma_addr, size_t len);
  // Unmaps every cached range its owner no longer publishes, so that nothing here keeps the pages
  // of a deregistration alive. Costs one atomic load per peer with cached ranges when no owner
  // unpublished anything since the last call (RangeTable::unpublished); the runtime calls it at
  // the end of every device entry, the agent's periodic one included.
  void drop_unpublished();
  // The slot's process is gone (or the slot was reused): unmaps everything cached for it.
  void forget(uint32_t slot);

  // Ranges mapped now, and their bytes (tests and stats).
  [[nodiscard]] size_t mapped_ranges() const;
  [[nodiscard]] uint64_t mapped_bytes() const;

 private:
  struct Cached {
    uint64_t va = 0;  // owner's range [va, va + length)
    uint64_t length = 0;
    uint64_t generation = 0;
    uint32_t index = 0;
    uint8_t* local = nullptr;  // our mapping of the range
  };
  struct Peer {
    const RangeTable* table = nullptr;
    uint32_t seen_unpublished = 0;  // table->unpublished when its stale ranges were last dropped
    std::vector<Cached> cached;
  };
  std::span<uint8_t> map_slow(uint32_t slot, uint64_t va, size_t len);
  void drop_stale(Peer& peer);
  // Unmaps a cached range, unless this is a fork child: its mappings (MADV_DONTFORK) were never
  // the child's, and the addresses may hold the child's own memory by now.
  void unmap(const Cached& c) const;

  uint32_t my_slot_;
  std::function<const RangeTable*(uint32_t)> table_of_;
  std::function<pid_t(uint32_t)> pid_of_;
  std::vector<Peer> peers_;  // by slot
  uint64_t fork_generation_;  // PinnedPages::fork_generation() when made
};

}  // namespace softhca::runtime
