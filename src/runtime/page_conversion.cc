// Converting runs of pages in place: the record ring the SIGSEGV handler reads, the handler, and
// the helper thread that changes the mappings. The mechanism and its limits are in
// page_conversion.h and docs/live-mode.md.
#include "runtime/page_conversion.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>

namespace softhca::runtime::page_conversion {
namespace {

// ---- Raw system calls -------------------------------------------------------------------------
// The conversion and the fork child bypass the libc wrappers on purpose: the sanitizers intercept
// mmap/mprotect/pread/pwrite and would check or re-poison memory whose contents (and shadow) we
// preserve, or take their own locks while a page of the heap is read-only.

void* sys_mmap(void* addr, size_t len, int prot, int flags, int fd, uint64_t offset) {
  const long r = ::syscall(SYS_mmap, addr, len, prot, flags, fd, offset);
  return r < 0 && r > -4096 ? MAP_FAILED : reinterpret_cast<void*>(r);
}
int sys_mprotect(void* addr, size_t len, int prot) { return static_cast<int>(::syscall(SYS_mprotect, addr, len, prot)); }
int sys_munmap(void* addr, size_t len) { return static_cast<int>(::syscall(SYS_munmap, addr, len)); }

// Copies [src, src + len) into fd from `offset`, or returns false with errno.
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
    if (n == 0) errno = EIO;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// ---- Conversion records and the SIGSEGV handler -----------------------------------------------
// A conversion makes its run read-only for the time of one copy. A thread that writes there faults
// and the handler must recognise the address without locks or allocation: each conversion takes
// the next record of a ring (kept in its own mmap'd page, never in memory an application could
// register), marks it converting, and done when the new pages are in place.

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
    return;  // the store is retried, into the new page
  }
  errno = saved_errno;
  chain_segv(sig, info, context);
}

// The record ring and the handler, once per process (a fork child inherits both).
bool install_segv_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    void* page = ::mmap(nullptr, sizeof(ConversionRecord) * kRecords, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return;  // run() reports it: no record ring
    g_records = static_cast<ConversionRecord*>(page);
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGSEGV, &sa, &g_previous_segv);
  });
  return g_records != nullptr;
}

// ---- Converting one run -----------------------------------------------------------------------

// The run's bytes into job.fd at job.offset, then the file mapped over it from there. Called with the run read-only.
int to_memfd(const Job& job) {
  void* const at = reinterpret_cast<void*>(job.start);
  const size_t len = job.end - job.start;
  if (!sys_write_all(job.fd, static_cast<const uint8_t*>(at), len, job.offset)) return errno != 0 ? errno : EIO;
  if (sys_mmap(at, len, job.prot, MAP_SHARED | MAP_FIXED, job.fd, job.offset) == MAP_FAILED) return errno;
  return 0;
}

// Converts one run in place. Runs on the helper thread: no allocation, no lock, no write to any
// memory but the record ring while the run is read-only.
int convert(const Job& job) {
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
  } else {
    const bool ok = job.target == Target::kMemfd ? (error = to_memfd(job)) == 0
                                                 : copy_to_private(job.start, len, job.prot, job.fd, job.offset);
    if (!ok) {
      if (error == 0) error = errno != 0 ? errno : EIO;
      sys_mprotect(at, len, job.prot);  // unchanged: the old pages, their protection back
    }
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
    list->jobs[i].error = error;  // after the run is writable again: safe even if the Job lives there
  }
  return nullptr;
}

}  // namespace

bool copy_to_private(uint64_t start, size_t len, int prot, int fd, uint64_t offset) {
  void* copy = sys_mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (copy == MAP_FAILED) return false;
  if (sys_read_all(fd, static_cast<uint8_t*>(copy), len, offset) && sys_mprotect(copy, len, prot) == 0 &&
      ::syscall(SYS_mremap, copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, start) != -1)
    return true;
  const int e = errno;
  sys_munmap(copy, len);
  errno = e;
  return false;
}

int run(std::span<Job> jobs) {
  if (jobs.empty()) return 0;
  if (!install_segv_handler()) return ENOMEM;
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
  const int error = ::pthread_create(&helper, nullptr, convert_all, &list);
  if (error == 0) ::pthread_join(helper, nullptr);
  if (own_stack != nullptr) {
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    ::sigaltstack(&off, nullptr);
    ::munmap(own_stack, kAltStackBytes);
  }
  return error;
}

uint64_t faults_waited() { return g_faults_waited.load(std::memory_order_relaxed); }

}  // namespace softhca::runtime::page_conversion
