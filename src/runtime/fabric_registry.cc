#include "runtime/fabric_registry.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "runtime/host_segment.h"
#include "runtime/private_dir.h"

namespace softhca::runtime {

namespace {
constexpr uint64_t kMagic = 0x534f'4654'4843'4148ull;  // "SOFTHCAH"
constexpr uint32_t kVersion = 1;
constexpr int kMaxOpenRetries = 100;
}  // namespace

struct FabricRegistry::Entry {
  char name[kMaxNameChars + 1];  // NUL-terminated; empty: unused entry
  uint8_t reserved_0x41[1];
  uint16_t lid;
  uint32_t ipv4_be;
  uint16_t udp_port;
  uint8_t ipoib_be[4];  // HostAddress::ipoib_be (was reserved: 0 in older files, "not set")
  uint8_t reserved_0x4e[2];
};
static_assert(sizeof(FabricRegistry::Entry) == 80);

struct FabricRegistry::File {
  uint64_t magic;
  uint32_t version;
  uint32_t max_hosts;
  Entry entries[kMaxHosts];
};

FabricRegistry::FabricRegistry(std::string dir, std::string fabric)
    : dir_(std::move(dir)),
      fabric_(std::move(fabric)),
      name_(fabric_ + ".hosts"),
      path_(private_dir_path(dir_, ::geteuid()) + "/" + name_) {}

template <typename Fn>
int FabricRegistry::with_file(bool create, std::string* error, Fn&& fn) const {
  std::string why;
  auto fail = [&](int err) {
    if (error != nullptr) *error = why.empty() ? path_ + ": " + std::strerror(err) : why;
    return err;
  };
  // Opened and checked on every access: the registry says where packets go.
  const std::unique_ptr<PrivateDir> dir = PrivateDir::open(dir_, create, why);
  if (dir == nullptr) return fail(errno);
  int fd = -1;
  for (int attempt = 0;; ++attempt) {
    if (attempt == kMaxOpenRetries) {
      why = "cannot open " + path_ + ": it keeps being removed";
      return fail(EAGAIN);
    }
    fd = dir->open_file(name_, O_RDWR, create, why);
    if (fd < 0) return fail(errno);
    int rc = 0;
    do {
      rc = ::flock(fd, LOCK_EX);
    } while (rc != 0 && errno == EINTR);
    struct stat st {};
    // Unlinked by remove_host between our open and flock: that file is no longer the registry.
    if (rc == 0 && ::fstat(fd, &st) == 0 && st.st_nlink > 0) break;
    ::close(fd);
  }
  auto file = std::make_unique<File>();
  std::memset(file.get(), 0, sizeof(File));
  const ssize_t n = ::pread(fd, file.get(), sizeof(File), 0);
  int err = 0;
  if (n != static_cast<ssize_t>(sizeof(File)) || file->magic != kMagic) {
    if (n > 0 && file->magic == kMagic) {
      err = EPROTO;  // a registry of another layout
    } else {
      std::memset(file.get(), 0, sizeof(File));
      file->magic = kMagic;
      file->version = kVersion;
      file->max_hosts = kMaxHosts;
    }
  } else if (file->version != kVersion || file->max_hosts != kMaxHosts) {
    err = EPROTO;
  }
  if (err == EPROTO) why = path_ + " is a fabric registry of another softhca build";
  if (err == 0 && fn(*dir, *file)) {
    bool empty = true;
    for (const Entry& e : file->entries) empty = empty && e.name[0] == '\0';
    if (empty) {
      dir->remove(name_);
    } else if (::pwrite(fd, file.get(), sizeof(File), 0) != static_cast<ssize_t>(sizeof(File))) {
      err = errno != 0 ? errno : EIO;
    }
  }
  ::close(fd);  // releases the flock
  return err != 0 ? fail(err) : 0;
}

uint16_t FabricRegistry::register_host(const std::string& host, std::string* error) {
  if (!valid_name(host)) {
    if (error != nullptr) *error = "'" + host + "' is not a valid host name";
    errno = EINVAL;
    return 0;
  }
  uint16_t lid = 0;
  const int err = with_file(true, error, [&](const PrivateDir& dir, File& f) {
    bool used[kMaxHosts + 1] = {};
    for (Entry& e : f.entries) {
      if (e.name[0] == '\0') continue;
      if (host == e.name) {
        lid = e.lid;
        return false;
      }
      if (!dir.contains(segment_name(fabric_, e.name))) {
        std::memset(&e, 0, sizeof(e));  // that host has left the fabric
        continue;
      }
      if (e.lid <= kMaxHosts) used[e.lid] = true;
    }
    Entry* free_entry = nullptr;
    for (Entry& e : f.entries) {
      if (e.name[0] == '\0') {
        free_entry = &e;
        break;
      }
    }
    uint16_t next = 1;
    while (next <= kMaxHosts && used[next]) ++next;
    if (free_entry == nullptr || next > kMaxHosts) return true;  // write back the pruning; lid stays 0
    std::memset(free_entry, 0, sizeof(*free_entry));
    std::memcpy(free_entry->name, host.data(), host.size());
    free_entry->lid = next;
    lid = next;
    return true;
  });
  if (err != 0) {
    errno = err;
    return 0;
  }
  if (lid == 0) {
    if (error != nullptr) *error = path_ + ": all " + std::to_string(kMaxHosts) + " hosts of the fabric are taken";
    errno = ENOSPC;
  }
  return lid;
}

int FabricRegistry::set_address(const std::string& host, uint32_t ipv4_be, uint16_t udp_port) {
  bool found = false;
  const int err = with_file(false, nullptr, [&](const PrivateDir&, File& f) {
    for (Entry& e : f.entries) {
      if (e.name[0] != '\0' && host == e.name) {
        e.ipv4_be = ipv4_be;
        e.udp_port = udp_port;
        found = true;
        return true;
      }
    }
    return false;
  });
  return err != 0 ? err : found ? 0 : ENOENT;
}

uint32_t FabricRegistry::claim_ipv4(const std::string& host, uint32_t preferred_be, uint32_t fallback_be,
                                    bool ipoib) {
  uint32_t chosen = 0;
  const auto get = [ipoib](const Entry& e) {
    uint32_t v = e.ipv4_be;
    if (ipoib) std::memcpy(&v, e.ipoib_be, 4);
    return v;
  };
  const auto set = [ipoib](Entry& e, uint32_t v) {
    if (ipoib) {
      std::memcpy(e.ipoib_be, &v, 4);
    } else {
      e.ipv4_be = v;
    }
  };
  const int err = with_file(false, nullptr, [&](const PrivateDir&, File& f) {
    Entry* mine = nullptr;
    bool taken = false;
    for (Entry& e : f.entries) {
      if (e.name[0] == '\0') continue;
      if (host == e.name) {
        mine = &e;
      } else if (get(e) == preferred_be) {
        taken = true;
      }
    }
    if (mine == nullptr) return false;
    if (get(*mine) == 0) set(*mine, taken ? fallback_be : preferred_be);
    chosen = get(*mine);
    return true;
  });
  if (err != 0) errno = err;
  else if (chosen == 0) errno = ENOENT;
  return err != 0 ? 0 : chosen;
}

int FabricRegistry::remove_host(const std::string& host) {
  bool found = false;
  const int err = with_file(false, nullptr, [&](const PrivateDir&, File& f) {
    for (Entry& e : f.entries) {
      if (e.name[0] != '\0' && host == e.name) {
        std::memset(&e, 0, sizeof(e));
        found = true;
      }
    }
    return found;
  });
  return err != 0 ? err : found ? 0 : ENOENT;
}

std::vector<HostAddress> FabricRegistry::hosts() const {
  std::vector<HostAddress> out;
  with_file(false, nullptr, [&](const PrivateDir&, File& f) {
    for (const Entry& e : f.entries) {
      if (e.name[0] == '\0') continue;
      HostAddress h{e.name, e.lid, e.ipv4_be, e.udp_port, 0};
      std::memcpy(&h.ipoib_be, e.ipoib_be, 4);
      out.push_back(std::move(h));
    }
    return false;
  });
  return out;
}

std::optional<HostAddress> FabricRegistry::find_by_lid(uint16_t lid) const {
  for (HostAddress& h : hosts()) {
    if (h.lid == lid) return std::move(h);
  }
  return std::nullopt;
}

std::optional<HostAddress> FabricRegistry::find_by_ipoib(uint32_t ipv4_be) const {
  for (HostAddress& h : hosts()) {
    if (ipv4_be != 0 && h.ipoib_be == ipv4_be) return std::move(h);
  }
  return std::nullopt;
}

std::optional<HostAddress> FabricRegistry::find_by_name(const std::string& host) const {
  for (HostAddress& h : hosts()) {
    if (h.host == host) return std::move(h);
  }
  return std::nullopt;
}

}  // namespace softhca::runtime
