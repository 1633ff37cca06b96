// What a process holds of softhca's memfds, as the kernel reports it: open file descriptors
// (/proc/<pid>/fd), mapped bytes (/proc/<pid>/maps) and the pages they hold, of memfds whose name
// starts with a prefix.
// For tests that check that pages are given back. Units: bytes.
#pragma once
#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace softhca::test {

inline constexpr const char* kPinMemfd = "/memfd:softhca-pin";

// Open descriptors of `pid` (0: this process) that are memfds named prefix*.
inline int open_memfds(const std::string& prefix = kPinMemfd, pid_t pid = 0) {
  const std::string dir = "/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(d)) {
    char target[256];
    const std::string link = dir + "/" + e->d_name;
    const ssize_t len = ::readlink(link.c_str(), target, sizeof(target) - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    if (std::string(target).rfind(prefix, 0) == 0) ++n;
  }
  ::closedir(d);
  return n;
}

// Bytes of `pid`'s address space (0: this process) mapped from memfds named prefix*.
inline uint64_t mapped_memfd_bytes(const std::string& prefix = kPinMemfd, pid_t pid = 0) {
  std::ifstream maps("/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/maps");
  uint64_t total = 0;
  std::string line;
  while (std::getline(maps, line)) {
    const size_t path = line.find('/');
    if (path == std::string::npos || line.compare(path, prefix.size(), prefix) != 0) continue;
    unsigned long long start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &start, &end) == 2) total += end - start;
  }
  return total;
}

// Bytes of memory held by the memfds named prefix* that `pid` (0: this process) has open: the pages
// the files hold (their blocks), whatever maps them. A sparse file holds only what was written.
inline uint64_t held_memfd_bytes(const std::string& prefix = kPinMemfd, pid_t pid = 0) {
  const std::string dir = "/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/fd";
  uint64_t total = 0;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string path = dir + "/" + e->d_name;
    char target[256];
    const ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (std::string(target).compare(0, prefix.size(), prefix) != 0) continue;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  ::closedir(d);
  return total;
}

// The maps line that holds `addr` in this process: "" when none.
inline std::string mapping_of(const void* addr) {
  std::ifstream maps("/proc/self/maps");
  const auto a = reinterpret_cast<uintptr_t>(addr);
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &start, &end) == 2 && a >= start && a < end) return line;
  }
  return "";
}

// Whether the page at addr is private memory that no memfd backs (what the application had).
inline bool private_page(const void* addr) {
  const std::string line = mapping_of(addr);
  const size_t perms = line.find(' ');
  return perms != std::string::npos && line.size() > perms + 4 && line[perms + 4] == 'p' &&
         line.find("/memfd:") == std::string::npos;
}

}  // namespace softhca::test
