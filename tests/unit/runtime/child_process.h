// Helpers of the runtime tests that run peers in forked child processes: bounded pipe I/O, a
// bounded reap that never leaves a child behind, and a bounded wait for one completion.
#pragma once
#include <infiniband/verbs.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace softhca::test {

// Reads exactly len bytes, each read waiting at most timeout_ms; false on timeout, EOF or error.
inline bool read_bounded(int fd, void* buf, size_t len, int timeout_ms) {
  auto* p = static_cast<uint8_t*>(buf);
  while (len > 0) {
    pollfd pf{fd, POLLIN, 0};
    if (::poll(&pf, 1, timeout_ms) != 1) return false;
    const ssize_t n = ::read(fd, p, len);
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

inline bool write_all(int fd, const void* buf, size_t len) {
  return ::write(fd, buf, len) == static_cast<ssize_t>(len);
}

// The child's exit status (128 + signal when a signal ended it), or -1 when it did not end within
// timeout_ms: then it is killed and reaped, never left behind.
inline int reap_bounded(pid_t pid, int timeout_ms) {
  for (int i = 0; i < timeout_ms / 10; ++i) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    ::usleep(10'000);  // polling a child's exit, not synchronising with it
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

// One completion, polled with a deadline: its status, -1 on timeout, -2 on a poll error.
inline int poll_one(ibv_cq* cq, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  ibv_wc wc{};
  while (std::chrono::steady_clock::now() < deadline) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return -2;
    if (n == 1) return wc.status;
  }
  return -1;
}

}  // namespace softhca::test
