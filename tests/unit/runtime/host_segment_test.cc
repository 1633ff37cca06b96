// The host segment's attach/detach protocol, liveness and robust device lock, the fabric registry,
// and interrupt sockets, across real processes (fork). Every wait on a child is bounded.
#include "child_process.h"
#include "runtime/host_segment.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/fabric_registry.h"
#include "runtime/irq_socket.h"
#include "runtime/link_config.h"
#include "runtime/peer_memory.h"
#include "runtime/shared_kernel.h"

namespace softhca::runtime {
namespace {

constexpr int kWaitMs = 20'000;  // bound of every wait on a child

std::string unique_fabric() {
  static std::atomic<int> n{0};
  return "hctest-" + std::to_string(::getpid()) + "-" + std::to_string(n.fetch_add(1));
}

SegmentOptions options_for(const std::string& fabric, const std::string& host = "host0") {
  SegmentOptions o;
  o.fabric = fabric;
  o.host = host;
  o.device_bytes = size_t{16} << 20;
  o.slot_data_bytes = 200;
  o.assign_identity = [](uint16_t& lid, uint64_t& guid, std::string& /*error*/) {
    lid = 7;
    guid = 0x1122334455667788ull;
    return true;
  };
  return o;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// A child process with a pipe back to the parent: the child writes one byte per step.
struct Child {
  pid_t pid = -1;
  int from_child = -1;
  mutable bool reaped = false;
  // Waits (bounded) for the child's next byte; returns it, or -1 on timeout/EOF.
  int next() const {
    pollfd p{from_child, POLLIN, 0};
    if (::poll(&p, 1, kWaitMs) != 1) return -1;
    uint8_t b = 0;
    return ::read(from_child, &b, 1) == 1 ? b : -1;
  }
  // Reaps the child (bounded), returning its exit status or -1.
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

// Attaches and, when this attach formatted the segment, releases the device lock it holds then.
std::unique_ptr<HostSegment> attach_unlocked(const SegmentOptions& options, std::string& error) {
  auto seg = HostSegment::attach(options, error);
  if (seg != nullptr && seg->formatted()) seg->unlock_device();
  return seg;
}

template <typename Fn>
Child spawn(Fn&& body) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const int to_parent = fds[1];
    auto send = [to_parent](uint8_t b) { (void)!::write(to_parent, &b, 1); };
    const int rc = body(send);
    ::_exit(rc);
  }
  ::close(fds[1]);
  return Child{pid, fds[0]};
}

void pause_forever() {
  for (;;) ::pause();
}

TEST(HostNames, OnlyLettersDigitsUnderscoreDotAndDashAreValid) {
  EXPECT_TRUE(valid_name("host0"));
  EXPECT_TRUE(valid_name("a.b_c-D9"));
  EXPECT_FALSE(valid_name(""));
  EXPECT_FALSE(valid_name("a/b"));
  EXPECT_FALSE(valid_name("a b"));
  EXPECT_FALSE(valid_name(".."));
  EXPECT_FALSE(valid_name(std::string(kMaxNameChars + 1, 'x')));
  EXPECT_TRUE(valid_name(std::string(kMaxNameChars, 'x')));
}

TEST(HostNames, ABadSoftHcaHostIsRefusedWithItsName) {
  ::setenv("SOFTHCA_HOST", "no/slash", 1);
  HostNames names;
  std::string error;
  EXPECT_FALSE(host_names_from_env(names, error));
  EXPECT_NE(error.find("SOFTHCA_HOST='no/slash'"), std::string::npos) << error;
  ::unsetenv("SOFTHCA_HOST");
  HostNames defaults;
  EXPECT_TRUE(host_names_from_env(defaults, error));
  EXPECT_EQ(defaults.host, "host0");
}

TEST(Liveness, ThisProcessIsAliveAndAWrongStartTimeIsNot) {
  const uint64_t start = process_start_time(::getpid());
  ASSERT_NE(start, 0u);
  EXPECT_TRUE(process_alive(::getpid(), start));
  EXPECT_FALSE(process_alive(::getpid(), start + 1));  // a reused pid
}

TEST(HostSegment, TheFirstProcessFormatsTheSecondAttachesAndTheLastUnlinks) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto seg = attach_unlocked(options_for(fabric), error);
  ASSERT_NE(seg, nullptr) << error;
  // Expect: a new file, formatted, slot 1, the identity assign_identity gave.
  EXPECT_TRUE(seg->formatted());
  EXPECT_EQ(seg->my_slot(), 1u);
  EXPECT_EQ(seg->lid(), 7);
  EXPECT_EQ(seg->node_guid(), 0x1122334455667788ull);
  EXPECT_TRUE(file_exists(seg->path()));
  static_cast<uint8_t*>(seg->device_region())[100] = 0xab;

