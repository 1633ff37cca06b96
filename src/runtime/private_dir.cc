#include "runtime/private_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace softhca::runtime {

namespace {

constexpr mode_t kDirMode = S_IRWXU;             // 0700
constexpr mode_t kFileMode = S_IRUSR | S_IWUSR;  // 0600
constexpr mode_t kGroupOtherBits = S_IRWXG | S_IRWXO;
// Create-or-open retries when another process of ours removes the file between the two opens.
constexpr int kMaxOpenRetries = 100;

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

enum class Kind { kDirectory, kFile };

// What makes an entry unfit to hold softhca's state, "" when nothing does. `st` is from fstat of
// an open descriptor (what we would use) or, to explain a failed open, from lstat.
std::string what_is_wrong(const struct stat& st, Kind kind) {
  const uid_t me = ::geteuid();
  if (S_ISLNK(st.st_mode)) return "is a symbolic link";
  if (kind == Kind::kDirectory && !S_ISDIR(st.st_mode)) return "is not a directory";
  if (kind == Kind::kFile && !S_ISREG(st.st_mode)) return "is not a regular file";
  if (st.st_uid != me) {
    return "is owned by uid " + std::to_string(st.st_uid) + ", not by you (uid " + std::to_string(me) + ")";
  }
  if ((st.st_mode & kGroupOtherBits) != 0) return "has mode " + octal_mode(st.st_mode) + ", open to other users";
  // One link: nobody reaches the same inode by another name (a hard link made elsewhere).
  if (kind == Kind::kFile && st.st_nlink > 1) return "has " + std::to_string(st.st_nlink) + " hard links";
  return {};
}

// The refusal, with how to fix it: softhca makes the entry again, as it should be, once it is gone.
std::string refusal(const std::string& path, const std::string& wrong, Kind kind) {
  return path + " " + wrong + ": refusing to use it; remove it and softhca makes it again (" +
         (kind == Kind::kDirectory ? "a directory of yours, mode 0700)" : "a file of yours, mode 0600)");
}

int refusal_errno(const std::string& wrong) { return wrong == "is a symbolic link" ? ELOOP : EPERM; }

bool one_component(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

// The base may hold other users' entries (/dev/shm does), but nobody else may remove or rename
// ours there: it is not writable by others, or it is sticky, and it belongs to root or to us.
std::string base_is_unfit(const struct stat& st) {
  const uid_t me = ::geteuid();
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != 0 && st.st_uid != me) {
    return "is owned by uid " + std::to_string(st.st_uid) + ", who could replace what softhca keeps in it";
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return "has mode " + octal_mode(st.st_mode) +
           " (writable by others, not sticky): they could replace what softhca keeps in it";
  }
  return {};
}

}  // namespace

std::string private_dir_path(const std::string& base, uid_t uid) { return base + "/softhca-" + std::to_string(uid); }

std::unique_ptr<PrivateDir> PrivateDir::open(const std::string& base, bool create, std::string& error) {
  const int base_fd = ::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (base_fd < 0) {
    const int err = errno;
    error = "cannot open " + base + ": " + std::strerror(err);
    errno = err;
    return nullptr;
  }
  const std::string name = "softhca-" + std::to_string(::geteuid());
  const std::string path = private_dir_path(base, ::geteuid());
  auto fail = [&](int err, std::string message) {
    ::close(base_fd);
    error = std::move(message);
    errno = err;
    return nullptr;
  };
  struct stat st {};
  if (::fstat(base_fd, &st) != 0) return fail(errno, "cannot stat " + base + ": " + std::strerror(errno));
  if (const std::string wrong = base_is_unfit(st); !wrong.empty()) {
    return fail(EPERM, base + " " + wrong + ": refusing to keep softhca's files there");
  }
  bool made = false;
  if (create) {
    if (::mkdirat(base_fd, name.c_str(), kDirMode) == 0) {
      made = true;
    } else if (errno != EEXIST) {
      return fail(errno, "cannot make " + path + ": " + std::strerror(errno));
    }
  }
  const int fd = ::openat(base_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    struct stat lst {};
    if (::fstatat(base_fd, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0) {
      if (const std::string wrong = what_is_wrong(lst, Kind::kDirectory); !wrong.empty()) {
        return fail(refusal_errno(wrong), refusal(path, wrong, Kind::kDirectory));
      }
    }
    return fail(err, "cannot open " + path + ": " + std::strerror(err));
  }
  ::close(base_fd);
  std::string wrong = ::fstat(fd, &st) == 0 ? what_is_wrong(st, Kind::kDirectory) : "cannot be examined";
  if (!wrong.empty()) {
    ::close(fd);
    error = refusal(path, wrong, Kind::kDirectory);
    errno = refusal_errno(wrong);
    return nullptr;
  }
  // A umask that takes the owner's own bits must not leave a directory we cannot use.
  if (made) (void)::fchmod(fd, kDirMode);
  return std::unique_ptr<PrivateDir>(new PrivateDir(fd, path));
}

PrivateDir::~PrivateDir() { ::close(fd_); }

std::string PrivateDir::path_of(std::string_view name) const { return path_ + "/" + std::string(name); }

int PrivateDir::open_file(std::string_view name, int access, bool create, std::string& error) const {
  const std::string n(name);
  if (!one_component(name) || (access != O_RDONLY && access != O_RDWR)) {
    error = "cannot open '" + n + "' in " + path_ + ": not a plain file name";
    errno = EINVAL;
    return -1;
  }
  // O_NONBLOCK: a FIFO left at the name must not block the open (it is refused below).
  const int flags = access | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  int fd = -1;
  bool made = false;
  for (int attempt = 0; fd < 0; ++attempt) {
    if (attempt == kMaxOpenRetries) {
      error = "cannot open " + path_of(name) + ": it keeps being removed";
      errno = EAGAIN;
      return -1;
    }
    if (create) {
      fd = ::openat(fd_, n.c_str(), flags | O_CREAT | O_EXCL, kFileMode);
      if (fd >= 0) {
        made = true;
        break;
      }
      if (errno != EEXIST) break;
    }
    fd = ::openat(fd_, n.c_str(), flags);
    if (fd < 0 && (!create || errno != ENOENT)) break;  // ENOENT after EEXIST: removed meanwhile, again
  }
  if (fd < 0) {
    const int err = errno;
    struct stat lst {};
    if (::fstatat(fd_, n.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0) {
      if (const std::string wrong = what_is_wrong(lst, Kind::kFile); !wrong.empty()) {
        error = refusal(path_of(name), wrong, Kind::kFile);
        errno = refusal_errno(wrong);
        return -1;
      }
    }
    error = "cannot open " + path_of(name) + ": " + std::strerror(err);
    errno = err;
    return -1;
  }
  struct stat st {};
  const std::string wrong = ::fstat(fd, &st) == 0 ? what_is_wrong(st, Kind::kFile) : "cannot be examined";
  if (!wrong.empty()) {
    ::close(fd);
    error = refusal(path_of(name), wrong, Kind::kFile);
    errno = refusal_errno(wrong);
    return -1;
  }
  if (made) (void)::fchmod(fd, kFileMode);  // whatever the umask took
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

bool PrivateDir::contains(std::string_view name) const {
  if (!one_component(name)) return false;
  struct stat st {};
  return ::fstatat(fd_, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

int PrivateDir::remove(std::string_view name) const {
  if (!one_component(name)) return EINVAL;
  return ::unlinkat(fd_, std::string(name).c_str(), 0) == 0 ? 0 : errno;
}

}  // namespace softhca::runtime
