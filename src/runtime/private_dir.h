// A directory of this user in a shared place (docs/security.md "Files"): <base>/softhca-<euid>,
// made with mode 0700 and checked each time it is opened (a real directory, not a link, owned by
// the effective uid, no access for group or others). Files in it are opened relative to it,
// never through a link, and checked alike (a regular file of this user, no group or other bits,
// at most one link). It leaves out the base beyond one check (nobody else may replace entries in
// it) and never removes the directory itself: it stays, empty, as /run/user/<uid> does.
#pragma once
#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>

namespace softhca::runtime {

// <base>/softhca-<uid>
[[nodiscard]] std::string private_dir_path(const std::string& base, uid_t uid);

// One open, checked private directory. Thread safety: every member is const after open(); the
// directory's descriptor may be used by any thread.
class PrivateDir {
 public:
  // Opens <base>/softhca-<euid>, first making it (mode 0700) when it is missing and `create` is
  // set. Null with errno and `error` set, naming the path and what is wrong: the base or the
  // directory is missing, the base lets another user replace what is in it, the directory is a
  // link or not a directory, belongs to another user or is open to group or others.
  static std::unique_ptr<PrivateDir> open(const std::string& base, bool create, std::string& error);
  ~PrivateDir();
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;

  [[nodiscard]] const std::string& path() const { return path_; }
  // <path>/<name>, for messages.
  [[nodiscard]] std::string path_of(std::string_view name) const;

  // Opens the file `name` (one path component) for O_RDONLY or O_RDWR, never following a link.
  // create: made with mode 0600 when missing (O_EXCL first, then the existing file). The file
  // must be a regular file of this user with no group or other bits and at most one link (0:
  // being removed by another process, which the caller checks under its lock). The descriptor
  // (close-on-exec) or -1 with errno and `error` set.
  [[nodiscard]] int open_file(std::string_view name, int access, bool create, std::string& error) const;
  // Whether an entry of that name exists (a link is not followed).
  [[nodiscard]] bool contains(std::string_view name) const;
  // Removes the entry `name`: 0 or an errno.
  int remove(std::string_view name) const;

 private:
  PrivateDir(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace softhca::runtime