  Child c = spawn([&](auto send) {
    std::string e;
    auto s = attach_unlocked(options_for(fabric), e);
    if (s == nullptr) return 10;
    // Expect: the same device (not formatted), slot 2, the byte the parent wrote.
    if (s->formatted() || s->my_slot() != 2) return 11;
    if (static_cast<uint8_t*>(s->device_region())[100] != 0xab) return 12;
    send(1);
    s->detach(true);
    return 0;
  });
  EXPECT_EQ(c.next(), 1);
  EXPECT_EQ(c.reap(), 0);
  // Expect: the child left, the parent still holds the file.
  EXPECT_TRUE(file_exists(seg->path()));
  EXPECT_EQ(seg->live_slots(), 1u);
  const std::string path = seg->path();
  seg->detach(true);
  EXPECT_FALSE(file_exists(path));
}

TEST(HostSegment, AKilledProcessSlotIsReclaimedAndTheLastLiveProcessUnlinks) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto seg = attach_unlocked(options_for(fabric), error);
  ASSERT_NE(seg, nullptr) << error;
  Child c = spawn([&](auto send) {
    std::string e;
    auto s = attach_unlocked(options_for(fabric), e);
    if (s == nullptr) return 10;
    std::memset(s->slot_data(s->my_slot()), 0x5a, 200);
    send(static_cast<uint8_t>(s->my_slot()));
    pause_forever();
    return 0;
  });
  const int child_slot = c.next();
  ASSERT_EQ(child_slot, 2);
  EXPECT_FALSE(seg->slot_dead(2));
  EXPECT_EQ(seg->pid_of(2), c.pid);
  EXPECT_EQ(seg->live_slots(), 2u);
  ASSERT_EQ(::kill(c.pid, SIGKILL), 0);
  // Expect: dead even as an unreaped zombie.
  for (int i = 0; i < kWaitMs && !seg->slot_dead(2); ++i) ::usleep(1000);
  EXPECT_TRUE(seg->slot_dead(2));
  EXPECT_EQ(seg->live_slots(), 1u);
  EXPECT_EQ(c.reap(), 128 + SIGKILL);
  EXPECT_TRUE(seg->free_dead_slot(2));
  EXPECT_FALSE(seg->free_dead_slot(2));  // already free
  EXPECT_EQ(seg->pid_of(2), 0);
  EXPECT_EQ(static_cast<uint8_t*>(seg->slot_data(2))[0], 0);  // its data zeroed
  EXPECT_FALSE(seg->free_dead_slot(1));  // alive: never freed
  const std::string path = seg->path();
  seg->detach(true);
  EXPECT_FALSE(file_exists(path));
}

TEST(HostSegment, WhenEveryProcessDiedTheNextOneFormatsAFreshDevice) {
  const std::string fabric = unique_fabric();
  Child c = spawn([&](auto send) {
    std::string e;
    auto s = attach_unlocked(options_for(fabric), e);
    if (s == nullptr) return 10;
    static_cast<uint8_t*>(s->device_region())[0] = 0xee;
    send(1);
    pause_forever();
    return 0;
  });
  ASSERT_EQ(c.next(), 1);
  ASSERT_EQ(::kill(c.pid, SIGKILL), 0);
  ASSERT_EQ(c.reap(), 128 + SIGKILL);
  std::string error;
  auto seg = attach_unlocked(options_for(fabric), error);
  ASSERT_NE(seg, nullptr) << error;
  // Expect: the dead process's file is reused, formatted again, the old device gone.
  EXPECT_TRUE(seg->formatted());
  EXPECT_EQ(seg->my_slot(), 1u);
  EXPECT_EQ(static_cast<uint8_t*>(seg->device_region())[0], 0);
  seg->detach(true);
}

