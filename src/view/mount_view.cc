#include "view/mount_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "view/sysfs_tree.h"

namespace softhca::view {

namespace fs = std::filesystem;

namespace {

std::string failed(const std::string& what) { return what + ": " + std::strerror(errno); }

bool write_proc(const char* path, const std::string& text, std::string& error) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    error = failed(std::string("cannot write ") + path);
    if (fd >= 0) ::close(fd);
    return false;
  }
  ::close(fd);
  return true;
}

// A mount namespace of our own; without the right to mount here, inside a user namespace that maps
// our uid and gid to themselves.
bool unshare_mounts(std::string& error) {
  if (::unshare(CLONE_NEWNS) == 0) return true;
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
    error = failed("cannot make a mount namespace (unprivileged user namespaces may be disabled)");
    return false;
  }
  return write_proc("/proc/self/setgroups", "deny", error) &&
         write_proc("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1", error) &&
         write_proc("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1", error);
}

bool overlay(const fs::path& fake, const char* target, std::string& error) {
  std::error_code ec;
  if (!fs::is_directory(fake, ec)) return true;  // nothing of ours there
  const std::string opts = "lowerdir=" + fake.string() + ":" + target;
  if (::mount("overlay", target, "overlay", MS_RDONLY, opts.c_str()) != 0) {
    error = failed(std::string("cannot overlay ") + target);
    return false;
  }
  return true;
}

// /dev as it was plus infiniband/uverbs<N>: a tmpfs over /dev that every original entry is bound
// back into (from a recursive bind of the old /dev kept aside), so /dev/shm, /dev/pts and the
// device nodes are the machine's.
bool rebuild_dev(const fs::path& stash, size_t devices, std::string& error) {
  if (::mkdir(stash.c_str(), 0700) != 0 || ::mount("/dev", stash.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    error = failed("cannot keep /dev aside");
    return false;
  }
  if (::mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "mode=0755") != 0) {
    error = failed("cannot mount a tmpfs on /dev");
    return false;
  }
  DIR* dir = ::opendir(stash.c_str());
  if (dir == nullptr) {
    error = failed("cannot list " + stash.string());
    return false;
  }
  bool ok = true;
  while (dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string from = (stash / name).string();
    const std::string to = "/dev/" + name;
    struct stat st {};
    if (::lstat(from.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      const ssize_t n = ::readlink(from.c_str(), target, sizeof(target) - 1);
      if (n > 0) {
        target[n] = '\0';
        ok = ::symlink(target, to.c_str()) == 0 && ok;
      }
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      ok = ::mkdir(to.c_str(), st.st_mode & 07777) == 0 && ok;
    } else {
      const int fd = ::open(to.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
      ok = fd >= 0 && ok;
      if (fd >= 0) ::close(fd);
    }
    if (::mount(from.c_str(), to.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
      // An entry we may not bind (rare) is left out rather than failing the whole view.
      std::fprintf(stderr, "softhca run: /dev/%s is not in the device view: %s\n", name.c_str(), std::strerror(errno));
    }
  }
  ::closedir(dir);
  if (!ok) {
    error = failed("cannot rebuild /dev");
    return false;
  }
  if (::mkdir("/dev/infiniband", 0755) != 0) {
    error = failed("cannot make /dev/infiniband");
    return false;
  }
  // Not rdma_cm: the system librdmacm would open it and talk to a kernel that is not there.
  for (size_t i = 0; i < devices; ++i) {
    const std::string node = "/dev/infiniband/uverbs" + std::to_string(i);
    const int fd = ::open(node.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
    if (fd >= 0) ::close(fd);
    if (fd < 0 || ::mount("/dev/null", node.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      error = failed("cannot make " + node);
      return false;
    }
  }
  ::umount2(stash.c_str(), MNT_DETACH);
  return true;
}

}  // namespace

bool enter_device_view(const std::vector<DeviceFacts>& devices, std::string& error) {
  if (!unshare_mounts(error)) return false;
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    error = failed("cannot make the mounts private");
    return false;
  }
  // Scratch space that exists only in this namespace: a tmpfs over a fresh directory of /tmp.
  char scratch_template[] = "/tmp/softhca-view-XXXXXX";
  const char* scratch = ::mkdtemp(scratch_template);
  if (scratch == nullptr) {
    error = failed("cannot make a scratch directory in /tmp");
    return false;
  }
  const fs::path root = scratch;
  struct Cleanup {
    const char* dir;
    ~Cleanup() {
      ::umount2(dir, MNT_DETACH);  // the overlays keep their layers
      ::rmdir(dir);
    }
  } cleanup{scratch};
  if (::mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) {
    error = failed("cannot mount a tmpfs on " + root.string());
    return false;
  }
  const fs::path tree = root / "sys";
  std::error_code ec;
  fs::create_directories(tree, ec);
  if (!write_sysfs_tree(tree, devices, error)) return false;
  // Not /sys/bus/pci/devices: libpci (perftest's PCIe checks) lists the functions there and would
  // want config space and resources a plain file cannot give; stacks reach the function through
  // the device's `device` link under /sys/devices instead.
  return overlay(tree / "class", "/sys/class", error) && overlay(tree / "devices", "/sys/devices", error) &&
         rebuild_dev(root / "dev", devices.size(), error);
}

}  // namespace softhca::view
