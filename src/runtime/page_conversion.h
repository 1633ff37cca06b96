// Changing what backs a run of pages (a memfd's or private ones) without losing a concurrent store:
// the run turns read-only, a writer that faults waits in a SIGSEGV handler and retries. Leaves out
// which runs (pinned_pages.h). Units: virtual addresses and bytes, whole pages.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

namespace softhca::runtime::page_conversion {

enum class Target : uint8_t {
  kMemfd,    // copy the run into `fd` from `offset` and map fd (from there) over it, shared
  kPrivate,  // the run maps `fd` from `offset`: copy that into private anonymous pages mapped there
};

struct Job {
  uint64_t start = 0;  // page-aligned run [start, end)
  uint64_t end = 0;
  int prot = 0;  // the run's protection, kept
  Target target = Target::kMemfd;
  int fd = -1;
  uint64_t offset = 0;  // file offset of start
  int error = 0;        // written only after the run is done (the Job may live in the run)
};

// Runs the jobs on a helper thread while this thread waits on an alternate signal stack (one is
// set up if the thread has none): if this thread's own stack is in a run, its writes fault and the
// kernel needs somewhere to put the signal frame. The helper allocates nothing and writes no memory
// but the record ring (its own page) while a run is read-only. Returns 0 or the errno of creating
// the helper (then no job ran); each job's own error is in its `error`. Installs the SIGSEGV
// handler (once, chaining to the previous handler for every other fault) on first use: ENOMEM when
// that failed.
//
// Limits: another thread whose live stack pointer is inside a run and that has no alternate signal
// stack dies if it faults (the kernel cannot push the signal frame); an application that replaces
// the SIGSEGV handler after the first conversion without chaining breaks the wait; a faulting
// thread that stays descheduled for 256 later conversions is not recognised.
int run(std::span<Job> jobs);

// Writes of any thread that faulted on a run being converted and were retried (process-wide).
[[nodiscard]] uint64_t faults_waited();

// Async-signal-safe (the fork child of a multithreaded process may call it), with no sanitizer
// interception: replaces [start, start + len), which maps memfd `fd` from `offset`, by a private
// copy with protection `prot`. False with errno when it could not (the run is then unchanged).
bool copy_to_private(uint64_t start, size_t len, int prot, int fd, uint64_t offset);

}  // namespace softhca::runtime::page_conversion