TEST(HostSegment, AProcessDyingWithTheDeviceLockLetsTheNextLockerRecover) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto seg = attach_unlocked(options_for(fabric), error);
  ASSERT_NE(seg, nullptr) << error;
  Child c = spawn([&](auto send) {
    std::string e;
    auto s = attach_unlocked(options_for(fabric), e);
    if (s == nullptr) return 10;
    s->lock_device();
    send(1);
    pause_forever();
    return 0;
  });
  ASSERT_EQ(c.next(), 1);
  ASSERT_EQ(::kill(c.pid, SIGKILL), 0);
  ASSERT_EQ(c.reap(), 128 + SIGKILL);
  int reclaimed = 0;
  DeviceLock lock(*seg, [&] {
    for (uint32_t s = 1; s <= kMaxSlots; ++s) reclaimed += seg->free_dead_slot(s) ? 1 : 0;
  });
  // Expect: the first lock sees EOWNERDEAD and reclaims the dead slot; the next is ordinary.
  lock.lock();
  lock.unlock();
  EXPECT_EQ(reclaimed, 1);
  EXPECT_FALSE(seg->lock_device());
  seg->unlock_device();
  seg->detach(true);
}

TEST(HostSegment, UarPagesAreOwnedPerProcessAndReleasedWithTheSlot) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto seg = attach_unlocked(options_for(fabric), error);
  ASSERT_NE(seg, nullptr) << error;
  seg->lock_device();
  EXPECT_EQ(seg->acquire_uar(2), 0);
  EXPECT_EQ(seg->acquire_uar(2), 1);
  EXPECT_EQ(seg->acquire_uar(2), -1);
  seg->release_uar(0);
  EXPECT_EQ(seg->acquire_uar(2), 0);
  seg->unlock_device();
  Child c = spawn([&](auto send) {
    std::string e;
    auto s = attach_unlocked(options_for(fabric), e);
    if (s == nullptr) return 10;
    s->lock_device();
    const int uar = s->acquire_uar(4);
    s->unlock_device();
    send(static_cast<uint8_t>(uar));
    pause_forever();
    return 0;
  });
  EXPECT_EQ(c.next(), 2);  // 0 and 1 are the parent's
  ::kill(c.pid, SIGKILL);
  EXPECT_EQ(c.reap(), 128 + SIGKILL);
  seg->lock_device();
  EXPECT_TRUE(seg->free_dead_slot(2));
  EXPECT_EQ(seg->acquire_uar(4), 2);  // the dead child's page came back
  seg->unlock_device();
  seg->detach(true);
}

// A device entry holds the interrupts it raises until it has let go of the device lock
// (SharedBridge::hold_interrupts): each vector once, none before the outermost release, and a
// thread that holds nothing delivers at once.
TEST(SharedBridge, InterruptsRaisedInADeviceEntryGoOutOnceWhenTheEntryEnds) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto seg = attach_unlocked(options_for(fabric), error);
  ASSERT_NE(seg, nullptr) << error;
  IrqSockets irq(seg->instance(), seg->my_slot(), seg->start_time_of(seg->my_slot()),
                 [&s = *seg](uint32_t slot) { return s.start_time_of(slot); });
  uint64_t v1 = 0, v2 = 0;
  const int fd1 = irq.alloc_vector(&v1);
  const int fd2 = irq.alloc_vector(&v2);
  ASSERT_GE(fd1, 0) << std::strerror(errno);
  ASSERT_GE(fd2, 0) << std::strerror(errno);
  PeerMemory peers(seg->my_slot(), [](uint32_t) { return nullptr; }, [](uint32_t) { return pid_t{0}; });
  SharedBridge bridge(peers, irq);
  const auto readable = [](int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  };

  bridge.hold_interrupts();
  bridge.deliver_msi(v1);
  bridge.deliver_msi(v1);
  bridge.hold_interrupts();  // a nested entry
  bridge.deliver_msi(v2);
  bridge.release_interrupts();
  // Expect: nothing went out while the outer entry lasts; another thread is not held.
  EXPECT_EQ(irq.delivered(), 0u);
  EXPECT_FALSE(readable(fd1));
  std::thread other([&] { bridge.deliver_msi(v2); });
  other.join();
  EXPECT_EQ(irq.delivered(), 1u);
  ASSERT_EQ(IrqSockets::wait_vector(fd2), 0);
  bridge.release_interrupts();
  // Expect: one firing per vector the entry raised, delivered at its end.
  EXPECT_EQ(irq.delivered(), 3u);
  EXPECT_TRUE(readable(fd1));
  EXPECT_TRUE(readable(fd2));
  EXPECT_EQ(IrqSockets::wait_vector(fd1), 0);
  EXPECT_EQ(IrqSockets::wait_vector(fd2), 0);
  // Expect: with nothing held, an interrupt goes out at once; a stray release changes nothing.
  bridge.release_interrupts();
  bridge.deliver_msi(v1);
  EXPECT_EQ(irq.delivered(), 4u);
  EXPECT_TRUE(readable(fd1));
  irq.free_vector(v1, fd1);
  irq.free_vector(v2, fd2);
  seg->detach(true);
}

