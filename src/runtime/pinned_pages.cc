// Pinned pages and their windows: which runs to convert, the memfds and who uses them, giving
// pages back, coherent memory and the fork child. The mechanism and its limits are in
// pinned_pages.h and docs/live-mode.md.
#include "runtime/pinned_pages.h"

#include <pthread.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "runtime/coherent_pool.h"
#include "runtime/page_conversion.h"
#include "runtime/proc_maps.h"

namespace softhca::runtime {
namespace {

using proc_maps::for_each_mapping;
using proc_maps::Mapping;

// A memfd we created and have not closed. Trivially destructible, as everything the fork child
// handler clears (it must free nothing).
struct Memfd {
  int fd = -1;
  uint64_t inode = 0;
  uint64_t size = 0;
  uint32_t uses = 0;         // window pieces mapping it, plus one while it is a coherent chunk
  uint64_t coherent_va = 0;  // the coherent chunk's address; 0 for pinned pages
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

size_t page_size() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

// Every member is guarded by mu.
struct State {
  std::mutex mu;
  CoherentPool pool{page_size()};
  std::vector<Memfd> memfds;
  std::vector<WindowRecord> windows;
  std::vector<PieceRecord> pieces;
  char maps_buf[64 * 1024];

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
};

// Relaxed: it moves only in a fork child's handler, before the child has any other thread, and is
// read to refuse state made before the fork (MemoryPublisher, PeerMemory).
std::atomic<uint64_t> g_fork_generation{0};

State& state();

void fork_prepare() { state().mu.lock(); }
void fork_parent() { state().mu.unlock(); }

void write_stderr(const char* msg) {
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, std::strlen(msg));
}

// In the child: every page still mapped from one of our memfds becomes private (copy-on-fork).
// Async-signal-safe: raw system calls, the state's own buffers, no allocation.
void fork_child() {
  State& s = state();
  struct Piece {
    uint64_t start, end, offset;
    int prot, fd;
  };
  constexpr size_t kBatch = 64;
  Piece batch[kBatch];
  // Stack around this frame: what copy_to_private() and the system calls below may still write.
  constexpr uint64_t kStackMargin = 64 * 1024;
  const auto here = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  bool stack_shared = false;
  bool failed = false;
  for (;;) {
    size_t n = 0;
    bool more = false;
    for_each_mapping(s.maps_buf, sizeof(s.maps_buf), [&](const Mapping& m) {
      if (!m.ours_by_name || !m.shared) return;
      const Memfd* mf = s.memfd_of_inode(m.inode);
      if (mf == nullptr) return;
      // The page this handler runs on cannot be copied and swapped under it (the frames written
      // after the copy would vanish): the forking thread's own live stack stays shared.
      if (m.start < here + kStackMargin && here - kStackMargin < m.end) {
        stack_shared = true;
        return;
      }
      if (n == kBatch) {
        more = true;
        return;
      }
      batch[n++] = Piece{m.start, m.end, m.offset, m.prot, mf->fd};
    });
    for (size_t i = 0; i < n; ++i) {
      const Piece& p = batch[i];
      if (!page_conversion::copy_to_private(p.start, p.end - p.start, p.prot, p.fd, p.offset)) failed = true;
    }
    if (!more || failed) break;
  }
  if (failed) write_stderr("softhca: fork child keeps registered memory shared with its parent (copy failed)\n");
  if (stack_shared) write_stderr("softhca: fork by a thread whose stack is registered: that stack stays shared with the parent\n");
  for (const Memfd& m : s.memfds) ::close(m.fd);
  // clear() keeps the capacity: nothing is freed in the child handler.
  s.memfds.clear();
  s.windows.clear();
  s.pieces.clear();
  s.pool.reset();  // frees: glibc's fork has made malloc usable again before child handlers run
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  s.mu.unlock();
}

State& state() {
  // Leaked on purpose: conversions and the fork handler must work until the very end of exit.
  static State* const s = [] {
    auto* p = new State;
    ::pthread_atfork(fork_prepare, fork_parent, fork_child);
    return p;
  }();
  return *s;
}

bool make_memfd(const char* name, size_t len, Memfd* out) {
  const int fd = static_cast<int>(::syscall(SYS_memfd_create, name, MFD_CLOEXEC));
  if (fd < 0) return false;
  struct stat st {};
  if (::ftruncate(fd, static_cast<off_t>(len)) != 0 || ::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return false;
  }
  out->fd = fd;
  out->inode = st.st_ino;
  out->size = len;
  return true;
}

// ---- Giving pages back ------------------------------------------------------------------------

// Every memfd nothing uses any more: the application's pages still mapped from it become private
// again, then it is closed. One that could not be given back whole stays open (and known, so fork
// still privatizes it and a later pin uses it as it is); the next give_back tries again.
void give_back(State& s) {
  std::vector<int> idle;
  for (const Memfd& m : s.memfds)
    if (m.uses == 0) idle.push_back(m.fd);
  if (idle.empty()) return;
  std::vector<page_conversion::Job> jobs;
  const bool read = for_each_mapping(s.maps_buf, sizeof(s.maps_buf), [&](const Mapping& m) {
    if (!m.shared || !m.ours_by_name) return;
    const Memfd* mf = s.memfd_of_inode(m.inode);
    if (mf == nullptr || mf->uses != 0) return;
    page_conversion::Job j;
    j.start = m.start;
    j.end = m.end;
    j.prot = m.prot;
    j.target = page_conversion::Target::kPrivate;
    j.fd = mf->fd;
    j.offset = m.offset;
    jobs.push_back(j);
  });
  if (!read) return;
  const int thread_error = page_conversion::run(jobs);
  for (int fd : idle) {
    const bool whole = thread_error == 0 && std::none_of(jobs.begin(), jobs.end(), [&](const page_conversion::Job& j) {
                         return j.fd == fd && j.error != 0;
                       });
    if (!whole) continue;
    ::close(fd);
    std::erase_if(s.memfds, [&](const Memfd& m) { return m.fd == fd; });
  }
}

// ---- pin --------------------------------------------------------------------------------------

// A maps line clipped to the pinned range: one of our memfds (fd >= 0, from file_offset), or
// private pages to convert (fd < 0).
struct Span {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t file_offset = 0;
  int prot = 0;
  int fd = -1;
  size_t job = 0;  // fd < 0: the conversion job it is part of
};

// The clipped maps lines covering [start, end): false with errno EFAULT (a hole, or a page without
// the access asked for) or EINVAL (shared memory that is not ours).
bool collect_spans(State& s, uint64_t start, uint64_t end, pcie::PinAccess access, std::vector<Span>* out) {
  const int need = PROT_READ | (access == pcie::PinAccess::kWrite ? PROT_WRITE : 0);
  int error = 0;
  auto fail = [&](int e) {
    if (error == 0) error = e;
  };
  uint64_t covered = start;
  const bool read = for_each_mapping(s.maps_buf, sizeof(s.maps_buf), [&](const Mapping& m) {
    if (m.end <= start || m.start >= end) return;
    Span p;
    p.start = std::max(m.start, start);
    p.end = std::min(m.end, end);
    if (p.start != covered) fail(EFAULT);  // maps is sorted: a gap before this line
    covered = p.end;
    p.prot = m.prot;
    if ((m.prot & need) != need) fail(EFAULT);
    if (m.shared) {
      const Memfd* mf = m.ours_by_name ? s.memfd_of_inode(m.inode) : nullptr;
      if (mf == nullptr) return fail(EINVAL);
      p.fd = mf->fd;
      p.file_offset = m.offset + (p.start - m.start);
      if (p.file_offset + (p.end - p.start) > mf->size) fail(EFAULT);  // beyond the memfd: would SIGBUS
    }
    out->push_back(p);
  });
  if (!read) return false;
  if (covered != end) fail(EFAULT);
  errno = error;
  return error == 0;
}

// Converts the private spans, adjacent ones with one protection sharing a memfd. After it, every
// span has an fd and a file offset. False with errno; memfds of runs converted before a failure
// are known with no use (give_back returns them).
bool convert_spans(State& s, std::vector<Span>& spans) {
  std::vector<page_conversion::Job> jobs;
  for (Span& p : spans) {
    if (p.fd >= 0) continue;
    if (!jobs.empty() && jobs.back().end == p.start && jobs.back().prot == p.prot) {
      jobs.back().end = p.end;
    } else {
      page_conversion::Job j;
      j.start = p.start;
      j.end = p.end;
      j.prot = p.prot;
      jobs.push_back(j);
    }
    p.job = jobs.size() - 1;
  }
  if (jobs.empty()) return true;
  std::vector<Memfd> made(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!make_memfd("softhca-pin", jobs[i].end - jobs[i].start, &made[i])) {
      const int e = errno;
      for (size_t k = 0; k < i; ++k) ::close(made[k].fd);
      errno = e;
      return false;
    }
    jobs[i].fd = made[i].fd;
  }
  const int thread_error = page_conversion::run(jobs);
  int error = thread_error;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (thread_error != 0 || jobs[i].error != 0) {
      ::close(made[i].fd);  // never mapped: the pages stay private
      if (error == 0) error = jobs[i].error;
      continue;
    }
    s.memfds.push_back(made[i]);
  }
  if (error != 0) {
    errno = error;
    return false;
  }
  for (Span& p : spans) {
    if (p.fd >= 0) continue;
    p.fd = jobs[p.job].fd;
    p.file_offset = p.start - jobs[p.job].start;
  }
  return true;
}

