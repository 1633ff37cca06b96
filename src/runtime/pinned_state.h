// The process-wide state behind PinnedPages (pinned_pages.h): the memfds we made, the windows, the
// pin arena's chunks and the coherent pool, under one mutex; shared by pinned_pages.cc (pins and
// fork) and coherent_memory.cc. Internal to src/runtime. Units: bytes, virtual addresses.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "runtime/coherent_pool.h"
#include "runtime/pin_arena.h"
#include "runtime/pinned_pages.h"
#include "runtime/proc_maps.h"

namespace softhca::runtime::pinned {

// A memfd we created and have not closed. Trivially destructible, as everything the fork child
// handler clears (it must free nothing).
struct Memfd {
  int fd = -1;
  uint64_t inode = 0;
  uint64_t size = 0;
  uint32_t uses = 0;         // window pieces mapping it, plus one while it is a coherent chunk or
                             // a chunk of the pin arena (those are never given back by give_back)
  uint64_t coherent_va = 0;  // the coherent chunk's address; 0 for pinned pages
  int32_t arena_chunk = -1;  // its index in the pin arena, or -1
};

struct WindowRecord {
  uint64_t base = 0;
  uint64_t length = 0;
};

// A piece of some window (flat, so that nothing nested must be freed).
struct PieceRecord {
  uint64_t window_base = 0;
  WindowPiece piece;
};

// Every member is guarded by mu.
struct State {
  std::mutex mu;
  CoherentPool pool;
  PinArena arena;
  std::vector<Memfd> memfds;
  std::vector<WindowRecord> windows;  // windows of pins outside the arena (a few at most)
  std::vector<PieceRecord> pieces;
  int maps_fd = -1;           // /proc/self/maps for PROCMAP_QUERY; -1 until first use
  bool no_maps_query = false;  // the kernel lacks PROCMAP_QUERY: read the whole file
  uint64_t memfd_dev = 0;     // st_dev of our memfds (PROCMAP_QUERY names devices, not files)
  char maps_buf[64 * 1024];

  explicit State(size_t page) : pool(page) {}

  Memfd* memfd_of_inode(uint64_t inode) {
    for (Memfd& m : memfds)
      if (m.inode == inode) return &m;
    return nullptr;
  }
  Memfd* memfd_of_fd(int fd) {
    for (Memfd& m : memfds)
      if (m.fd == fd) return &m;
    return nullptr;
  }
  // The memfd of ours a mapping maps, or nullptr.
  Memfd* ours(const proc_maps::Mapping& m) {
    if (!m.shared) return nullptr;
    if (!m.ours_by_name && (m.dev == 0 || m.dev != memfd_dev)) return nullptr;
    return memfd_of_inode(m.inode);
  }
};

State& state();
size_t page_size();
// A memfd named `name` of `len` bytes (sparse). False with errno.
bool make_memfd(State& s, const char* name, size_t len, Memfd* out);

// f(const Mapping&) for every mapping that intersects [start, end): through PROCMAP_QUERY when the
// kernel has it (the cost follows the range's mappings), else from the whole of /proc/self/maps.
// False with errno when neither could be read.
template <class F>
bool mappings_in(State& s, uint64_t start, uint64_t end, F&& f) {
  if (!s.no_maps_query) {
    if (s.maps_fd < 0) s.maps_fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (s.maps_fd >= 0) {
      const int r = proc_maps::for_each_mapping_in(s.maps_fd, start, end, f);
      if (r != 0) return r == 1;
    }
    s.no_maps_query = true;
  }
  return proc_maps::for_each_mapping(s.maps_buf, sizeof(s.maps_buf), [&](const proc_maps::Mapping& m) {
    if (m.end > start && m.start < end) f(m);
  });
}

}  // namespace softhca::runtime::pinned
