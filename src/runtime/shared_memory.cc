// Converting registered memory to shared memfd pages, publishing them, and mapping peers' pages.
// The mechanism and its limits are in shared_memory.h and docs/live-mode.md.
#include "runtime/shared_memory.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string_view>

#include "pcie/host_bridge.h"
#include "runtime/proc_maps.h"

namespace softhca::runtime {

// ---- RangeTable -------------------------------------------------------------------------------

std::optional<RangeSnapshot> RangeTable::read(uint32_t index) const {
  if (index >= kRangeTableCapacity) return std::nullopt;
  const RangeEntry& e = entries[index];
  RangeSnapshot s;
  s.generation = e.generation.load(std::memory_order_acquire);
  if (s.generation == 0 || (s.generation & 1) != 0) return std::nullopt;
  // Seqlock without fences (TSan does not model them): acquire on each field keeps the second
  // generation load after it, and pairs with the owner's release stores of the fields, so a reader
  // that sees a new field value also sees the owner's odd generation.
  s.va = e.va.load(std::memory_order_acquire);
  s.length = e.length.load(std::memory_order_acquire);
  s.offset = e.offset.load(std::memory_order_acquire);
  s.fd = e.fd.load(std::memory_order_acquire);
  if (e.generation.load(std::memory_order_relaxed) != s.generation) return std::nullopt;
  return s;
}

namespace {

using proc_maps::for_each_mapping;
using proc_maps::Mapping;

size_t page_bytes() {
  static const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return kPage;
}

// ---- Raw system calls -------------------------------------------------------------------------
// The conversion and the fork child bypass the libc wrappers on purpose: the sanitizers intercept
// mmap/mprotect/pread/pwrite and would check or re-poison memory whose contents (and shadow) we
// preserve, or take their own locks while a page of the heap is read-only.

void* sys_mmap(void* addr, size_t len, int prot, int flags, int fd, uint64_t offset) {
  const long r = ::syscall(SYS_mmap, addr, len, prot, flags, fd, offset);
  return r < 0 && r > -4096 ? MAP_FAILED : reinterpret_cast<void*>(r);
}
int sys_mprotect(void* addr, size_t len, int prot) { return static_cast<int>(::syscall(SYS_mprotect, addr, len, prot)); }

// Copies [src, src + len) into fd at offset 0.., or returns false with errno.
bool sys_write_all(int fd, const uint8_t* src, size_t len, uint64_t offset) {
  size_t done = 0;
  while (done < len) {
    const long n = ::syscall(SYS_pwrite64, fd, src + done, len - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}
bool sys_read_all(int fd, uint8_t* dst, size_t len, uint64_t offset) {
  size_t done = 0;
  while (done < len) {
    const long n = ::syscall(SYS_pread64, fd, dst + done, len - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// ---- Conversion records and the SIGSEGV handler -----------------------------------------------
// A conversion makes its run read-only for the time of one copy. A thread that writes there faults
// and the handler must recognise the address without locks or allocation: each conversion takes
// the next record of a ring (kept in its own mmap'd page, never in memory an application could
// register), marks it converting, and done when the shared pages are in place.

constexpr uint32_t kRecords = 256;
// A fault on a run whose conversion already finished is retried: the thread faulted during the
// conversion and its handler ran late. A real fault there (the application made the page read-only
// itself) would retry forever, so such retries are bounded per record: at most one per thread.
constexpr uint32_t kLateRetries = 4096;

enum RecordState : uint32_t { kRecordFree = 0, kRecordConverting = 1, kRecordDone = 2 };
struct ConversionRecord {
  std::atomic<uint64_t> start;
  std::atomic<uint64_t> end;
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> late_retries;
};

ConversionRecord* g_records = nullptr;  // kRecords, set once before the handler is installed
std::atomic<uint32_t> g_next_record{0};
std::atomic<uint64_t> g_faults_waited{0};
struct sigaction g_previous_segv;

// Async-signal-safe: atomics and raw system calls only.
void chain_segv(int sig, siginfo_t* info, void* context) {
  if ((g_previous_segv.sa_flags & SA_SIGINFO) != 0 && g_previous_segv.sa_sigaction != nullptr) {
    g_previous_segv.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous_segv.sa_handler != SIG_DFL && g_previous_segv.sa_handler != SIG_IGN) {
    g_previous_segv.sa_handler(sig);
    return;
  }
  // No handler before ours: restore the default action; returning re-executes the faulting
  // instruction, which now terminates the process as it would have without us.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGSEGV, &dfl, nullptr);
}

void on_segv(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const auto addr = reinterpret_cast<uint64_t>(info->si_addr);
  for (uint32_t i = 0; i < kRecords; ++i) {
    ConversionRecord& r = g_records[i];
    uint32_t state = r.state.load(std::memory_order_acquire);
    if (state == kRecordFree) continue;
    if (addr < r.start.load(std::memory_order_relaxed) || addr >= r.end.load(std::memory_order_relaxed)) continue;
    if (state == kRecordDone && r.late_retries.fetch_add(1, std::memory_order_relaxed) >= kLateRetries) break;
    g_faults_waited.fetch_add(1, std::memory_order_relaxed);
    // Converting: the converter is another thread and finishes without waiting for us.
    while (state == kRecordConverting) {
      ::syscall(SYS_sched_yield);
      state = r.state.load(std::memory_order_acquire);
    }
    errno = saved_errno;
    return;  // the store is retried, into the shared page
  }
  errno = saved_errno;
  chain_segv(sig, info, context);
}

void install_segv_handler() {
  void* page = ::mmap(nullptr, sizeof(ConversionRecord) * kRecords, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return;  // pin() reports it: no record ring
  g_records = static_cast<ConversionRecord*>(page);
  struct sigaction sa {};
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGSEGV, &sa, &g_previous_segv);
}

// ---- Process state ----------------------------------------------------------------------------

struct Memfd {
  int fd = -1;
  uint64_t inode = 0;
};

// A published (or publishable) run: [va, va + length) is memfd `fd` from `offset`.
struct Run {
  uint64_t va = 0;
  uint64_t length = 0;
  uint64_t offset = 0;
  int fd = -1;
  uint64_t inode = 0;
  uint32_t pins = 0;
  int32_t entry = -1;  // index in the bound table, -1 when unpublished
  bool coherent = false;
  [[nodiscard]] bool overlaps(uint64_t s, uint64_t e) const { return va < e && s < va + length; }
};

// The process's converted memory: one per process, never destroyed (the fork handler and the
// conversions outlive any MemoryPublisher). Every member is guarded by mu.
struct ProcessState {
  std::mutex mu;
  std::vector<Memfd> memfds;  // every memfd we created and did not free: fds stay open until exit
  std::vector<Run> runs;
  RangeTable* table = nullptr;
  uint32_t slot = 0;
  uint64_t epoch = 1;  // changes at each bind and in a fork child
  std::vector<uint32_t> free_entries;
  char maps_buf[64 * 1024];

  [[nodiscard]] const Memfd* memfd_of_inode(uint64_t inode) const {
    for (const Memfd& m : memfds)
      if (m.inode == inode) return &m;
    return nullptr;
  }
};

ProcessState& state();

void fork_prepare() { state().mu.lock(); }
void fork_parent() { state().mu.unlock(); }

void write_stderr(const char* msg) {
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, std::strlen(msg));
}

// Replaces [start, end), mapped from memfd fd at offset, by a private copy with protection prot.
// Async-signal-safe (the child of a multithreaded parent).
void privatize(uint64_t start, uint64_t end, int prot, int fd, uint64_t offset) {
  const size_t len = end - start;
  void* copy = sys_mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  const bool ok = copy != MAP_FAILED && sys_read_all(fd, static_cast<uint8_t*>(copy), len, offset) &&
                  sys_mprotect(copy, len, prot) == 0 &&
                  ::syscall(SYS_mremap, copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, start) != -1;
  if (!ok) write_stderr("softhca: fork child keeps registered memory shared with its parent (copy failed)\n");
}

// In the child: every page still mapped from one of our memfds becomes private (copy-on-fork).
void fork_child() {
  ProcessState& s = state();
  struct Piece {
    uint64_t start, end, offset;
    int prot, fd;
  };
  constexpr size_t kBatch = 64;
  Piece batch[kBatch];
  // Stack around this frame: what privatize() and the system calls below may still write.
  constexpr uint64_t kStackMargin = 64 * 1024;
  const auto here = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  bool stack_shared = false;
  for (;;) {
    size_t n = 0;
    bool more = false;
    for_each_mapping(s.maps_buf, sizeof(s.maps_buf), [&](const Mapping& m) {
      if (!m.ours_by_name) return;
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
    for (size_t i = 0; i < n; ++i) privatize(batch[i].start, batch[i].end, batch[i].prot, batch[i].fd, batch[i].offset);
    if (!more) break;
  }
  if (stack_shared) write_stderr("softhca: fork by a thread whose stack is registered: that stack stays shared with the parent\n");
  for (const Memfd& m : s.memfds) ::close(m.fd);
  // clear() keeps the capacity: nothing is freed in the child handler.
  s.memfds.clear();
  s.runs.clear();
  s.free_entries.clear();
  s.table = nullptr;
  ++s.epoch;
  s.mu.unlock();
}

ProcessState& state() {
  // Leaked on purpose: conversions and the fork handler must work until the very end of exit.
  static ProcessState* const s = [] {
    auto* p = new ProcessState;
    install_segv_handler();
    ::pthread_atfork(fork_prepare, fork_parent, fork_child);
    return p;
  }();
  return *s;
}

// ---- Publishing -------------------------------------------------------------------------------

void write_entry(RangeEntry& e, const Run& run) {
  const uint64_t g = e.generation.load(std::memory_order_relaxed);
  const uint64_t odd = (g & 1) != 0 ? g : g + 1;
  e.generation.store(odd, std::memory_order_relaxed);
  // Seqlock writer: release on each field, so a reader that sees a new value sees the odd
  // generation too (RangeTable::read).
  e.va.store(run.va, std::memory_order_release);
  e.length.store(run.length, std::memory_order_release);
  e.offset.store(run.offset, std::memory_order_release);
  e.fd.store(run.fd, std::memory_order_release);
  e.generation.store(odd + 1, std::memory_order_release);  // publish: the fields happen-before
}

bool publish(ProcessState& s, Run& run) {
  if (run.entry >= 0) return true;
  uint32_t index;
  if (!s.free_entries.empty()) {
    index = s.free_entries.back();
    s.free_entries.pop_back();
  } else {
    index = s.table->used.load(std::memory_order_relaxed);
    if (index >= kRangeTableCapacity) {
      errno = ENOMEM;
      return false;
    }
  }
  write_entry(s.table->entries[index], run);
  // `used` after the entry: a reader that sees the new count sees a complete entry or an odd one.
  if (index >= s.table->used.load(std::memory_order_relaxed)) s.table->used.store(index + 1, std::memory_order_release);
  run.entry = static_cast<int32_t>(index);
  return true;
}

void unpublish(ProcessState& s, Run& run) {
  if (run.entry < 0 || s.table == nullptr) return;
  RangeEntry& e = s.table->entries[run.entry];
  // Odd: readers and caches holding the old generation now miss. Release: a peer that sees it
  // also sees that we are done with the range (a later close of the fd comes after).
  e.generation.store(e.generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  s.free_entries.push_back(static_cast<uint32_t>(run.entry));
  run.entry = -1;
}

// Unpublishes and forgets every run overlapping [start, end) except `keep` (index or -1): their
// pages there are no longer theirs (the application unmapped them and mapped something else).
void retire_overlapping(ProcessState& s, uint64_t start, uint64_t end, const Run* keep) {
  for (size_t i = 0; i < s.runs.size();) {
    if (&s.runs[i] != keep && s.runs[i].overlaps(start, end) && !s.runs[i].coherent) {
      unpublish(s, s.runs[i]);
      s.runs.erase(s.runs.begin() + static_cast<std::ptrdiff_t>(i));
      if (keep != nullptr && keep > s.runs.data() + i) --keep;  // erase shifted it down by one
    } else {
      ++i;
    }
  }
}

// ---- Converting private runs ------------------------------------------------------------------

struct Job {
  uint64_t start = 0;
  uint64_t end = 0;
  int prot = 0;
  int fd = -1;
  uint64_t inode = 0;
  int error = 0;  // written only after the run is converted (the Job may live in a converted page)
};

// Converts one run in place. Runs on the helper thread: no allocation, no lock, no write to any
// memory but the record ring (its own page) while the run is read-only.
int convert(Job& job) {
  ConversionRecord& r = g_records[g_next_record.fetch_add(1, std::memory_order_relaxed) % kRecords];
  r.state.store(kRecordFree, std::memory_order_relaxed);
  r.start.store(job.start, std::memory_order_relaxed);
  r.end.store(job.end, std::memory_order_relaxed);
  r.late_retries.store(0, std::memory_order_relaxed);
  // Before the page turns read-only: a thread faulting there must find the record.
  r.state.store(kRecordConverting, std::memory_order_seq_cst);
  void* const at = reinterpret_cast<void*>(job.start);
  const size_t len = job.end - job.start;
  int error = 0;
  if (sys_mprotect(at, len, PROT_READ) != 0) {
    error = errno;
  } else if (!sys_write_all(job.fd, static_cast<const uint8_t*>(at), len, 0)) {
    error = errno != 0 ? errno : EIO;
    sys_mprotect(at, len, job.prot);
  } else if (sys_mmap(at, len, job.prot, MAP_SHARED | MAP_FIXED, job.fd, 0) == MAP_FAILED) {
    error = errno;
    sys_mprotect(at, len, job.prot);
  }
  r.state.store(kRecordDone, std::memory_order_release);  // faulting threads retry their stores now
  return error;
}

struct JobList {
  Job* jobs;
  size_t count;
};

void* convert_all(void* arg) {
  auto* list = static_cast<JobList*>(arg);
  for (size_t i = 0; i < list->count; ++i) {
    const int error = convert(list->jobs[i]);
    list->jobs[i].error = error;  // after the run is shared again: safe even if the Job lives there
  }
  return nullptr;
}

// Runs the conversions on a helper thread while this thread waits on an alternate signal stack:
// if this thread's own stack is being converted, its writes fault and the kernel needs somewhere
// to put the signal frame.
int run_conversions(std::vector<Job>& jobs) {
  constexpr size_t kAltStackBytes = 64 * 1024;  // the handler only spins; chained handlers get room
  stack_t old_stack{};
  ::sigaltstack(nullptr, &old_stack);
  void* own_stack = nullptr;
  if ((old_stack.ss_flags & SS_DISABLE) != 0) {
    own_stack = ::mmap(nullptr, kAltStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (own_stack == MAP_FAILED) return errno;
    stack_t st{};
    st.ss_sp = own_stack;
    st.ss_size = kAltStackBytes;
    ::sigaltstack(&st, nullptr);
  }
  JobList list{jobs.data(), jobs.size()};
  pthread_t helper;
  int error = ::pthread_create(&helper, nullptr, convert_all, &list);
  if (error == 0) ::pthread_join(helper, nullptr);
  if (own_stack != nullptr) {
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    ::sigaltstack(&off, nullptr);
    ::munmap(own_stack, kAltStackBytes);
  }
  return error;  // the jobs' own errors are in jobs[i].error
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
  return true;
}

// ---- pin --------------------------------------------------------------------------------------

// A maps line clipped to the pinned range, classified.
struct Piece {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;  // file offset of start (ours)
  uint64_t inode = 0;
  int prot = 0;
  bool ours = false;
};

// The clipped maps lines covering [start, end): false with errno EFAULT (a hole or unreadable
// page) or EINVAL (shared memory that is not ours).
bool collect_pieces(ProcessState& s, uint64_t start, uint64_t end, std::vector<Piece>* out) {
  int error = 0;
  uint64_t covered = start;
  const bool read = for_each_mapping(s.maps_buf, sizeof(s.maps_buf), [&](const Mapping& m) {
    if (error != 0 || m.end <= start || m.start >= end) return;
    Piece p;
    p.start = std::max(m.start, start);
    p.end = std::min(m.end, end);
    if (p.start != covered) error = EFAULT;  // maps is sorted: a gap before this line
    covered = p.end;
    p.prot = m.prot;
    p.inode = m.inode;
    p.offset = m.offset + (p.start - m.start);
    p.ours = m.shared && m.ours_by_name && s.memfd_of_inode(m.inode) != nullptr;
    if (m.shared && !p.ours) error = EINVAL;
    if (!p.ours && (m.prot & PROT_READ) == 0) error = EFAULT;
    out->push_back(p);
  });
  if (!read) return false;
  if (error == 0 && covered != end) error = EFAULT;
  errno = error;
  return error == 0;
}

// The run that maps piece p (ours), adopting it as a new run when none does.
Run* run_for(ProcessState& s, const Piece& p) {
  for (Run& r : s.runs) {
    if (r.inode == p.inode && r.va <= p.start && p.end <= r.va + r.length &&
        r.offset + (p.start - r.va) == p.offset)
      return &r;
  }
  const Memfd* mf = s.memfd_of_inode(p.inode);
  if (mf == nullptr) return nullptr;  // cannot happen: p.ours was decided by this lookup
  Run r;
  r.va = p.start;
  r.length = p.end - p.start;
  r.offset = p.offset;
  r.fd = mf->fd;
  r.inode = p.inode;
  s.runs.push_back(r);
  return &s.runs.back();
}

// Groups the private pieces into conversion jobs: adjacent pieces with one protection share a memfd.
std::vector<Job> plan_jobs(const std::vector<Piece>& pieces) {
  std::vector<Job> jobs;
  for (const Piece& p : pieces) {
    if (p.ours) continue;
    if (!jobs.empty() && jobs.back().end == p.start && jobs.back().prot == p.prot) {
      jobs.back().end = p.end;
    } else {
      Job j;
      j.start = p.start;
      j.end = p.end;
      j.prot = p.prot;
      jobs.push_back(j);
    }
  }
  return jobs;
}

// Converts the jobs and records their runs. False with errno; jobs converted before a failure stay
// converted (and known), which is harmless.
bool convert_jobs(ProcessState& s, std::vector<Job>& jobs) {
  if (jobs.empty()) return true;
  if (g_records == nullptr) {
    errno = ENOMEM;
    return false;
  }
  for (Job& j : jobs) {
    Memfd mf;
    if (!make_memfd("softhca-pin", j.end - j.start, &mf)) {
      const int e = errno;
      for (Job& k : jobs)
        if (k.fd >= 0) ::close(k.fd);
      errno = e;
      return false;
    }
    j.fd = mf.fd;
    j.inode = mf.inode;
    retire_overlapping(s, j.start, j.end, nullptr);
  }
  const int thread_error = run_conversions(jobs);
  int error = thread_error;
  for (Job& j : jobs) {
    if (thread_error != 0 || j.error != 0) {
      ::close(j.fd);  // never mapped: the pages stay private
      if (error == 0) error = j.error;
      continue;
    }
    s.memfds.push_back(Memfd{j.fd, j.inode});
    Run r;
    r.va = j.start;
    r.length = j.end - j.start;
    r.fd = j.fd;
    r.inode = j.inode;
    s.runs.push_back(r);
  }
  errno = error;
  return error == 0;
}

}  // namespace

// ---- MemoryPublisher --------------------------------------------------------------------------

MemoryPublisher::MemoryPublisher(RangeTable& mine, uint32_t my_slot) : mine_(mine), slot_(my_slot), epoch_(0) {
  ProcessState& s = state();
  std::lock_guard lock(s.mu);
  for (Run& r : s.runs) {
    unpublish(s, r);
    r.pins = 0;
  }
  s.table = &mine;
  s.slot = my_slot;
  s.free_entries.clear();
  // The table may be a reused slot's: whatever it still publishes is not ours.
  const uint32_t used = std::min(mine.used.load(std::memory_order_relaxed), kRangeTableCapacity);
  for (uint32_t i = used; i-- > 0;) {
    RangeEntry& e = mine.entries[i];
    const uint64_t g = e.generation.load(std::memory_order_relaxed);
    if (g != 0 && (g & 1) == 0) e.generation.store(g + 1, std::memory_order_release);
    s.free_entries.push_back(i);
  }
  epoch_ = ++s.epoch;
}

MemoryPublisher::~MemoryPublisher() {
  ProcessState& s = state();
  std::lock_guard lock(s.mu);
  if (s.epoch != epoch_) return;  // inherited across fork, or another publisher took over
  for (Run& r : s.runs) {
    unpublish(s, r);
    r.pins = 0;
  }
  s.table = nullptr;
}

pcie::DmaMemory MemoryPublisher::alloc_coherent(size_t bytes) {
  ProcessState& s = state();
  std::lock_guard lock(s.mu);
  if (s.epoch != epoch_) {
    errno = EPERM;
    return {};
  }
  const size_t page = page_bytes();
  if (bytes > SIZE_MAX - page) {
    errno = ENOMEM;
    return {};
  }
  const size_t rounded = std::max(page, (bytes + page - 1) / page * page);
  Memfd mf;
  if (!make_memfd("softhca-coherent", rounded, &mf)) return {};
  void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, mf.fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    ::close(mf.fd);
    errno = e;
    return {};
  }
  // Driver rings are never shared with a child (docs/live-mode.md, "fork").
  ::madvise(p, rounded, MADV_DONTFORK);
  Run r;
  r.va = reinterpret_cast<uint64_t>(p);
  r.length = rounded;
  r.fd = mf.fd;
  r.inode = mf.inode;
  r.coherent = true;
  if (!publish(s, r)) {
    const int e = errno;
    ::munmap(p, rounded);
    ::close(mf.fd);
    errno = e;
    return {};
  }
  s.memfds.push_back(mf);
  s.runs.push_back(r);
  pcie::DmaMemory m;
  m.data = static_cast<uint8_t*>(p);
  m.size = rounded;
  m.dma_addr = pcie::dma_address(slot_, r.va);
  return m;
}

void MemoryPublisher::free_coherent(const pcie::DmaMemory& memory) {
  if (!memory.valid()) return;
  ProcessState& s = state();
  std::lock_guard lock(s.mu);
  const auto va = reinterpret_cast<uint64_t>(memory.data);
  for (size_t i = 0; i < s.runs.size(); ++i) {
    Run& r = s.runs[i];
    if (!r.coherent || r.va != va) continue;
    unpublish(s, r);  // before the close: a peer that still sees the entry opens the right file
    ::munmap(memory.data, r.length);
    const int fd = r.fd;
    s.runs.erase(s.runs.begin() + static_cast<std::ptrdiff_t>(i));
    s.memfds.erase(std::remove_if(s.memfds.begin(), s.memfds.end(), [&](const Memfd& m) { return m.fd == fd; }),
                   s.memfds.end());
    ::close(fd);
    return;
  }
}

uint64_t MemoryPublisher::pin(const void* addr, size_t len) {
  ProcessState& s = state();
  std::lock_guard lock(s.mu);
  if (s.epoch != epoch_) {
    errno = EPERM;
    return 0;
  }
  const auto va = reinterpret_cast<uint64_t>(addr);
  if (va > pcie::kDmaAddressMask || len > pcie::kDmaAddressMask - va) {
    errno = EINVAL;
    return 0;
  }
  if (len == 0) return pcie::dma_address(slot_, va);
  const uint64_t page = page_bytes();
  const uint64_t start = va / page * page;
  const uint64_t end = (va + len + page - 1) / page * page;

  std::vector<Piece> pieces;
  if (!collect_pieces(s, start, end, &pieces)) return 0;
  std::vector<Job> jobs = plan_jobs(pieces);
  if (!convert_jobs(s, jobs)) return 0;
  // Every page is now in exactly one run; runs over pages that are no longer theirs are retired.
  std::vector<Run*> used;
  for (const Piece& p : pieces) {
    if (!p.ours) continue;
    Run* r = run_for(s, p);
    retire_overlapping(s, p.start, p.end, r);
  }
  for (Run& r : s.runs)
    if (r.overlaps(start, end)) used.push_back(&r);
  for (Run* r : used) {
    if (!publish(s, *r)) return 0;  // pins untouched: the caller sees the failure; runs stay converted
  }
  for (Run* r : used) ++r->pins;
  return pcie::dma_address(slot_, va);
}

void MemoryPublisher::unpin(const void* addr, size_t len) {
  if (len == 0) return;
  ProcessState& s = state();
  std::lock_guard lock(s.mu);
  if (s.epoch != epoch_) return;
  const auto va = reinterpret_cast<uint64_t>(addr);
  const uint64_t page = page_bytes();
  const uint64_t start = va / page * page;
  const uint64_t end = (va + len + page - 1) / page * page;
  for (Run& r : s.runs) {
    if (!r.overlaps(start, end) || r.pins == 0) continue;
    if (--r.pins == 0 && !r.coherent) unpublish(s, r);  // no registration uses it: peers lose it
  }
}

uint64_t MemoryPublisher::faults_waited() { return g_faults_waited.load(std::memory_order_relaxed); }

size_t MemoryPublisher::converted_runs() const {
  ProcessState& s = state();
  std::lock_guard lock(s.mu);
  size_t n = 0;
  for (const Run& r : s.runs) n += r.coherent ? 0 : 1;
  return n;
}

// ---- PeerMemory -------------------------------------------------------------------------------

PeerMemory::PeerMemory(uint32_t my_slot, std::function<const RangeTable*(uint32_t)> table_of,
                       std::function<pid_t(uint32_t)> pid_of)
    : my_slot_(my_slot), table_of_(std::move(table_of)), pid_of_(std::move(pid_of)) {}

PeerMemory::~PeerMemory() {
  for (uint32_t slot = 0; slot < peers_.size(); ++slot) forget(slot);
}

std::span<uint8_t> PeerMemory::map(uint64_t dma_addr, size_t len) {
  const uint32_t slot = pcie::dma_slot(dma_addr);
  const uint64_t va = pcie::dma_va(dma_addr);
  if (slot == my_slot_) return {reinterpret_cast<uint8_t*>(va), len};
  if (slot < peers_.size()) {
    const Peer& peer = peers_[slot];
    for (const Cached& c : peer.cached) {
      if (va - c.va >= c.length) continue;
      if (peer.table->generation(c.index) != c.generation) break;  // republished or gone
      return {c.local + (va - c.va), std::min<uint64_t>(len, c.length - (va - c.va))};
    }
  }
  return map_slow(slot, va, len);
}

std::span<uint8_t> PeerMemory::map_slow(uint32_t slot, uint64_t va, size_t len) {
  if (slot >= peers_.size()) peers_.resize(slot + 1);
  Peer& peer = peers_[slot];
  const RangeTable* table = table_of_(slot);
  if (table != peer.table) {
    forget(slot);
    peer.table = table;
  }
  if (table == nullptr) return {};
  // Drop what the owner no longer publishes.
  std::erase_if(peer.cached, [&](const Cached& c) {
    if (table->generation(c.index) == c.generation) return false;
    ::munmap(c.local, c.length);
    return true;
  });
  const uint32_t used = std::min(table->used.load(std::memory_order_acquire), kRangeTableCapacity);
  for (uint32_t i = 0; i < used; ++i) {
    const std::optional<RangeSnapshot> e = table->read(i);
    if (!e || va - e->va >= e->length) continue;
    const pid_t pid = pid_of_(slot);
    if (pid <= 0) return {};
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", static_cast<int>(pid), e->fd);
    const int fd = ::open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return {};
    // The owner unpublishes before it closes, so an unchanged generation after the open means the
    // fd we opened was the published memfd; the size check keeps a stale range from SIGBUS.
    struct stat st {};
    void* local = MAP_FAILED;
    if (::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= e->offset + e->length)
      local = ::mmap(nullptr, e->length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(e->offset));
    ::close(fd);
    if (local == MAP_FAILED) return {};
    if (table->generation(i) != e->generation) {
      ::munmap(local, e->length);
      return {};  // changed under us: a DMA fault now, the device retries or reports it
    }
    Cached c;
    c.va = e->va;
    c.length = e->length;
    c.generation = e->generation;
    c.index = i;
    c.local = static_cast<uint8_t*>(local);
    peer.cached.push_back(c);
    return {c.local + (va - c.va), std::min<uint64_t>(len, c.length - (va - c.va))};
  }
  return {};
}

void PeerMemory::forget(uint32_t slot) {
  if (slot >= peers_.size()) return;
  Peer& peer = peers_[slot];
  for (const Cached& c : peer.cached) ::munmap(c.local, c.length);
  peer.cached.clear();
  peer.table = nullptr;
}

}  // namespace softhca::runtime