// The window's pieces: adjacent spans of one memfd at consecutive offsets make one piece.
std::vector<WindowPiece> pieces_of(const std::vector<Span>& spans, uint64_t base) {
  std::vector<WindowPiece> out;
  for (const Span& p : spans) {
    WindowPiece* last = out.empty() ? nullptr : &out.back();
    if (last != nullptr && last->fd == p.fd && last->file_offset + last->length == p.file_offset) {
      last->length += p.end - p.start;
      continue;
    }
    out.push_back(WindowPiece{p.start - base, p.end - p.start, p.file_offset, p.fd});
  }
  return out;
}

// Reserves the window and maps every piece into it. Null with errno (nothing left mapped).
uint8_t* map_window(uint64_t length, const std::vector<WindowPiece>& pieces, pcie::PinAccess access) {
  void* base = ::mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  const int prot = PROT_READ | (access == pcie::PinAccess::kWrite ? PROT_WRITE : 0);
  for (const WindowPiece& p : pieces) {
    void* at = static_cast<uint8_t*>(base) + p.offset;
    if (::mmap(at, p.length, prot, MAP_SHARED | MAP_FIXED, p.fd, static_cast<off_t>(p.file_offset)) == MAP_FAILED) {
      const int e = errno;
      ::munmap(base, length);
      errno = e;
      return nullptr;
    }
  }
  // The device's view is never a fork child's (docs/live-mode.md, "fork").
  ::madvise(base, length, MADV_DONTFORK);
  return static_cast<uint8_t*>(base);
}

}  // namespace