// What the exit handler of the runtime does (detach enters the device, which raises interrupts),
// after exit() has run the main thread's thread_local destructors: the entry's held interrupts
// still go out, once each, and more distinct vectors than an entry keeps go out at once.
namespace exit_entry {
SharedBridge* bridge = nullptr;
IrqSockets* irq = nullptr;
std::vector<uint64_t>* vectors = nullptr;
void enter_device_at_exit() {
  const uint64_t before = irq->delivered();
  bridge->hold_interrupts();
  for (const uint64_t v : *vectors) bridge->deliver_msi(v);
  bridge->deliver_msi(vectors->front());  // held already: the same pending firing
  const uint64_t during = irq->delivered() - before;
  bridge->release_interrupts();
  const uint64_t after = irq->delivered() - before;
  // 0: the first 64 were held, the rest went out at once, each vector once in all.
  const uint64_t n = vectors->size();
  _exit(during == n - 64 && after == n ? 0 : 1);
}
}  // namespace exit_entry

TEST(SharedBridge, AnEntryInAnExitHandlerAfterThreadLocalsAreGoneStillDeliversEachVectorOnce) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto seg = attach_unlocked(options_for(fabric), error);
  ASSERT_NE(seg, nullptr) << error;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    IrqSockets irq(seg->instance(), seg->my_slot(), seg->start_time_of(seg->my_slot()),
                   [&s = *seg](uint32_t slot) { return s.start_time_of(slot); });
    PeerMemory peers(seg->my_slot(), [](uint32_t) { return nullptr; }, [](uint32_t) { return pid_t{0}; });
    static std::vector<uint64_t> vectors;
    for (int i = 0; i < 70; ++i) {
      uint64_t v = 0;
      if (irq.alloc_vector(&v) < 0) _exit(2);
      vectors.push_back(v);
    }
    exit_entry::bridge = new SharedBridge(peers, irq);  // outlives the exit handler, as the runtime's
    exit_entry::irq = &irq;
    exit_entry::vectors = &vectors;
    std::atexit(exit_entry::enter_device_at_exit);
    // This thread's thread_locals as the entry leaves them when it is done (constructed, then
    // destroyed by exit() before the handler runs).
    exit_entry::bridge->hold_interrupts();
    exit_entry::bridge->deliver_msi(vectors[0]);
    exit_entry::bridge->release_interrupts();
    if (irq.delivered() != 1) _exit(3);
    std::exit(4);  // the handler decides the status
  }
  // Expect: the handler ran and saw every vector go out once (ASan: no use of freed memory).
  EXPECT_EQ(softhca::test::reap_bounded(child, 20000), 0);
  seg->detach(true);
}

