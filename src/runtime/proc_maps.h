// The lines of /proc/self/maps, read without allocation (the fork child of a multithreaded process
// may call it): start, end, protection, shared flag, file offset, inode, and whether the file is a
// softhca memfd. Leaves out the device numbers and other paths. Units: virtual addresses, bytes.
#pragma once
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace softhca::runtime::proc_maps {

// ---- /proc/self/maps --------------------------------------------------------------------------

inline constexpr std::string_view kOurMemfdPrefix = "/memfd:softhca-";  // the names shared_memory.cc gives

struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;
  uint64_t inode = 0;
  int prot = 0;
  bool shared = false;
  bool ours_by_name = false;  // a memfd named softhca-*: ours if the inode is one of our memfds
};

inline uint64_t parse_number(const char*& p, const char* end, int base) {
  uint64_t v = 0;
  for (; p < end; ++p) {
    int d;
    if (*p >= '0' && *p <= '9') d = *p - '0';
    else if (base == 16 && *p >= 'a' && *p <= 'f') d = *p - 'a' + 10;
    else break;
    v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
  }
  return v;
}

// One line: "start-end perms offset major:minor inode   path".
inline bool parse_mapping(const char* p, const char* end, Mapping* m) {
  m->start = parse_number(p, end, 16);
  if (p >= end || *p++ != '-') return false;
  m->end = parse_number(p, end, 16);
  if (end - p < 6 || *p++ != ' ') return false;
  m->prot = (p[0] == 'r' ? PROT_READ : 0) | (p[1] == 'w' ? PROT_WRITE : 0) | (p[2] == 'x' ? PROT_EXEC : 0);
  m->shared = p[3] == 's';
  p += 5;
  m->offset = parse_number(p, end, 16);
  while (p < end && *p == ' ') ++p;
  while (p < end && *p != ' ') ++p;  // device
  while (p < end && *p == ' ') ++p;
  m->inode = parse_number(p, end, 10);
  while (p < end && *p == ' ') ++p;
  const std::string_view path(p, static_cast<size_t>(end - p));
  m->ours_by_name = path.substr(0, kOurMemfdPrefix.size()) == kOurMemfdPrefix;
  return true;
}

// Calls f(const Mapping&) for every line. Uses only open/read/close and the caller's buffer, so the
// fork child may call it. False with errno when the file cannot be read.
template <class F>
bool for_each_mapping(char* buf, size_t cap, F&& f) {
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t have = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf + have, cap - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      errno = e;
      return false;
    }
    if (n == 0) break;
    have += static_cast<size_t>(n);
    char* line = buf;
    char* const end = buf + have;
    while (char* nl = static_cast<char*>(std::memchr(line, '\n', static_cast<size_t>(end - line)))) {
      Mapping m;
      if (parse_mapping(line, nl, &m)) f(m);
      line = nl + 1;
    }
    have = static_cast<size_t>(end - line);
    std::memmove(buf, line, have);
    if (have == cap) break;  // a line longer than the buffer: cannot happen for maps lines
  }
  ::close(fd);
  return true;
}

}  // namespace softhca::runtime::proc_maps