size_t PinnedPages::page_bytes() {
  static const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return kPage;
}

uint64_t PinnedPages::fork_generation() { return g_fork_generation.load(std::memory_order_relaxed); }

Window PinnedPages::pin(const void* addr, size_t len, pcie::PinAccess access) {
  const auto va = reinterpret_cast<uint64_t>(addr);
  const uint64_t page = page_bytes();
  if (len == 0 || len > UINT64_MAX - 2 * page || va > UINT64_MAX - 2 * page - len) {
    errno = len == 0 ? EINVAL : EFAULT;
    return {};
  }
  const uint64_t start = va / page * page;
  const uint64_t end = (va + len + page - 1) / page * page;
  State& s = state();
  std::lock_guard lock(s.mu);
  std::vector<Span> spans;
  if (!collect_spans(s, start, end, access, &spans)) return {};
  if (!convert_spans(s, spans)) {
    const int e = errno;
    give_back(s);
    errno = e;
    return {};
  }
  Window w;
  w.pieces = pieces_of(spans, start);
  w.length = end - start;
  uint8_t* base = map_window(w.length, w.pieces, access);
  if (base == nullptr) {
    const int e = errno;
    give_back(s);
    errno = e;
    return {};
  }
  w.base = reinterpret_cast<uint64_t>(base);
  w.device = base + (va - start);
  s.windows.push_back(WindowRecord{w.base, w.length});
  for (const WindowPiece& p : w.pieces) {
    if (Memfd* mf = s.memfd_of_fd(p.fd); mf != nullptr) mf->uses += 1;  // every piece's memfd is known
    s.pieces.push_back(PieceRecord{w.base, p});
  }
  return w;
}

bool PinnedPages::unpin(const void* device) {
  const auto at = reinterpret_cast<uint64_t>(device);
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = std::find_if(s.windows.begin(), s.windows.end(),
                         [&](const WindowRecord& w) { return at - w.base < w.length; });
  if (it == s.windows.end()) return false;
  const WindowRecord w = *it;
  s.windows.erase(it);
  ::munmap(reinterpret_cast<void*>(w.base), w.length);
  for (const PieceRecord& p : s.pieces) {
    if (p.window_base != w.base) continue;
    if (Memfd* mf = s.memfd_of_fd(p.piece.fd); mf != nullptr) mf->uses -= 1;
  }
  std::erase_if(s.pieces, [&](const PieceRecord& p) { return p.window_base == w.base; });
  give_back(s);
  return true;
}

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
    if (!make_memfd("softhca-coherent", chunk_bytes, &mf)) return nullptr;
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

PinnedPages::Usage PinnedPages::usage() {
  State& s = state();
  std::lock_guard lock(s.mu);
  Usage u;
  u.memfds = s.memfds.size();
  u.windows = s.windows.size();
  u.coherent_chunks = s.pool.chunks();
  u.coherent_bytes = s.pool.bytes_in_use();
  for (const WindowRecord& w : s.windows) u.window_bytes += w.length;
  return u;
}

}  // namespace softhca::runtime
