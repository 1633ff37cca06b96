// The private directory (private_dir.h): what it makes, what it refuses and with which message,
// and that it never follows a link, whoever planted it. Cases that need another user run as root
// only (a forked child becomes uid 65534) and are skipped otherwise.
#include "runtime/private_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <gtest/gtest.h>

#include "other_user.h"

namespace softhca::runtime {
namespace {

using test::as_other_user;
using test::kNeedsRoot;
using test::kOtherUid;
using test::read_whole;
using test::SharedBase;
using test::write_whole;


mode_t mode_of(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? st.st_mode : 0;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string ours(const std::string& base) { return private_dir_path(base, ::geteuid()); }

TEST(PrivateDir, AMissingDirectoryIsMadeOursWithMode0700AndItsFilesWithMode0600EvenUnderATightUmask) {
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  // Expect: a umask that takes the owner's own bits changes neither mode.
  const mode_t old_umask = ::umask(0277);
  std::string error;
  auto dir = PrivateDir::open(base.path(), true, error);
  const int fd = dir != nullptr ? dir->open_file("f", O_RDWR, true, error) : -1;
  ::umask(old_umask);
  ASSERT_NE(dir, nullptr) << error;
  ASSERT_GE(fd, 0) << error;
  ::close(fd);
  EXPECT_EQ(dir->path(), base.path() + "/softhca-" + std::to_string(::geteuid()));
  struct stat st {};
  ASSERT_EQ(::lstat(dir->path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_EQ(mode_of(dir->path_of("f")) & 07777, 0600u);
  // Expect: opened again, the same file (no O_EXCL failure), and the directory passes its checks.
  auto again = PrivateDir::open(base.path(), true, error);
  ASSERT_NE(again, nullptr) << error;
  const int fd2 = again->open_file("f", O_RDWR, true, error);
  EXPECT_GE(fd2, 0) << error;
  ::close(fd2);
}

TEST(PrivateDir, WithoutCreateAMissingDirectoryOrFileIsAnErrorNamingIt) {
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  std::string error;
  errno = 0;
  EXPECT_EQ(PrivateDir::open(base.path(), false, error), nullptr);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_TRUE(contains(error, ours(base.path()))) << error;
  EXPECT_FALSE(test::file_exists_nofollow(ours(base.path())));
  auto dir = PrivateDir::open(base.path(), true, error);
  ASSERT_NE(dir, nullptr) << error;
  EXPECT_EQ(dir->open_file("absent", O_RDONLY, false, error), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_TRUE(contains(error, dir->path_of("absent"))) << error;
}

TEST(PrivateDir, ADirectoryOfOursOpenToOthersIsRefusedLeftAsItIsAndTheMessageSaysToRemoveIt) {
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  const std::string path = ours(base.path());
  ASSERT_EQ(::mkdir(path.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0777), 0);
  std::string error;
  errno = 0;
  EXPECT_EQ(PrivateDir::open(base.path(), true, error), nullptr);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(error, path + " has mode 0777, open to other users: refusing to use it; remove it and softhca makes "
                          "it again (a directory of yours, mode 0700)");
  EXPECT_EQ(mode_of(path) & 07777, 0777u) << "refused, not repaired";
  // Expect: the fix the message gives works.
  ASSERT_EQ(::rmdir(path.c_str()), 0);
  EXPECT_NE(PrivateDir::open(base.path(), true, error), nullptr) << error;
  EXPECT_EQ(mode_of(path) & 07777, 0700u);
}

TEST(PrivateDir, ALinkAtTheDirectorysNameIsRefusedAndNotFollowed) {
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  const std::string target = base.path() + "/elsewhere";
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);  // would pass every check if it were followed
  ASSERT_EQ(::symlink(target.c_str(), ours(base.path()).c_str()), 0);
  std::string error;
  errno = 0;
  EXPECT_EQ(PrivateDir::open(base.path(), true, error), nullptr);
  EXPECT_EQ(errno, ELOOP);
  EXPECT_TRUE(contains(error, ours(base.path()) + " is a symbolic link: refusing to use it; remove it")) << error;
  EXPECT_TRUE(S_ISLNK(mode_of(ours(base.path()))));
}

TEST(PrivateDir, ALinkInsideTheDirectoryIsNotFollowedAndItsTargetIsUntouched) {
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  const std::string victim = base.path() + "/precious";
  ASSERT_TRUE(write_whole(victim, "precious bytes", 0600));
  std::string error;
  auto dir = PrivateDir::open(base.path(), true, error);
  ASSERT_NE(dir, nullptr) << error;
  ASSERT_EQ(::symlink(victim.c_str(), dir->path_of("seg").c_str()), 0);
  for (const bool create : {true, false}) {
    errno = 0;
    EXPECT_EQ(dir->open_file("seg", O_RDWR, create, error), -1);
    EXPECT_EQ(errno, ELOOP);
    EXPECT_TRUE(contains(error, dir->path_of("seg") + " is a symbolic link: refusing to use it")) << error;
  }
  EXPECT_EQ(read_whole(victim), "precious bytes");
  // Expect: contains() and remove() see the link itself: removing it leaves the target.
  EXPECT_TRUE(dir->contains("seg"));
  EXPECT_EQ(dir->remove("seg"), 0);
  EXPECT_FALSE(dir->contains("seg"));
  EXPECT_EQ(read_whole(victim), "precious bytes");
}

TEST(PrivateDir, AFileOpenToOthersOrWithASecondHardLinkIsRefused) {
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  std::string error;
  auto dir = PrivateDir::open(base.path(), true, error);
  ASSERT_NE(dir, nullptr) << error;
  ASSERT_TRUE(write_whole(dir->path_of("wide"), "", 0666));
  errno = 0;
  EXPECT_EQ(dir->open_file("wide", O_RDWR, true, error), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(error, dir->path_of("wide") + " has mode 0666, open to other users: refusing to use it; remove it and "
                                          "softhca makes it again (a file of yours, mode 0600)");
  ASSERT_TRUE(write_whole(dir->path_of("linked"), "", 0600));
  ASSERT_EQ(::link(dir->path_of("linked").c_str(), (base.path() + "/second-name").c_str()), 0);
  EXPECT_EQ(dir->open_file("linked", O_RDONLY, false, error), -1);
  EXPECT_TRUE(contains(error, dir->path_of("linked") + " has 2 hard links")) << error;
}

TEST(PrivateDir, AFifoAtAFilesNameIsRefusedWithoutBlocking) {
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  std::string error;
  auto dir = PrivateDir::open(base.path(), true, error);
  ASSERT_NE(dir, nullptr) << error;
  ASSERT_EQ(::mkfifo(dir->path_of("fifo").c_str(), 0600), 0);
  // Expect: refused at once (a blocking open would wait for a writer forever: the test times out).
  EXPECT_EQ(dir->open_file("fifo", O_RDONLY, false, error), -1);
  EXPECT_TRUE(contains(error, dir->path_of("fifo") + " is not a regular file")) << error;
}

TEST(PrivateDir, ANameThatIsNotOnePathComponentIsRefused) {
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  std::string error;
  auto dir = PrivateDir::open(base.path(), true, error);
  ASSERT_NE(dir, nullptr) << error;
  for (const char* name : {"../escape", "a/b", "", ".", ".."}) {
    errno = 0;
    EXPECT_EQ(dir->open_file(name, O_RDWR, true, error), -1) << name;
    EXPECT_EQ(errno, EINVAL) << name;
  }
  EXPECT_FALSE(test::file_exists_nofollow(base.path() + "/escape"));
}

TEST(PrivateDir, ABaseThatOthersMayWriteAndThatIsNotStickyIsRefused) {
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  ASSERT_EQ(::chmod(base.path().c_str(), 0777), 0);
  std::string error;
  EXPECT_EQ(PrivateDir::open(base.path(), true, error), nullptr);
  EXPECT_EQ(error, base.path() + " has mode 0777 (writable by others, not sticky): they could replace what "
                                 "softhca keeps in it: refusing to keep softhca's files there");
  EXPECT_FALSE(test::file_exists_nofollow(ours(base.path())));
}

TEST(PrivateDir, ADirectoryAnotherUserMadeAtOurNameIsRefusedNamingBothUsers) {
  if (!test::can_act_as_other_user()) GTEST_SKIP() << kNeedsRoot;
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  const std::string path = ours(base.path());
  ASSERT_EQ(as_other_user([&] { return ::mkdir(path.c_str(), 0700) == 0; }), 0);
  std::string error;
  errno = 0;
  EXPECT_EQ(PrivateDir::open(base.path(), true, error), nullptr);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(error, path + " is owned by uid " + std::to_string(kOtherUid) + ", not by you (uid 0): refusing to use "
                          "it; remove it and softhca makes it again (a directory of yours, mode 0700)");
}

TEST(PrivateDir, AFileOfAnotherUserInOurDirectoryIsRefused) {
  if (!test::can_act_as_other_user()) GTEST_SKIP() << kNeedsRoot;
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  std::string error;
  auto dir = PrivateDir::open(base.path(), true, error);
  ASSERT_NE(dir, nullptr) << error;
  ASSERT_TRUE(write_whole(dir->path_of("theirs"), "", 0600));
  ASSERT_EQ(::chown(dir->path_of("theirs").c_str(), kOtherUid, test::kOtherGid), 0);
  EXPECT_EQ(dir->open_file("theirs", O_RDWR, true, error), -1);
  EXPECT_TRUE(contains(error, dir->path_of("theirs") + " is owned by uid " + std::to_string(kOtherUid))) << error;
}

TEST(PrivateDir, ABaseOwnedByAnotherUserIsRefused) {
  if (!test::can_act_as_other_user()) GTEST_SKIP() << kNeedsRoot;
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  const std::string theirs = base.path() + "/theirs";
  ASSERT_EQ(as_other_user([&] { return ::mkdir(theirs.c_str(), 0755) == 0; }), 0);
  std::string error;
  EXPECT_EQ(PrivateDir::open(theirs, true, error), nullptr);
  EXPECT_TRUE(contains(error, theirs + " is owned by uid " + std::to_string(kOtherUid))) << error;
  EXPECT_FALSE(test::file_exists_nofollow(ours(theirs)));
}

}  // namespace
}  // namespace softhca::runtime