TEST(IrqSockets, AVectorRaisedByAnotherProcessWakesPollAndWait) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto seg = attach_unlocked(options_for(fabric), error);
  ASSERT_NE(seg, nullptr) << error;
  auto start_of = [&s = *seg](uint32_t slot) { return s.start_time_of(slot); };
  IrqSockets irq(seg->instance(), seg->my_slot(), seg->start_time_of(seg->my_slot()), start_of);
  uint64_t vector = 0;
  const int fd = irq.alloc_vector(&vector);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(irq_vector_slot(vector), 1u);
  EXPECT_EQ(irq_vector_id(vector), 1u);

  Child c = spawn([&](auto send) {
    std::string e;
    auto s = attach_unlocked(options_for(fabric), e);
    if (s == nullptr) return 10;
    IrqSockets mine(s->instance(), s->my_slot(), s->start_time_of(s->my_slot()),
                    [&s](uint32_t slot) { return s->start_time_of(slot); });
    for (int i = 0; i < 3; ++i) mine.deliver(vector);
    send(static_cast<uint8_t>(mine.delivered()));
    s->detach(true);
    return 0;
  });
  EXPECT_EQ(c.next(), 3);
  EXPECT_EQ(c.reap(), 0);
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, kWaitMs), 1);
  // Expect: one wait consumes all three firings; a non-blocking wait then finds none.
  EXPECT_EQ(IrqSockets::wait_vector(fd), 0);
  ASSERT_EQ(::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
  errno = 0;
  EXPECT_EQ(IrqSockets::wait_vector(fd), -1);
  EXPECT_EQ(errno, EAGAIN);
  // Expect: a freed vector is never delivered, and that is not an error.
  irq.free_vector(vector, fd);
  irq.deliver(vector);
  EXPECT_EQ(irq.undeliverable(), 1u);
  irq.deliver(irq_vector(9, 1));  // a free slot
  EXPECT_EQ(irq.undeliverable(), 2u);
  seg->detach(true);
}

TEST(FabricRegistry, LidsFollowFirstAppearanceAndStayWhileTheHostsSegmentExists) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto a = attach_unlocked(options_for(fabric, "a"), error);
  ASSERT_NE(a, nullptr) << error;
  auto b = attach_unlocked(options_for(fabric, "b"), error);
  ASSERT_NE(b, nullptr) << error;
  FabricRegistry reg("/dev/shm", fabric);
  EXPECT_EQ(reg.register_host("a"), 1);
  EXPECT_EQ(reg.register_host("b"), 2);
  EXPECT_EQ(reg.register_host("a"), 1);  // stable
  EXPECT_EQ(reg.set_address("b", 0x0100007f, 4791), 0);
  EXPECT_EQ(reg.set_address("zz", 1, 2), ENOENT);
  auto hb = reg.find_by_lid(2);
  ASSERT_TRUE(hb.has_value());
  EXPECT_EQ(hb->host, "b");
  EXPECT_EQ(hb->ipv4_be, 0x0100007fu);
  EXPECT_EQ(hb->udp_port, 4791);
  // Expect: host a leaves (its segment goes); the next new host takes the lowest free LID, 1.
  a->detach(true);
  auto c = attach_unlocked(options_for(fabric, "c"), error);
  ASSERT_NE(c, nullptr) << error;
  EXPECT_EQ(reg.register_host("c"), 1);
  EXPECT_FALSE(reg.find_by_name("a").has_value());
  EXPECT_EQ(reg.hosts().size(), 2u);
  EXPECT_EQ(reg.remove_host("b"), 0);
  EXPECT_EQ(reg.remove_host("c"), 0);
  // Expect: the last entry removed takes the file with it.
  EXPECT_FALSE(file_exists(reg.path()));
  b->detach(true);
  c->detach(true);
}

// docs/addresses.md: a RoCE host with no SOFTHCA_IP takes the machine's address unless another host
// of the fabric has it, then a loopback address of its own; the choice is made once per host.
TEST(FabricRegistry, TheMachinesAddressGoesToOneHostOfTheFabricAndTheOthersGetTheirOwn) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto a = attach_unlocked(options_for(fabric, "a"), error);
  ASSERT_NE(a, nullptr) << error;
  auto b = attach_unlocked(options_for(fabric, "b"), error);
  ASSERT_NE(b, nullptr) << error;
  FabricRegistry reg("/dev/shm", fabric);
  ASSERT_EQ(reg.register_host("a"), 1);
  ASSERT_EQ(reg.register_host("b"), 2);
  const uint32_t machine = htonl(0xc0000202);  // 192.0.2.2
  const uint32_t fallback_a = htonl(loopback_host_ipv4(::geteuid(), fabric, 1));
  const uint32_t fallback_b = htonl(loopback_host_ipv4(::geteuid(), fabric, 2));
  // Expect: a is first and takes the machine's address; b finds it taken and takes its own.
  EXPECT_EQ(reg.claim_ipv4("a", machine, fallback_a), machine);
  EXPECT_EQ(reg.claim_ipv4("b", machine, fallback_b), fallback_b);
  EXPECT_NE(fallback_a, fallback_b);
  // Expect: asking again changes nothing; an unregistered host gets no address.
  EXPECT_EQ(reg.claim_ipv4("a", machine, fallback_a), machine);
  EXPECT_EQ(reg.claim_ipv4("b", machine, fallback_b), fallback_b);
  errno = 0;
  EXPECT_EQ(reg.claim_ipv4("zz", machine, fallback_a), 0u);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(reg.remove_host("a"), 0);
  EXPECT_EQ(reg.remove_host("b"), 0);
  EXPECT_FALSE(file_exists(reg.path()));  // nothing left behind
  a->detach(true);
  b->detach(true);
}

