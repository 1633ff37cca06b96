// Registered memory reachable by the other processes of a host (docs/live-mode.md, "Addresses the
// device uses" and "fork"): this process converts the pages it registers into shared pages backed
// by memfds and publishes them in a RangeTable; peers open those memfds through /proc/<pid>/fd and
// map them. Leaves out: where the tables live (the runtime places them in the host segment) and
// who decides slots. Units: bytes and virtual addresses of the owning process; pages of 4 KiB or
// whatever sysconf(_SC_PAGESIZE) says.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "pcie/host_kernel.h"

namespace softhca::runtime {

// Published ranges per process. 2048 entries x 40 bytes = 80 KiB per slot; a registration uses one
// entry per contiguous run of converted pages with one protection, a coherent buffer one entry.
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
// bytes are an empty table, so a zero-filled shared mapping can be used as one. Written only by the
// owner process (its MemoryPublisher, under its own mutex); read by anyone without locks.
struct RangeTable {
  std::atomic<uint32_t> used;  // entries [0, used) may hold ranges; only grows (release)
  uint32_t reserved_04;
  RangeEntry entries[kRangeTableCapacity];

  // The entry's range if it currently holds one (seqlock read, no system call).
  [[nodiscard]] std::optional<RangeSnapshot> read(uint32_t index) const;
  // The generation of entry `index` now (acquire): what a cached reader compares.
  [[nodiscard]] uint64_t generation(uint32_t index) const {
    return entries[index].generation.load(std::memory_order_acquire);
  }
};
static_assert(std::is_standard_layout_v<RangeEntry> && sizeof(RangeEntry) == 40);
static_assert(std::is_standard_layout_v<RangeTable>);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free);

// This process's side: converting registered memory to shared pages and allocating DMA-coherent
// memory, both published in `mine` with DMA addresses pcie::dma_address(my_slot, va).
//
// One MemoryPublisher per process at a time (the pages are the process's; a second one rebinds the
// process state to its table). Thread-safe (an internal mutex). Errors: 0 / invalid with errno,
// never exceptions.
//
// pin() converts in place. For each run of the page-aligned range that is not yet backed by one of
// our memfds (found in /proc/self/maps) it creates a memfd, makes the run read-only, copies the
// bytes into the memfd and maps it MAP_SHARED|MAP_FIXED over the run with the run's protection. A
// thread writing to the run meanwhile faults; the SIGSEGV handler (installed once, chaining to the
// previous handler for every other fault) waits for the run to be converted and returns, so the
// store is retried into the shared page: no write is lost. The copy and the remap run on a helper
// thread while the caller waits on an alternate signal stack (one is set up if the thread has
// none), so the caller's own stack may be registered too.
// Limits: another thread whose live stack pointer is inside a run being converted and that has no
// alternate signal stack dies if it faults (the kernel cannot push the signal frame); an
// application that replaces the SIGSEGV handler after the first pin without chaining breaks the
// wait; a faulting thread that stays descheduled for 256 later conversions is not recognised.
//
// Errors of pin: EFAULT some page is not mapped or not readable; EINVAL the range includes memory
// the application itself mapped MAP_SHARED (it cannot be converted without changing what the
// application shares; real verbs would pin it, softhca cannot reach it from peers) or lies beyond
// the 52-bit DMA address space; ENOMEM the table is full; others from memfd_create/mmap; EPERM
// the object was inherited across fork.
//
// Memory freed or unmapped while registered: the memfd stays open, so peers that mapped it write
// into memory nobody reads — never a crash. A later pin of the same addresses finds them no longer
// ours in /proc/self/maps, converts them again and publishes a new entry (the stale one is
// unpublished, its generation moves on).
//
// fork: a pthread_atfork child handler (installed once) replaces every converted page in the child
// by a private copy, so parent and child never share registered memory (rdma-core's copy-on-fork);
// coherent memory is MADV_DONTFORK and absent from the child. A MemoryPublisher inherited by a
// child is unusable (EPERM, its table is the parent's); the child may construct a new one.
// Limits: the copy is taken when the child handler runs, not at the instant of fork, so writes by
// the parent's other threads in between may show in the child's copy; and the forking thread's
// own live stack (64 KiB around the handler's frame) cannot be swapped under the handler running
// on it: if registered, it stays shared with the parent (a warning on stderr). Do not fork from a
// thread whose stack is registered (with rdma-core's MADV_DONTFORK the child would crash).
//
// The table given to the constructor may be a reused slot's: whatever it still publishes is
// unpublished. Destroying the publisher unpublishes everything; pages stay converted. Free coherent
// memory before destroying its publisher.
class MemoryPublisher {
 public:
  MemoryPublisher(RangeTable& mine, uint32_t my_slot);
  ~MemoryPublisher();
  MemoryPublisher(const MemoryPublisher&) = delete;
  MemoryPublisher& operator=(const MemoryPublisher&) = delete;

  // A memfd mapped MAP_SHARED, MADV_DONTFORK, zeroed, whole pages (at least one), published.
  // Invalid with errno on failure.
  pcie::DmaMemory alloc_coherent(size_t bytes);
  void free_coherent(const pcie::DmaMemory& memory);

  // Makes [addr, addr + len) reachable by peers and returns the DMA address of addr, or 0 with
  // errno. len 0 pins nothing and returns the address. Pins nest: each pin is undone by one unpin.
  uint64_t pin(const void* addr, size_t len);
  // Drops one pin. Never converts back: reverting would need the same read-only dance and gains
  // nothing (a shared page behaves like a private one for this process), so pages stay shared
  // until exit. A run no pin uses any more is unpublished (peers lose access; a new pin publishes
  // it again).
  void unpin(const void* addr, size_t len);

  // Ranges converted and currently known to this process (for tests and stats).
  [[nodiscard]] size_t converted_runs() const;
  // Writes of any thread that faulted on a run being converted and were retried (process-wide).
  [[nodiscard]] static uint64_t faults_waited();

 private:
  RangeTable& mine_;
  uint32_t slot_;
  uint64_t epoch_;  // the process state's binding this object was made for (changes in a fork child)
};

// Resolving DMA addresses of any process of the host in this process: the HostBridge::map
// contract. Not thread-safe: the caller serialises (it holds the device lock). A cache hit costs
// no system call and no allocation: a scan of the slot's few cached mappings and one atomic load.
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
  // The slot's process is gone (or the slot was reused): unmaps everything cached for it.
  void forget(uint32_t slot);

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
    std::vector<Cached> cached;
  };
  std::span<uint8_t> map_slow(uint32_t slot, uint64_t va, size_t len);

  uint32_t my_slot_;
  std::function<const RangeTable*(uint32_t)> table_of_;
  std::function<pid_t(uint32_t)> pid_of_;
  std::vector<Peer> peers_;  // by slot
};

}  // namespace softhca::runtime
