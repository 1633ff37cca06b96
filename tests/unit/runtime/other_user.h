// Helpers of the tests of the shared boundary (docs/security.md "Files"): a base directory made
// like /dev/shm (sticky, open to all) in the test's temporary directory, and a forked child that
// runs as another user (uid and gid 65534, "nobody") to plant files as an attacker would.
#pragma once
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "child_process.h"

namespace softhca::test {

// The other user: "nobody" on Debian; no account is created or needed.
inline constexpr uid_t kOtherUid = 65534;
// Why a test that plants files as kOtherUid skips when it is not root.
inline constexpr const char* kNeedsRoot = "needs root, to plant files as another user (uid 65534)";
inline constexpr gid_t kOtherGid = 65534;
inline constexpr int kOtherUserWaitMs = 20'000;

// Only root can become another user.
inline bool can_act_as_other_user() { return ::geteuid() == 0; }

// Runs body() in a forked child as kOtherUid/kOtherGid (no supplementary groups). The child's exit
// status: 0 when body() returned true, 1 when it returned false, 2 when the child could not
// become the other user, -1 when it did not end in time.
template <typename Fn>
int as_other_user(Fn&& body) {
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(kOtherGid, kOtherGid, kOtherGid) != 0 ||
        ::setresuid(kOtherUid, kOtherUid, kOtherUid) != 0 || ::geteuid() != kOtherUid) {
      ::_exit(2);
    }
    ::_exit(body() ? 0 : 1);
  }
  return reap_bounded(pid, kOtherUserWaitMs);
}

// A fresh directory standing in for /dev/shm: mode 1777, so the other user may plant entries in
// it but neither of us may remove the other's. Removed, with everything in it, at the end.
class SharedBase {
 public:
  SharedBase() {
    std::string pattern = std::string(::testing::TempDir()) + "softhca-base-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr && ::chmod(pattern.c_str(), 01777) == 0) path_ = pattern;
  }
  ~SharedBase() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);  // removes links, never their targets
  }
  SharedBase(const SharedBase&) = delete;
  SharedBase& operator=(const SharedBase&) = delete;
  // Empty when the directory could not be made.
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Whether an entry of that name exists, a link included (it is not followed).
inline bool file_exists_nofollow(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// The file's bytes, "" when it cannot be read. (POSIX reads: GCC 12 -O3 warns of a null
// dereference inside istreambuf_iterator.)
inline std::string read_whole(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// Writes a new file (or replaces the bytes of an existing one) and sets its mode.
inline bool write_whole(const std::string& path, const std::string& bytes, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return false;
  const bool ok = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  return ::close(fd) == 0 && ok && ::chmod(path.c_str(), mode) == 0;
}

}  // namespace softhca::test
