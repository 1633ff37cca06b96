// The shared runtime across real processes (fork): one device per host whose objects belong to the
// process that made them, reclaimed when that process leaves or dies; the host segment and the
// registry entry go with the host's last process. Commands go straight to the device interface.
#include "child_process.h"
#include "runtime/shared_runtime.h"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>

#include <gtest/gtest.h>

#include "hwif/cmd.h"
#include "runtime/fabric_registry.h"

namespace softhca::runtime {
namespace {

constexpr int kWaitMs = 20'000;  // bound of every wait on a child

std::string unique_fabric() {
  static std::atomic<int> n{0};
  return "hcrt-" + std::to_string(::getpid()) + "-" + std::to_string(n.fetch_add(1));
}

SharedRuntimeOptions options_for(const std::string& fabric, const std::string& host = "host0") {
  SharedRuntimeOptions o;
  o.names.fabric = fabric;
  o.names.host = host;
  o.udp = false;
  return o;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

uint32_t alloc_pd(Runtime& rt) {
  hwif::AllocPdOut out;
  return hwif::exec_cmd(rt.devices()[0]->commands(), hwif::AllocPdIn{}, out) == 0 ? out.pdn : 0;
}

// A CQ whose ring and doorbell record come from the host kernel (shared memory of this process).
uint32_t create_cq(Runtime& rt) {
  pcie::HostKernel& k = rt.devices()[0]->kernel();
  const pcie::DmaMemory ring = k.alloc_coherent(64 * 8);
  const pcie::DmaMemory dbrec = k.alloc_coherent(64);
  if (!ring.valid() || !dbrec.valid()) return 0;
  for (size_t i = 0; i < 8; ++i) ring.data[i * 64 + 63] = 0xf0;  // op_own: owned by hardware
  hwif::CreateCqIn in;
  in.ring_addr = ring.dma_addr;
  in.dbrec_addr = dbrec.dma_addr;
  in.log_nent = 3;
  hwif::CreateCqOut out;
  return hwif::exec_cmd(rt.devices()[0]->commands(), in, out) == 0 ? out.cqn : 0;
}

struct Child {
  pid_t pid = -1;
  int from_child = -1;
  int to_child = -1;
  mutable bool reaped = false;
  int next() const {
    pollfd p{from_child, POLLIN, 0};
    if (::poll(&p, 1, kWaitMs) != 1) return -1;
    uint8_t b = 0;
    return ::read(from_child, &b, 1) == 1 ? b : -1;
  }
  void go() const {
    const uint8_t b = 1;
    (void)!::write(to_child, &b, 1);
  }
  int reap() const {
    reaped = true;
    return softhca::test::reap_bounded(pid, kWaitMs);
  }
  // A child a failed assertion left running is killed, never orphaned.
  ~Child() {
    if (pid > 0 && !reaped) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// body(send, wait_go) runs in the child; its return value is the exit status.
template <typename Fn>
Child spawn(Fn&& body) {
  int up[2];
  int down[2];
  EXPECT_EQ(::pipe(up), 0);
  EXPECT_EQ(::pipe(down), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(up[0]);
    ::close(down[1]);
    auto send = [fd = up[1]](uint8_t b) { (void)!::write(fd, &b, 1); };
    auto wait_go = [fd = down[0]] {
      pollfd p{fd, POLLIN, 0};
      uint8_t b = 0;
      return ::poll(&p, 1, kWaitMs) == 1 && ::read(fd, &b, 1) == 1;
    };
    ::_exit(body(send, wait_go));
  }
  ::close(up[1]);
  ::close(down[0]);
  return Child{pid, up[0], down[1]};
}

TEST(SharedRuntime, TwoProcessesOfAHostShareOneDeviceAndEachOwnsItsObjects) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto rt = SharedRuntime::create(options_for(fabric), error);
  ASSERT_NE(rt, nullptr) << error;
  EXPECT_EQ(rt->slot(), 1u);
  EXPECT_EQ(rt->lid(), 1);
  ASSERT_EQ(rt->devices().size(), 1u);
  EXPECT_EQ(rt->devices()[0]->name(), "softhca_0");
  ASSERT_NE(alloc_pd(*rt), 0u);
  ASSERT_NE(create_cq(*rt), 0u);
  const hca::Device::ObjectCounts before = rt->object_counts();

  Child c = spawn([&](auto send, auto wait_go) {
    std::string e;
    auto mine = SharedRuntime::create(options_for(fabric), e);
    if (mine == nullptr) return 10;
    if (mine->slot() != 2 || mine->lid() != 1) return 11;
    if (alloc_pd(*mine) == 0 || alloc_pd(*mine) == 0 || create_cq(*mine) == 0) return 12;
    send(1);
    if (!wait_go()) return 13;
    mine->detach();  // an orderly exit: its objects go with it
    send(2);
    return 0;
  });
  ASSERT_EQ(c.next(), 1);
  // Expect: the child's two PDs and its CQ are on the same device.
  hca::Device::ObjectCounts shared = rt->object_counts();
  EXPECT_EQ(shared.pds, before.pds + 2);
  EXPECT_EQ(shared.cqs, before.cqs + 1);
  c.go();
  ASSERT_EQ(c.next(), 2);
  EXPECT_EQ(c.reap(), 0);
  EXPECT_EQ(rt->object_counts(), before);
  const std::string path = rt->segment_path();
  EXPECT_TRUE(file_exists(path));
  rt->detach();
  EXPECT_FALSE(file_exists(path));
  // Expect: after detach the device refuses commands instead of touching a device it left.
  hwif::AllocPdOut out;
  EXPECT_EQ(hwif::exec_cmd(rt->devices()[0]->commands(), hwif::AllocPdIn{}, out), EIO);
}

TEST(SharedRuntime, AKilledProcessObjectsAreReclaimedAndTheLastProcessRemovesTheHost) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto rt = SharedRuntime::create(options_for(fabric), error);
  ASSERT_NE(rt, nullptr) << error;
  const hca::Device::ObjectCounts before = rt->object_counts();
  Child c = spawn([&](auto send, auto /*wait_go*/) {
    std::string e;
    auto mine = SharedRuntime::create(options_for(fabric), e);
    if (mine == nullptr) return 10;
    if (alloc_pd(*mine) == 0 || create_cq(*mine) == 0) return 12;
    send(1);
    for (;;) ::pause();
  });
  ASSERT_EQ(c.next(), 1);
  EXPECT_EQ(rt->object_counts().pds, before.pds + 1);
  ASSERT_EQ(::kill(c.pid, SIGKILL), 0);
  ASSERT_EQ(c.reap(), 128 + SIGKILL);
  // Expect: one sweep reclaims the dead slot's PD and CQ; a second finds nothing.
  EXPECT_EQ(rt->sweep(), 1u);
  EXPECT_EQ(rt->object_counts(), before);
  EXPECT_EQ(rt->sweep(), 0u);
  FabricRegistry registry("/dev/shm", fabric);
  EXPECT_EQ(registry.find_by_name("host0")->lid, 1);
  const std::string path = rt->segment_path();
  rt->detach();
  EXPECT_FALSE(file_exists(path));
  EXPECT_FALSE(file_exists(registry.path()));
}

TEST(SharedRuntime, TheAgentReclaimsADeadProcessWithinItsSweepPeriod) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto rt = SharedRuntime::create(options_for(fabric), error);
  ASSERT_NE(rt, nullptr) << error;
  const uint32_t pds_before = rt->object_counts().pds;
  Child c = spawn([&](auto send, auto /*wait_go*/) {
    std::string e;
    auto mine = SharedRuntime::create(options_for(fabric), e);
    if (mine == nullptr || alloc_pd(*mine) == 0) return 10;
    send(1);
    for (;;) ::pause();
  });
  ASSERT_EQ(c.next(), 1);
  ASSERT_EQ(::kill(c.pid, SIGKILL), 0);
  ASSERT_EQ(c.reap(), 128 + SIGKILL);
  // Expect: without any call of ours, the agent's sweep (every 100 ms) destroys the child's PD.
  bool reclaimed = false;
  for (int i = 0; i < kWaitMs / 10 && !reclaimed; ++i) {
    reclaimed = rt->object_counts().pds == pds_before;
    if (!reclaimed) ::usleep(10'000);
  }
  EXPECT_TRUE(reclaimed);
  rt->detach();
}

TEST(SharedRuntime, AForkChildCannotUseItsParentsRuntimeButMayAttachItsOwn) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto rt = SharedRuntime::create(options_for(fabric), error);
  ASSERT_NE(rt, nullptr) << error;
  const hca::Device::ObjectCounts before = rt->object_counts();
  DeviceSlot* parents = rt->devices()[0];  // what a context the parent opened holds
  Child c = spawn([&](auto send, auto /*wait_go*/) {
    hwif::AllocPdOut out;
    const int inherited = hwif::exec_cmd(parents->commands(), hwif::AllocPdIn{}, out);
    std::string e;
    auto mine = SharedRuntime::create(options_for(fabric), e);
    const bool own_works = mine != nullptr && alloc_pd(*mine) != 0;
    // The runtime the child inherited attaches it anew when it looks at its devices.
    DeviceSlot* now = rt->devices()[0];
    const int fresh = now != parents ? hwif::exec_cmd(now->commands(), hwif::AllocPdIn{}, out) : EIO;
    rt->detach();  // the child's attachment: its objects go with it
    send(static_cast<uint8_t>(inherited));
    send(own_works ? 1 : 0);
    send(static_cast<uint8_t>(fresh));
    return 0;  // mine detaches; the inherited runtime's destructor never runs (_exit)
  });
  // Expect: EIO through the parent's device slot, success through the child's own runtime and
  // through the inherited runtime's new attachment.
  EXPECT_EQ(c.next(), EIO);
  EXPECT_EQ(c.next(), 1);
  EXPECT_EQ(c.next(), 0);
  EXPECT_EQ(c.reap(), 0);
  EXPECT_EQ(rt->object_counts(), before);
  rt->detach();
}

TEST(SharedRuntime, HostsOfAFabricGetLidsInOrderOfAppearance) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto a = SharedRuntime::create(options_for(fabric, "a"), error);
  ASSERT_NE(a, nullptr) << error;
  auto b = SharedRuntime::create(options_for(fabric, "b"), error);
  ASSERT_NE(b, nullptr) << error;
  EXPECT_EQ(a->lid(), 1);
  EXPECT_EQ(b->lid(), 2);
  EXPECT_NE(a->devices()[0]->node_guid_be(), b->devices()[0]->node_guid_be());
  a->detach();
  b->detach();
}

}  // namespace
}  // namespace softhca::runtime
