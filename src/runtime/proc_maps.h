// The lines of /proc/self/maps, read without allocation (the fork child of a multithreaded process
// may call it): start, end, protection, shared flag, file offset, inode, and whether the file is a
// softhca memfd; and the mappings of one range alone through PROCMAP_QUERY (Linux 6.11), with the
// device number instead of the name. Leaves out other paths. Units: virtual addresses, bytes.
#pragma once
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace softhca::runtime::proc_maps {

// ---- /proc/self/maps --------------------------------------------------------------------------

inline constexpr std::string_view kOurMemfdPrefix = "/memfd:softhca-";  // the names pinned_pages.cc and coherent_memory.cc give

struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;
  uint64_t inode = 0;
  int prot = 0;
  bool shared = false;
  bool ours_by_name = false;  // a memfd named softhca-*: ours if the inode is one of our memfds
  uint64_t dev = 0;            // the file's device (PROCMAP_QUERY only; 0 from the text)
  bool heap = false;           // the process's brk heap ("[heap]"): no thread's stack is ever in it
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
  m->heap = path == "[heap]";
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

// ---- PROCMAP_QUERY ---------------------------------------------------------------------------

// struct procmap_query of <linux/fs.h> (Linux 6.11; Debian 12's headers predate it).
struct ProcmapQuery {
  uint64_t size;
  uint64_t query_flags;
  uint64_t query_addr;
  uint64_t vma_start;
  uint64_t vma_end;
  uint64_t vma_flags;
  uint64_t vma_page_size;
  uint64_t vma_offset;  // bytes
  uint64_t inode;
  uint32_t dev_major;
  uint32_t dev_minor;
  uint32_t vma_name_size;
  uint32_t build_id_size;
  uint64_t vma_name_addr;
  uint64_t build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104);
inline constexpr unsigned long kProcmapQuery = 0xc0686611;  // _IOWR('f', 17, struct procmap_query)
inline constexpr uint64_t kQueryReadable = 0x01, kQueryWritable = 0x02, kQueryExecutable = 0x04,
                          kQueryShared = 0x08, kQueryCoveringOrNext = 0x10;

// Calls f(const Mapping&) for every mapping that intersects [start, end), in address order, with
// one ioctl each on maps_fd (an open /proc/self/maps): the cost follows the mappings of the range,
// not of the process. 1 when done; 0 when the kernel has no PROCMAP_QUERY (nothing was called: use
// for_each_mapping); -1 with errno.
template <class F>
int for_each_mapping_in(int maps_fd, uint64_t start, uint64_t end, F&& f) {
  char name[4096];  // PATH_MAX: a shorter buffer fails the query for a long path
  for (uint64_t at = start; at < end;) {
    ProcmapQuery q{};
    q.size = sizeof(q);
    q.query_flags = kQueryCoveringOrNext;
    q.query_addr = at;
    q.vma_name_addr = reinterpret_cast<uint64_t>(name);
    q.vma_name_size = sizeof(name);
    if (::ioctl(maps_fd, kProcmapQuery, &q) != 0) {
      if (errno == ENOENT) return 1;  // no mapping at or above `at`
      if (errno == ENOTTY && at == start) return 0;
      return -1;
    }
    if (q.vma_start >= end) return 1;
    Mapping m;
    m.start = q.vma_start;
    m.end = q.vma_end;
    m.offset = q.vma_offset;
    m.inode = q.inode;
    m.prot = ((q.vma_flags & kQueryReadable) ? PROT_READ : 0) | ((q.vma_flags & kQueryWritable) ? PROT_WRITE : 0) |
             ((q.vma_flags & kQueryExecutable) ? PROT_EXEC : 0);
    m.shared = (q.vma_flags & kQueryShared) != 0;
    m.dev = q.inode != 0 ? makedev(q.dev_major, q.dev_minor) : 0;
    m.heap = q.vma_name_size > 0 && std::string_view(name, std::strlen(name)) == "[heap]";
    f(m);
    at = q.vma_end;
  }
  return 1;
}

}  // namespace softhca::runtime::proc_maps
