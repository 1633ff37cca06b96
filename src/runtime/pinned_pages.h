// The pages registrations pin and the device's own view of them: each pin gets a window, a second
// mapping of its (memfd-backed) pages at an address the application never got; pages go back when
// no window uses them. Leaves out publishing (memory_publisher.h). Units: bytes, virtual addresses.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "pcie/host_kernel.h"

namespace softhca::runtime {

// One piece of a window: [window + offset, + length) maps memfd `fd` from `file_offset`.
struct WindowPiece {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t file_offset = 0;
  int fd = -1;
};

// A window as pin() made it: `device` is the window's address of the byte pinned first. Most pins
// share a window: the view of an arena chunk (arena_view; pieces is then the whole chunk, the same
// for every pin in it); the others have one of their own.
struct Window {
  uint8_t* device = nullptr;
  uint64_t base = 0;  // page-aligned start of the window
  uint64_t length = 0;
  std::vector<WindowPiece> pieces;
  bool arena_view = false;
};

// Process-wide, because the pages are the process's: the state lives until exit (conversions and
// the fork handler may need it at any time) and every function is thread-safe (one mutex). Errors:
// nullptr / false with errno, never exceptions.
//
// pin() looks up the range's mappings (PROCMAP_QUERY, one ioctl per mapping of the range; the
// whole of /proc/self/maps on kernels before 6.11). Pages already in one of our memfds are used as
// they are; private runs are converted (copied into a memfd mapped over them, no concurrent store
// lost): into the pin arena (pin_arena.h) at the run's own offset, so neighbouring registrations
// leave one merged mapping and share one view, or, for a run above PinArena::kLargestRun, into a
// memfd of its own. Only the run's own pages are converted (pinned_pages.cc
// kConvertHeapNeighbours). When the pinned pages lie in one arena chunk at consecutive offsets the
// window is that chunk's view (no new mapping); otherwise a window is reserved and each piece's
// memfd mapped into it (shared, MADV_DONTFORK, writable only for PinAccess::kWrite). Errors:
// EFAULT some page is not mapped, not readable, or (kWrite) not writable, as the kernel's pin of
// user pages answers; EINVAL the range includes memory the application itself mapped MAP_SHARED
// (it cannot be converted without changing what the application shares); others from
// memfd_create/mmap. An arena view is writable whatever the access: the device's key checks,
// not the page protection, keep a read-only registration from being written.
//
// unpin() drops the pin's use of its pages. Arena pages no pin uses any more are given back: the
// application's pages still mapped from them are converted back to private pages (the same
// read-only dance as pin, so no store is lost; looked for where they were, and in the whole maps
// only when the application moved or unmapped them), then they are punched out of the chunk and
// the kernel frees them. A memfd of its own is given back the same way once nothing uses it, and
// closed. A later pin of the same pages converts them again.
//
// fork: a pthread_atfork child handler (installed once) replaces every page still mapped from one
// of our memfds in the child by a private copy, so parent and child never share registered memory
// (rdma-core's copy-on-fork); windows and coherent memory are MADV_DONTFORK and absent from the
// child, whose state starts empty (fork_generation() moves on). Limits: the copy is taken when the
// child handler runs, not at the instant of fork, so writes by the parent's other threads in
// between may show in the child's copy; and the forking thread's own live stack (64 KiB around the
// handler's frame) cannot be swapped under the handler running on it: if registered, it stays
// shared with the parent (a warning on stderr). Do not fork from a thread whose stack is registered.
class PinnedPages {
 public:
  // A window over [addr, addr + len) rounded out to whole pages; len > 0. Invalid (device null)
  // with errno on failure, nothing pinned.
  static Window pin(const void* addr, size_t len, pcie::PinAccess access);
  // Drops the pin whose window address of its first byte is `device`, of `len` bytes (what pin()
  // was given); false when there is none.
  static bool unpin(const void* device, size_t len);

  // DMA-coherent memory: a buffer of CoherentPool::rounded(bytes) bytes (*size), zeroed, in a chunk
  // of memfd-backed pages mapped shared, writable, MADV_DONTFORK (coherent_pool.h: small buffers
  // share pages, larger ones share chunks, the largest have a chunk of their own). The driver and
  // the device use the same address. *chunk is the chunk that holds it (its base address, length
  // and memfd: what a publisher publishes once). Null with errno on failure. Costs no scan of the
  // buffers alive, nor of /proc/self/maps.
  struct CoherentChunk {
    uint64_t base = 0;
    uint64_t length = 0;
    int fd = -1;
  };
  static uint8_t* alloc_coherent(size_t bytes, size_t* size, CoherentChunk* chunk);
  // The chunk free_coherent(data) will unmap and close (a buffer with a chunk of its own), so that
  // it can be unpublished first; fd -1 when the buffer shares its chunk.
  static CoherentChunk coherent_chunk_dropped_by(const uint8_t* data);
  // Gives the buffer back: its pages are zeroed and returned to the kernel (a small block is
  // zeroed in place). `size` is the one alloc_coherent() reported.
  static void free_coherent(const uint8_t* data, size_t size);

  // What is held now (tests, diagnostics).
  struct Usage {
    size_t memfds = 0;  // open memfds: pinned pages and coherent chunks
    size_t coherent_chunks = 0;
    uint64_t coherent_bytes = 0;  // in coherent buffers now
    size_t windows = 0;  // windows of their own (pins outside the arena's views)
    uint64_t window_bytes = 0;
    size_t arena_chunks = 0;
    uint64_t arena_bytes = 0;  // arena pages some pin uses
  };
  [[nodiscard]] static Usage usage();
  // Changes in every fork child: state made before it is not the child's.
  [[nodiscard]] static uint64_t fork_generation();
  [[nodiscard]] static size_t page_bytes();
};

}  // namespace softhca::runtime
