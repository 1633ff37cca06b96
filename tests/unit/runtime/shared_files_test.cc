// The shared boundary of the host segment and the fabric registry (docs/security.md "Files"): each
// attack of the table is played, by another user (a forked child as uid 65534, as root only;
// skipped otherwise) or by ourselves, against a base made like /dev/shm, and must fail without
// touching what it aimed at.
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>

#include <gtest/gtest.h>

#include "other_user.h"
#include "runtime/fabric_registry.h"
#include "runtime/host_segment.h"
#include "runtime/private_dir.h"

namespace softhca::runtime {
namespace {

using test::as_other_user;
using test::kNeedsRoot;
using test::kOtherUid;
using test::read_whole;
using test::SharedBase;
using test::write_whole;


std::string unique_fabric() {
  static std::atomic<int> n{0};
  return "sftest-" + std::to_string(::getpid()) + "-" + std::to_string(n.fetch_add(1));
}

SegmentOptions options_in(const std::string& base, const std::string& fabric) {
  SegmentOptions o;
  o.dir = base;
  o.fabric = fabric;
  o.host = "host0";
  o.device_bytes = size_t{1} << 20;
  o.assign_identity = [](uint16_t& lid, uint64_t& guid, std::string& /*error*/) {
    lid = 1;
    guid = 1;
    return true;
  };
  return o;
}

// Attaches; releases the device lock a formatting attach holds.
std::unique_ptr<HostSegment> attach(const SegmentOptions& o, std::string& error) {
  auto seg = HostSegment::attach(o, error);
  if (seg != nullptr && seg->formatted()) seg->unlock_device();
  return seg;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct stat lstat_of(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) st.st_mode = 0;
  return st;
}

std::string other_uid_text() { return " is owned by uid " + std::to_string(kOtherUid) + ", not by you (uid 0)"; }

TEST(SharedFiles, AttachKeepsTheSegmentInADirectoryOfOursWithMode0700AsAFileOfOursWithMode0600) {
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  const std::string fabric = unique_fabric();
  std::string error;
  auto seg = attach(options_in(base.path(), fabric), error);
  ASSERT_NE(seg, nullptr) << error;
  EXPECT_EQ(seg->path(), segment_path(base.path(), ::geteuid(), fabric, "host0"));
  EXPECT_EQ(seg->path(), private_dir_path(base.path(), ::geteuid()) + "/" + fabric + "@host0");
  const struct stat dir = lstat_of(private_dir_path(base.path(), ::geteuid()));
  EXPECT_TRUE(S_ISDIR(dir.st_mode));
  EXPECT_EQ(dir.st_mode & 07777, 0700u);
  EXPECT_EQ(dir.st_uid, ::geteuid());
  const struct stat file = lstat_of(seg->path());
  EXPECT_TRUE(S_ISREG(file.st_mode));
  EXPECT_EQ(file.st_mode & 07777, 0600u);
  EXPECT_EQ(file.st_uid, ::geteuid());
  // Expect: an observer (softhca stats --live) finds it through the same checked directory.
  auto observer = HostSegment::open_read_only(base.path(), fabric, "host0", error);
  ASSERT_NE(observer, nullptr) << error;
  EXPECT_EQ(observer->lid(), 1);
  const std::string path = seg->path();
  EXPECT_TRUE(seg->detach(true));
  // Expect: the last process removes the file; the directory stays for the next host.
  EXPECT_FALSE(test::file_exists_nofollow(path));
  EXPECT_TRUE(S_ISDIR(lstat_of(private_dir_path(base.path(), ::geteuid())).st_mode));
}

// Row 1: a link planted by another user at the name root would use.
TEST(SharedFiles, ALinkAnotherUserPlantedAtOurDirectorysNameIsRefusedAndWhatItLeadsToIsUntouched) {
  if (!test::can_act_as_other_user()) GTEST_SKIP() << kNeedsRoot;
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  const std::string fabric = unique_fabric();
  // Root's files the links lead to: a directory of root's (it would pass every check if followed)
  // with a file at the segment's name, and a file at the name softhca used before it had a directory.
  const std::string root_dir = base.path() + "/root-only";
  ASSERT_EQ(::mkdir(root_dir.c_str(), 0700), 0);
  const std::string victim = root_dir + "/" + segment_name(fabric, "host0");
  ASSERT_TRUE(write_whole(victim, "root's own file", 0600));
  const std::string old_victim = base.path() + "/root-config";
  ASSERT_TRUE(write_whole(old_victim, "root:x:0:0", 0644));
  const std::string dir = private_dir_path(base.path(), 0);
  const std::string old_name = base.path() + "/softhca-0-" + fabric + "-host0";
  ASSERT_EQ(as_other_user([&] {
              return ::symlink(root_dir.c_str(), dir.c_str()) == 0 &&
                     ::symlink(old_victim.c_str(), old_name.c_str()) == 0;
            }),
            0);
  std::string error;
  errno = 0;
  EXPECT_EQ(attach(options_in(base.path(), fabric), error), nullptr);
  EXPECT_EQ(errno, ELOOP);
  EXPECT_TRUE(contains(error, dir + " is a symbolic link: refusing to use it; remove it")) << error;
  EXPECT_EQ(read_whole(victim), "root's own file");
  EXPECT_EQ(read_whole(old_victim), "root:x:0:0");
  // Expect: once root removes the link (what the message says), attach works and still never
  // opens the old name.
  ASSERT_EQ(::unlink(dir.c_str()), 0);
  auto seg = attach(options_in(base.path(), fabric), error);
  ASSERT_NE(seg, nullptr) << error;
  seg->detach(true);
  EXPECT_EQ(read_whole(victim), "root's own file");
  EXPECT_EQ(read_whole(old_victim), "root:x:0:0");
}

// Row 2: a segment pre-created by another user, open to all, so that it could map root's device.
TEST(SharedFiles, ASegmentAnotherUserMadeForUsIsRefusedAndRootsDeviceNeverGoesIntoIt) {
  if (!test::can_act_as_other_user()) GTEST_SKIP() << kNeedsRoot;
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  const std::string fabric = unique_fabric();
  const std::string dir = private_dir_path(base.path(), 0);
  const std::string planted = dir + "/" + segment_name(fabric, "host0");
  ASSERT_EQ(as_other_user([&] {
              return ::mkdir(dir.c_str(), 0700) == 0 && ::chmod(dir.c_str(), 0777) == 0 &&
                     write_whole(planted, "", 0666);
            }),
            0);
  std::string error;
  errno = 0;
  EXPECT_EQ(attach(options_in(base.path(), fabric), error), nullptr);
  EXPECT_EQ(errno, EPERM);
  EXPECT_TRUE(contains(error, dir + other_uid_text() + ": refusing to use it")) << error;
  EXPECT_EQ(lstat_of(planted).st_size, 0) << "root's device state was written into the other user's file";
  // Expect: a file of the other user's inside a directory of ours is refused just as well.
  std::filesystem::remove_all(dir);
  ASSERT_NE(PrivateDir::open(base.path(), true, error), nullptr) << error;
  ASSERT_TRUE(write_whole(planted, "", 0666));
  ASSERT_EQ(::chown(planted.c_str(), kOtherUid, test::kOtherGid), 0);
  EXPECT_EQ(attach(options_in(base.path(), fabric), error), nullptr);
  EXPECT_TRUE(contains(error, planted + other_uid_text())) << error;
  EXPECT_EQ(lstat_of(planted).st_size, 0);
  // Expect: stats --live refuses to read it too.
  EXPECT_EQ(HostSegment::open_read_only(base.path(), fabric, "host0", error), nullptr);
  EXPECT_TRUE(contains(error, planted + other_uid_text())) << error;
}

// Row 3: a fabric registry pre-created by another user, sending host b's packets to its own port.
TEST(SharedFiles, ARegistryAnotherUserMadeForUsIsNeverReadSoNoHostLeadsToItsPort) {
  if (!test::can_act_as_other_user()) GTEST_SKIP() << kNeedsRoot;
  const std::string fabric = unique_fabric();
  // A registry that works (read back below) and names host b at 127.0.0.1:6666, the other user's.
  SharedBase scratch;
  ASSERT_FALSE(scratch.path().empty());
  FabricRegistry made(scratch.path(), fabric);
  ASSERT_EQ(made.register_host("b"), 1);
  ASSERT_EQ(made.set_address("b", htonl(INADDR_LOOPBACK), 6666), 0);
  const auto made_b = made.find_by_lid(1);
  ASSERT_TRUE(made_b.has_value());
  ASSERT_EQ(made_b->udp_port, 6666);
  const std::string bytes = read_whole(made.path());
  ASSERT_FALSE(bytes.empty());

  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  FabricRegistry registry(base.path(), fabric);
  const std::string dir = private_dir_path(base.path(), 0);
  EXPECT_EQ(registry.path(), dir + "/" + fabric + ".hosts");
  ASSERT_EQ(as_other_user([&] {
              return ::mkdir(dir.c_str(), 0700) == 0 && ::chmod(dir.c_str(), 0777) == 0 &&
                     write_whole(registry.path(), bytes, 0666);
            }),
            0);
  // Expect: no host is found there, and registering says why, naming the directory.
  EXPECT_FALSE(registry.find_by_lid(1).has_value());
  EXPECT_FALSE(registry.find_by_name("b").has_value());
  EXPECT_TRUE(registry.hosts().empty());
  std::string error;
  EXPECT_EQ(registry.register_host("a", &error), 0);
  EXPECT_TRUE(contains(error, dir + other_uid_text())) << error;
  EXPECT_EQ(read_whole(registry.path()), bytes);
  // Expect: the same registry as a file of the other user's in a directory of ours: refused.
  std::filesystem::remove_all(dir);
  ASSERT_NE(PrivateDir::open(base.path(), true, error), nullptr) << error;
  ASSERT_TRUE(write_whole(registry.path(), bytes, 0600));
  ASSERT_EQ(::chown(registry.path().c_str(), kOtherUid, test::kOtherGid), 0);
  EXPECT_FALSE(registry.find_by_lid(1).has_value());
  EXPECT_EQ(registry.register_host("a", &error), 0);
  EXPECT_TRUE(contains(error, registry.path() + other_uid_text())) << error;
  // Expect: a host whose registry is refused is not attached (its identity comes from the registry).
  SegmentOptions o = options_in(base.path(), fabric);
  o.assign_identity = [&registry](uint16_t& lid, uint64_t& guid, std::string& why) {
    lid = registry.register_host("host0", &why);
    guid = lid;
    return lid != 0;
  };
  EXPECT_EQ(attach(o, error), nullptr);
  EXPECT_TRUE(contains(error, registry.path() + other_uid_text())) << error;
  EXPECT_FALSE(test::file_exists_nofollow(segment_path(base.path(), 0, fabric, "host0")));
}

TEST(SharedFiles, AttachDoesNotFollowALinkInsideOurOwnDirectory) {
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  const std::string fabric = unique_fabric();
  const std::string victim = base.path() + "/precious";
  ASSERT_TRUE(write_whole(victim, "precious", 0600));
  std::string error;
  ASSERT_NE(PrivateDir::open(base.path(), true, error), nullptr) << error;
  const std::string path = segment_path(base.path(), ::geteuid(), fabric, "host0");
  ASSERT_EQ(::symlink(victim.c_str(), path.c_str()), 0);
  errno = 0;
  EXPECT_EQ(attach(options_in(base.path(), fabric), error), nullptr);
  EXPECT_EQ(errno, ELOOP);
  EXPECT_TRUE(contains(error, path + " is a symbolic link")) << error;
  EXPECT_EQ(read_whole(victim), "precious");
}

TEST(SharedFiles, AttachRefusesASegmentOfOursThatOthersMayOpenAndADirectoryOfOursOpenToOthers) {
  SharedBase base;
  ASSERT_FALSE(base.path().empty());
  const std::string fabric = unique_fabric();
  const std::string dir = private_dir_path(base.path(), ::geteuid());
  const std::string path = segment_path(base.path(), ::geteuid(), fabric, "host0");
  std::string error;
  ASSERT_NE(PrivateDir::open(base.path(), true, error), nullptr) << error;
  ASSERT_TRUE(write_whole(path, "", 0666));
  EXPECT_EQ(attach(options_in(base.path(), fabric), error), nullptr);
  EXPECT_TRUE(contains(error, path + " has mode 0666, open to other users: refusing to use it; remove it")) << error;
  EXPECT_EQ(lstat_of(path).st_size, 0);
  ASSERT_EQ(::unlink(path.c_str()), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  EXPECT_EQ(attach(options_in(base.path(), fabric), error), nullptr);
  EXPECT_TRUE(contains(error, dir + " has mode 0777, open to other users: refusing to use it; remove it")) << error;
  EXPECT_FALSE(test::file_exists_nofollow(path));
  // Expect: after the fix the message gives, attach works.
  ASSERT_EQ(::rmdir(dir.c_str()), 0);
  auto seg = attach(options_in(base.path(), fabric), error);
  ASSERT_NE(seg, nullptr) << error;
  seg->detach(true);
}

}  // namespace
}  // namespace softhca::runtime
