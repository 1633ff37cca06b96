// DMA-coherent memory (PinnedPages::alloc_coherent): buffers placed by the coherent pool in chunks
// of memfd-backed pages this file maps, zeroes and gives back. Shares its state with the pins
// (pinned_state.h): a registration may cover coherent memory, and fork closes both alike.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "runtime/pinned_state.h"

namespace softhca::runtime {

using pinned::Memfd;
using pinned::State;
using pinned::state;

uint8_t* PinnedPages::alloc_coherent(size_t bytes, size_t* size, CoherentChunk* chunk) {
  *chunk = CoherentChunk{};
  State& s = state();
  std::lock_guard lock(s.mu);
  const uint64_t rounded = s.pool.rounded(bytes);
  if (rounded == 0) {
    errno = ENOMEM;
    return nullptr;
  }
  CoherentPool::Place place = s.pool.allocate(bytes);
  if (place.chunk == 0) {
    const uint64_t chunk_bytes = s.pool.new_chunk_bytes(bytes);
    Memfd mf;
    if (!make_memfd(s, "softhca-coherent", chunk_bytes, &mf)) return nullptr;
    void* p = ::mmap(nullptr, chunk_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, mf.fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(mf.fd);
      errno = e;
      return nullptr;
    }
    // Driver rings are never shared with a child (docs/live-mode.md, "fork").
    ::madvise(p, chunk_bytes, MADV_DONTFORK);
    mf.uses = 1;
    mf.coherent_va = reinterpret_cast<uint64_t>(p);
    s.memfds.push_back(mf);
    const bool own = chunk_bytes == rounded && rounded > CoherentPool::kOwnChunkAbove;
    s.pool.add_chunk(mf.coherent_va, chunk_bytes, own, mf.fd);
    place = own ? CoherentPool::Place{mf.coherent_va, 0} : s.pool.allocate(bytes);
    if (place.chunk == 0) {  // cannot happen: a fresh chunk holds any buffer up to kOwnChunkAbove
      errno = ENOMEM;
      return nullptr;
    }
  }
  *size = rounded;
  *chunk = CoherentChunk{place.chunk, s.pool.chunk_of(place.chunk).second, s.pool.fd_of(place.chunk)};
  return reinterpret_cast<uint8_t*>(place.chunk + place.offset);
}

PinnedPages::CoherentChunk PinnedPages::coherent_chunk_dropped_by(const uint8_t* data) {
  State& s = state();
  std::lock_guard lock(s.mu);
  const auto [base, bytes] = s.pool.chunk_of(reinterpret_cast<uint64_t>(data));
  if (!s.pool.has_own_chunk(reinterpret_cast<uint64_t>(data))) return {};
  return CoherentChunk{base, bytes, s.pool.fd_of(base)};
}

void PinnedPages::free_coherent(const uint8_t* data, size_t size) {
  const auto va = reinterpret_cast<uint64_t>(data);
  State& s = state();
  std::lock_guard lock(s.mu);
  const uint64_t chunk = s.pool.chunk_of(va).first;
  const int fd = s.pool.fd_of(chunk);
  CoherentPool::Release r;
  if (va == 0 || !s.pool.release(va, size, &r)) return;
  if (r.zero_bytes != 0) std::memset(reinterpret_cast<void*>(va), 0, r.zero_bytes);
  // Zeroes the run and gives its pages to the kernel; the run stays mapped (a hole reads zeros).
  if (r.punch_bytes != 0 &&
      ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(va - chunk),
                  static_cast<off_t>(r.punch_bytes)) != 0)
    std::memset(reinterpret_cast<void*>(va), 0, r.punch_bytes);  // the next buffer there must be zeroed
  if (r.drop_chunk == 0) return;
  ::munmap(reinterpret_cast<void*>(r.drop_chunk), r.chunk_bytes);
  Memfd* mf = s.memfd_of_fd(fd);
  if (mf == nullptr) return;
  mf->coherent_va = 0;
  mf->uses -= 1;
  // Mapped nowhere else unless a registration made a window of it: only then is there an
  // application mapping to look for (give_back).
  if (mf->uses == 0) {
    ::close(fd);
    std::erase_if(s.memfds, [&](const Memfd& m) { return m.fd == fd; });
  }
}

}  // namespace softhca::runtime
