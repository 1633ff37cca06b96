// Job-control stops held back across the device lock (stop_deferral.h). One word of state: how many
// threads of this process are in the device (holding or waiting for its lock: the low 16 bits) and
// one pending bit per stop signal. The handler and device_exited() change it only by atomic
// read-modify-writes, so a stop is carried out exactly once: by the handler when no thread is in
// the device, else by the last thread to leave it.
#include "runtime/stop_deferral.h"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <mutex>

namespace softhca::runtime {

namespace {

constexpr int kStopSignals[] = {SIGTSTP, SIGTTIN, SIGTTOU};
constexpr unsigned kThread = 1u;
constexpr unsigned kThreadMask = 0xffffu;
constexpr unsigned pending_bit(int index) { return 0x10000u << index; }

std::atomic<unsigned> g_state{0};
std::atomic<unsigned long> g_deferred{0};
static_assert(std::atomic<unsigned>::is_always_lock_free, "used from a signal handler");

void on_stop_signal(int sig);

void take_over(int sig) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(sig, &sa, nullptr);
}

// Stops the process as the default action would, then takes the signal over again once continued.
// Async-signal-safe: sigaction, sigprocmask and raise are.
void stop_now(int sig) {
  const int saved_errno = errno;
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  sigset_t only{};
  sigset_t old{};
  sigemptyset(&only);
  sigaddset(&only, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &only, &old);  // inside the handler the signal is blocked
  ::raise(sig);  // the process stops here, and goes on when continued (SIGCONT)
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  take_over(sig);
  errno = saved_errno;
}

int index_of(int sig) {
  for (int i = 0; i < 3; ++i)
    if (kStopSignals[i] == sig) return i;
  return -1;
}

void on_stop_signal(int sig) {
  const int i = index_of(sig);
  if (i < 0) return;
  unsigned s = g_state.load(std::memory_order_relaxed);
  while ((s & kThreadMask) != 0) {
    if (g_state.compare_exchange_weak(s, s | pending_bit(i), std::memory_order_relaxed)) return;  // later
  }
  stop_now(sig);
}

}  // namespace

void install_stop_deferral() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const int sig : kStopSignals) {
      struct sigaction cur {};
      if (::sigaction(sig, nullptr, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) == 0 && cur.sa_handler == SIG_DFL)
        take_over(sig);
    }
  });
}

// Relaxed: the state is this process's own, read and written only by its threads and its handler;
// the device lock orders everything the device does.
void device_entered() { g_state.fetch_add(kThread, std::memory_order_relaxed); }

void device_exited() {
  unsigned was = g_state.load(std::memory_order_relaxed);
  unsigned now = 0;
  do {
    // The last thread out takes the pending stops with it.
    now = (was & kThreadMask) == kThread ? 0 : was - kThread;
  } while (!g_state.compare_exchange_weak(was, now, std::memory_order_relaxed));
  if (now != 0 || (was & ~kThreadMask) == 0) return;
  for (int i = 0; i < 3; ++i) {
    if ((was & pending_bit(i)) == 0) continue;
    g_deferred.fetch_add(1, std::memory_order_relaxed);
    ::raise(kStopSignals[i]);  // the handler sees no thread in the device and stops now
  }
}

unsigned long stops_deferred() { return g_deferred.load(std::memory_order_relaxed); }

}  // namespace softhca::runtime
