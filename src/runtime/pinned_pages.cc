// Pinned pages and their windows: which runs to convert and where (the pin arena, or a memfd of
// their own), who uses which pages, giving pages back, and the fork child. The mechanism and its
// limits are in pinned_pages.h and docs/live-mode.md; coherent memory is coherent_memory.cc.
#include "runtime/pinned_pages.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "runtime/page_conversion.h"
#include "runtime/pinned_state.h"

namespace softhca::runtime {
namespace pinned {

using proc_maps::for_each_mapping;
using proc_maps::Mapping;

namespace {

// Relaxed: it moves only in a fork child's handler, before the child has any other thread, and is
// read to refuse state made before the fork (MemoryPublisher, PeerMemory).
std::atomic<uint64_t> g_fork_generation{0};

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
  // These free: glibc's fork has made malloc usable again before child handlers run.
  s.pool.reset();
  s.arena.reset();
  if (s.maps_fd >= 0) ::close(s.maps_fd);  // the parent's maps: the child opens its own
  s.maps_fd = -1;
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  s.mu.unlock();
}

}  // namespace

size_t page_size() {
  static const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return kPage;
}

State& state() {
  // Leaked on purpose: conversions and the fork handler must work until the very end of exit.
  static State* const s = [] {
    auto* p = new State(page_size());
    ::pthread_atfork(fork_prepare, fork_parent, fork_child);
    return p;
  }();
  return *s;
}

bool make_memfd(State& s, const char* name, size_t len, Memfd* out) {
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
  s.memfd_dev = st.st_dev;
  return true;
}

namespace {

// ---- Giving pages back ------------------------------------------------------------------------

// Every memfd of its own (outside the arena) nothing uses any more: the application's pages still
// mapped from it become private again, then it is closed. One that could not be given back whole
// stays open (and known, so fork still privatizes it and a later pin uses it as it is); the next
// give_back tries again. Reads the whole of /proc/self/maps, but only when such a memfd is idle.
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

// Whether the file holds any page in [offset, end) (SEEK_DATA: holes read as no data).
bool file_has_data(int fd, uint64_t offset, uint64_t end) {
  const off_t at = ::lseek(fd, static_cast<off_t>(offset), SEEK_DATA);
  return at >= 0 && static_cast<uint64_t>(at) < end;
}

// Ranges of arena chunks no pin uses any more: the application's pages mapped from them become
// private again, then the range is punched out of the chunk (its pages go back to the kernel, and
// the offsets are free for the next conversion). The application's pages are looked for where they
// were when counted (delta): a query of that range alone. Only when some are not there (unmapped,
// or moved by mremap) is the whole of /proc/self/maps read, for mappings of the range anywhere. A
// range that cannot be given back whole stays in use (so nothing else is placed over pages the
// application may still map).
void give_back_idle(State& s, const std::vector<PinArena::Idle>& idle) {
  for (const PinArena::Idle& r : idle) {
    const PinArena::Chunk& c = s.arena.chunk(r.chunk);
    std::vector<page_conversion::Job> jobs;
    uint64_t found = 0;
    // Mapping m maps the range's file pages [lo, hi) (of its own offsets) at lo + m.start - m.offset.
    auto add = [&](const Mapping& m) {
      if (m.inode != c.inode || s.ours(m) == nullptr) return;
      // A view of the whole chunk (the device's own, or a peer's in a process that is both) is no
      // application mapping: the application never had an address of ours to map it by.
      if (m.start - c.view < PinArena::kChunkBytes || (m.offset == 0 && m.end - m.start == PinArena::kChunkBytes)) return;
      const uint64_t lo = std::max(m.offset, r.offset);
      const uint64_t hi = std::min(m.offset + (m.end - m.start), r.end);
      if (lo >= hi) return;
      page_conversion::Job j;
      j.start = m.start + (lo - m.offset);
      j.end = j.start + (hi - lo);
      j.prot = m.prot;
      j.target = page_conversion::Target::kPrivate;
      j.fd = c.fd;
      j.offset = lo;
      jobs.push_back(j);
      found += hi - lo;
    };
    bool read = mappings_in(s, r.offset + r.delta, r.end + r.delta, add);
    // Pages of the range not found where they were counted: unmapped or moved by the application,
    // or never converted (the part of a block beyond the mapping the pin was in). Only data in the
    // file tells them apart, and only then must the whole maps be read.
    bool missing = false;
    if (read && found != r.end - r.offset) {
      std::vector<std::pair<uint64_t, uint64_t>> got;
      for (const page_conversion::Job& j : jobs) got.emplace_back(j.offset, j.offset + (j.end - j.start));
      std::sort(got.begin(), got.end());
      uint64_t at = r.offset;
      for (const auto& [lo, hi] : got) {
        if (lo > at && file_has_data(c.fd, at, lo)) missing = true;
        at = std::max(at, hi);
      }
      if (at < r.end && file_has_data(c.fd, at, r.end)) missing = true;
    }
    if (missing) {
      jobs.clear();
      found = 0;
      read = for_each_mapping(s.maps_buf, sizeof(s.maps_buf), add);
    }
    const int thread_error = read ? page_conversion::run(jobs) : -1;
    const bool whole = thread_error == 0 && std::none_of(jobs.begin(), jobs.end(), [](const page_conversion::Job& j) {
                         return j.error != 0;
                       });
    if (!whole ||
        ::fallocate(c.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(r.offset),
                    static_cast<off_t>(r.end - r.offset)) != 0) {
      s.arena.use(r.chunk, r.offset, r.end, r.delta);  // kept: never placed over again
    }
  }
}

// ---- pin --------------------------------------------------------------------------------------

// A mapping clipped to the pinned range: one of our memfds (fd >= 0, from file_offset; arena >= 0
// when it is a chunk of the arena), or private pages to convert (fd < 0).
struct Span {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t file_offset = 0;
  int prot = 0;
  int fd = -1;
  int arena = -1;
  size_t job = 0;  // fd < 0: the conversion job it is part of
  uint64_t vma_start = 0;  // the mapping it was clipped from
  uint64_t vma_end = 0;
  bool heap = false;  // that mapping is the brk heap
};

// The clipped mappings covering [start, end): false with errno EFAULT (a hole, or a page without
// the access asked for) or EINVAL (shared memory that is not ours).
bool collect_spans(State& s, uint64_t start, uint64_t end, pcie::PinAccess access, std::vector<Span>* out) {
  const int need = PROT_READ | (access == pcie::PinAccess::kWrite ? PROT_WRITE : 0);
  int error = 0;
  auto fail = [&](int e) {
    if (error == 0) error = e;
  };
  uint64_t covered = start;
  const bool read = mappings_in(s, start, end, [&](const Mapping& m) {
    Span p;
    p.start = std::max(m.start, start);
    p.end = std::min(m.end, end);
    p.vma_start = m.start;
    p.vma_end = m.end;
    p.heap = m.heap;
    if (p.start != covered) fail(EFAULT);  // in address order: a gap before this mapping
    covered = p.end;
    p.prot = m.prot;
    if ((m.prot & need) != need) fail(EFAULT);
    if (m.shared) {
      const Memfd* mf = s.ours(m);
      if (mf == nullptr) return fail(EINVAL);
      p.fd = mf->fd;
      p.arena = mf->arena_chunk;
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

// A new chunk of the arena: a sparse memfd and this process's view of all of it (shared, writable,
// MADV_DONTFORK, address space only until pages are converted into it). -1 with errno.
int add_arena_chunk(State& s) {
  Memfd mf;
  if (!make_memfd(s, "softhca-pin", PinArena::kChunkBytes, &mf)) return -1;
  void* view = ::mmap(nullptr, PinArena::kChunkBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, mf.fd, 0);
  if (view == MAP_FAILED) {
    const int e = errno;
    ::close(mf.fd);
    errno = e;
    return -1;
  }
  ::madvise(view, PinArena::kChunkBytes, MADV_DONTFORK);  // the device's view is never a child's
  mf.uses = 1;  // for as long as the process lives
  mf.arena_chunk = static_cast<int32_t>(s.arena.add_chunk(PinArena::Chunk{reinterpret_cast<uint64_t>(view), mf.fd, mf.inode}));
  s.memfds.push_back(mf);
  return mf.arena_chunk;
}

// Converts the private spans, adjacent ones with one protection as one run: into the arena at the
// run's own offset where it fits (a new chunk when every chunk has those offsets in use), else into
// a memfd of its own. After it, every span has an fd and a file offset. The converted arena pages
// are not counted yet: the caller counts them or gives them back. False with errno; memfds of
// runs converted before a failure are known with no use (give_back returns them) and converted
// arena runs are appended to *converted either way.
bool convert_spans(State& s, std::vector<Span>& spans, std::vector<PinArena::Idle>* converted) {
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
  std::vector<int> chunk_of_job(jobs.size(), -1);
  std::vector<Memfd> made(jobs.size());
  auto undo = [&](size_t upto) {
    for (size_t k = 0; k < upto; ++k)
      if (chunk_of_job[k] < 0) ::close(made[k].fd);
  };
  for (size_t i = 0; i < jobs.size(); ++i) {
    const uint64_t len = jobs[i].end - jobs[i].start;
    int c = s.arena.place(jobs[i].start, len, [&](uint32_t chunk, uint64_t off, uint64_t end) {
      return !file_has_data(s.arena.chunk(chunk).fd, off, end);
    });
    // Two runs of one pin never share offsets (they are closer than a chunk), but the count of
    // the first is not in yet: place() would not see it, and need not.
    if (c == PinArena::kNoRoom) c = add_arena_chunk(s);
    if (c >= 0) {
      chunk_of_job[i] = c;
      jobs[i].fd = s.arena.chunk(static_cast<uint32_t>(c)).fd;
      jobs[i].offset = PinArena::offset_for(jobs[i].start);
      continue;
    }
    if (!make_memfd(s, "softhca-pin", len, &made[i])) {
      const int e = errno;
      undo(i);
      errno = e;
      return false;
    }
    jobs[i].fd = made[i].fd;
    jobs[i].offset = 0;
  }
  const int thread_error = page_conversion::run(jobs);
  int error = thread_error;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const bool ok = thread_error == 0 && jobs[i].error == 0;
    if (!ok && error == 0) error = jobs[i].error;
    if (chunk_of_job[i] >= 0) {
      // Not converted: its offsets hold nothing. Converted: the caller counts or gives back.
      if (ok)
        converted->push_back(PinArena::Idle{static_cast<uint32_t>(chunk_of_job[i]), jobs[i].offset,
                                            jobs[i].offset + (jobs[i].end - jobs[i].start),
                                            jobs[i].start - jobs[i].offset});
      continue;
    }
    if (!ok) {
      ::close(made[i].fd);  // never mapped: the pages stay private
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
    p.arena = chunk_of_job[p.job];
    p.file_offset = jobs[p.job].offset + (p.start - jobs[p.job].start);
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
}  // namespace pinned

using pinned::Memfd;
using pinned::State;
using pinned::state;

size_t PinnedPages::page_bytes() { return pinned::page_size(); }

uint64_t PinnedPages::fork_generation() { return pinned::g_fork_generation.load(std::memory_order_relaxed); }

// Off: between fork() and the child's fork handler, pages converted in place are still shared
// with the parent, whose other threads keep running; for a registration's own pages that shares
// only its data for that window, but converted neighbours in the heap carry malloc's headers, and
// a parent thread's malloc then corrupted the child's heap (TwoProcessVerbs.AForkChild...).
constexpr bool kConvertHeapNeighbours = false;

Window PinnedPages::pin(const void* addr, size_t len, pcie::PinAccess access) {
  using namespace pinned;
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
  // With kConvertHeapNeighbours, the private pages around the pin in the brk heap up to its blocks
  // would be converted with it (spans of their own, dropped again after the conversion), so that
  // buffers with malloc's headers between them left one mapping; it is off (above).
  Span below = spans.front();
  below.start = std::max(below.vma_start, PinArena::block_down(start));
  below.end = start;
  const bool low = kConvertHeapNeighbours && below.fd < 0 && below.heap && below.start < below.end;
  Span above = spans.back();
  above.start = end;
  above.end = std::min(above.vma_end, PinArena::block_up(end));
  const bool high = kConvertHeapNeighbours && above.fd < 0 && above.heap && above.start < above.end;
  std::vector<Span> work;
  work.reserve(spans.size() + 2);
  if (low) work.push_back(below);
  for (const Span& p : spans) work.push_back(p);
  if (high) work.push_back(above);
  std::vector<PinArena::Idle> converted;
  const bool ok = convert_spans(s, work, &converted);
  spans.assign(work.begin() + (low ? 1 : 0), work.end() - (high ? 1 : 0));
  if (!ok) {
    const int e = errno;
    give_back_idle(s, converted);
    give_back(s);
    errno = e;
    return {};
  }
  Window w;
  // All in one chunk of the arena at consecutive offsets: the chunk's view is the window.
  const bool in_view = std::all_of(spans.begin(), spans.end(), [&](const Span& p) {
    return p.arena >= 0 && p.arena == spans.front().arena &&
           p.file_offset - spans.front().file_offset == p.start - start;
  });
  if (in_view) {
    const auto c = static_cast<uint32_t>(spans.front().arena);
    const uint64_t off = spans.front().file_offset;
    s.arena.use(c, PinArena::block_down(off), PinArena::block_up(off + (end - start)), start - off);
    const PinArena::Chunk& chunk = s.arena.chunk(c);
    w.base = chunk.view;
    w.length = PinArena::kChunkBytes;
    w.pieces = {WindowPiece{0, PinArena::kChunkBytes, 0, chunk.fd}};
    w.device = reinterpret_cast<uint8_t*>(chunk.view + off + (va - start));
    w.arena_view = true;
    return w;
  }
  w.pieces = pieces_of(spans, start);
  w.length = end - start;
  uint8_t* base = map_window(w.length, w.pieces, access);
  if (base == nullptr) {
    const int e = errno;
    give_back_idle(s, converted);
    give_back(s);
    errno = e;
    return {};
  }
  w.base = reinterpret_cast<uint64_t>(base);
  w.device = base + (va - start);
  s.windows.push_back(WindowRecord{w.base, w.length});
  for (const WindowPiece& p : w.pieces) {
    Memfd* mf = s.memfd_of_fd(p.fd);  // every piece's memfd is known
    if (mf == nullptr) continue;
    if (mf->arena_chunk >= 0) {
      s.arena.use(static_cast<uint32_t>(mf->arena_chunk), PinArena::block_down(p.file_offset),
                  PinArena::block_up(p.file_offset + p.length), start + p.offset - p.file_offset);
    } else {
      mf->uses += 1;
    }
    s.pieces.push_back(PieceRecord{w.base, p});
  }
  return w;
}

bool PinnedPages::unpin(const void* device, size_t len) {
  using namespace pinned;
  const auto at = reinterpret_cast<uint64_t>(device);
  const uint64_t page = page_bytes();
  State& s = state();
  std::lock_guard lock(s.mu);
  std::vector<PinArena::Idle> idle;
  if (const int c = s.arena.chunk_of_view(at); c >= 0) {
    const uint64_t rel = at - s.arena.chunk(static_cast<uint32_t>(c)).view;
    const uint64_t off = rel / page * page;
    if (len == 0 || len > PinArena::kChunkBytes - rel) return false;
    const uint64_t off_end = (rel + len + page - 1) / page * page;
    const uint64_t lo = PinArena::block_down(off), hi = PinArena::block_up(off_end);
    if (!s.arena.in_use(static_cast<uint32_t>(c), lo, hi)) return false;
    s.arena.release(static_cast<uint32_t>(c), lo, hi, &idle);
    give_back_idle(s, idle);
    return true;
  }
  auto it = std::find_if(s.windows.begin(), s.windows.end(),
                         [&](const WindowRecord& w) { return at - w.base < w.length; });
  if (it == s.windows.end()) return false;
  const WindowRecord w = *it;
  s.windows.erase(it);
  ::munmap(reinterpret_cast<void*>(w.base), w.length);
  for (const PieceRecord& p : s.pieces) {
    if (p.window_base != w.base) continue;
    Memfd* mf = s.memfd_of_fd(p.piece.fd);
    if (mf == nullptr) continue;
    if (mf->arena_chunk >= 0) {
      s.arena.release(static_cast<uint32_t>(mf->arena_chunk), PinArena::block_down(p.piece.file_offset),
                      PinArena::block_up(p.piece.file_offset + p.piece.length), &idle);
    } else {
      mf->uses -= 1;
    }
  }
  std::erase_if(s.pieces, [&](const PieceRecord& p) { return p.window_base == w.base; });
  give_back_idle(s, idle);
  give_back(s);
  return true;
}

PinnedPages::Usage PinnedPages::usage() {
  State& s = state();
  std::lock_guard lock(s.mu);
  Usage u;
  u.memfds = s.memfds.size();
  u.windows = s.windows.size();
  for (const pinned::WindowRecord& w : s.windows) u.window_bytes += w.length;
  u.arena_chunks = s.arena.chunks();
  u.arena_bytes = s.arena.bytes_in_use();
  u.coherent_chunks = s.pool.chunks();
  u.coherent_bytes = s.pool.bytes_in_use();
  return u;
}

}  // namespace softhca::runtime