// InfiniBand hosts record the address rdma_cm resolves apart from their carrier's: the same rule
// (the machine's address to one host of the fabric), in its own field, found by find_by_ipoib.
TEST(FabricRegistry, AnInfiniBandHostsRdmaCmAddressIsKeptApartFromItsCarriersAddress) {
  const std::string fabric = unique_fabric();
  std::string error;
  auto a = attach_unlocked(options_for(fabric, "a"), error);
  ASSERT_NE(a, nullptr) << error;
  auto b = attach_unlocked(options_for(fabric, "b"), error);
  ASSERT_NE(b, nullptr) << error;
  FabricRegistry reg("/dev/shm", fabric);
  ASSERT_EQ(reg.register_host("a"), 1);
  ASSERT_EQ(reg.register_host("b"), 2);
  const uint32_t carrier = htonl(0x7f000001);
  ASSERT_EQ(reg.set_address("a", carrier, 40001), 0);
  const uint32_t machine = htonl(0xc0000202);  // 192.0.2.2
  const uint32_t fallback_b = htonl(loopback_host_ipv4(::geteuid(), fabric, 2));
  EXPECT_EQ(reg.claim_ipv4("a", machine, 0, true), machine);
  EXPECT_EQ(reg.claim_ipv4("b", machine, fallback_b, true), fallback_b);
  // Expect: the carrier's endpoint is unchanged, and each address names its host.
  const std::optional<HostAddress> ha = reg.find_by_name("a");
  ASSERT_TRUE(ha);
  EXPECT_EQ(ha->ipv4_be, carrier);
  EXPECT_EQ(ha->udp_port, 40001);
  EXPECT_EQ(ha->ipoib_be, machine);
  ASSERT_TRUE(reg.find_by_ipoib(machine));
  EXPECT_EQ(reg.find_by_ipoib(machine)->lid, 1);
  ASSERT_TRUE(reg.find_by_ipoib(fallback_b));
  EXPECT_EQ(reg.find_by_ipoib(fallback_b)->lid, 2);
  EXPECT_FALSE(reg.find_by_ipoib(carrier)) << "a carrier address names no host for rdma_cm";
  EXPECT_EQ(reg.remove_host("a"), 0);
  EXPECT_EQ(reg.remove_host("b"), 0);
  a->detach(true);
  b->detach(true);
}

TEST(FabricRegistry, LoopbackHostAddressesAreIn127SlashEightAndNameTheHostsNumber) {
  const uint32_t ip = loopback_host_ipv4(1000, "lab", 0x0102);
  EXPECT_EQ(ip >> 24, 127u);
  EXPECT_GE((ip >> 16) & 0xff, 1u);
  EXPECT_LE((ip >> 16) & 0xff, 254u);
  EXPECT_EQ(ip & 0xffff, 0x0102u);
  EXPECT_EQ(loopback_host_ipv4(1000, "lab", 7), loopback_host_ipv4(1000, "lab", 7));  // deterministic
  // Expect: other fabrics mostly get another second octet (a spread, 1 in 254 collide).
  int distinct = 0;
  for (const char* f : {"a", "b", "c", "d", "e", "f", "g", "h"})
    distinct += ((loopback_host_ipv4(1000, f, 1) >> 16) & 0xff) != ((loopback_host_ipv4(1000, "lab", 1) >> 16) & 0xff);
  EXPECT_GE(distinct, 6);
}

}  // namespace
}  // namespace softhca::runtime
