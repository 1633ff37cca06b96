// Registered memory reachable by other processes: conversion in place, publication, peers' views,
// concurrent writers during conversion, stale ranges and fork (src/runtime/shared_memory.h).
#include "runtime/shared_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "pcie/host_bridge.h"

namespace softhca::runtime {
namespace {

constexpr uint32_t kMySlot = 1;
constexpr uint32_t kPeerSlot = 2;
constexpr auto kBound = std::chrono::seconds(20);

// What the host segment would hold: the slots' tables and a few words for the tests' handshakes,
// in one MAP_SHARED anonymous region (survives fork shared, as the segment would).
struct Segment {
  RangeTable tables[3];
  std::atomic<uint32_t> step;
  std::atomic<uint64_t> child_dma;
};

Segment* map_segment() {
  void* p = ::mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<Segment*>(p);  // zeroed: empty tables
}

// A PeerMemory acting as `me`, resolving slot s to tables[s] and the pid pids[s].
PeerMemory make_peer(Segment* seg, uint32_t me, std::vector<pid_t> pids) {
  return PeerMemory(
      me, [seg](uint32_t s) -> const RangeTable* { return s < 3 ? &seg->tables[s] : nullptr; },
      [pids](uint32_t s) { return s < pids.size() ? pids[s] : 0; });
}

void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
}
bool filled(const uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<uint8_t>(seed + i * 7)) return false;
  return true;
}

// Whether peer's view of [dma, dma + n) equals `expected`. A registration may span several
// published ranges (pages converted by earlier pins), so it is mapped piece by piece as the device
// does (HostBridge::map may return less than asked).
bool peer_matches(PeerMemory& peer, uint64_t dma, const uint8_t* expected, size_t n) {
  for (size_t off = 0; off < n;) {
    std::span<uint8_t> v = peer.map(dma + off, n - off);
    if (v.empty() || std::memcmp(v.data(), expected + off, v.size()) != 0) return false;
    off += v.size();
  }
  return true;
}
uint8_t* peer_byte(PeerMemory& peer, uint64_t dma) {
  std::span<uint8_t> v = peer.map(dma, 1);
  return v.empty() ? nullptr : v.data();
}

// Checks peer's view of dma is the very memory at `local` (a write through one shows in the
// other), restoring the byte.
void expect_same_memory(PeerMemory& peer, uint64_t dma, uint8_t* local, size_t n) {
  EXPECT_TRUE(peer_matches(peer, dma, local, n));
  uint8_t* last = peer_byte(peer, dma + n - 1);
  ASSERT_NE(last, nullptr);
  ASSERT_NE(last, local + n - 1);  // a second mapping, not the pointer itself
  const uint8_t old = local[n - 1];
  *last = static_cast<uint8_t>(old ^ 0xa5);
  EXPECT_EQ(local[n - 1], static_cast<uint8_t>(old ^ 0xa5));
  local[n - 1] = old;
  EXPECT_EQ(*last, old);
}

uint8_t g_static_buffer[6000];

TEST(SharedMemory, PinningHeapStackAndStaticBuffersKeepsContentsAndTheDmaAddressMapsBack) {
  Segment* seg = map_segment();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  // Resolving as another slot of this same process: the path a peer takes, through /proc/<pid>/fd.
  PeerMemory peer = make_peer(seg, kPeerSlot, {0, ::getpid(), 0});

  std::vector<uint8_t> heap(10000);
  struct Case {
    uint8_t* p;
    size_t n;
  };
  auto check = [&](Case c, uint8_t seed) {
    fill(c.p, c.n, seed);
    const uint64_t dma = pub.pin(c.p, c.n);
    ASSERT_EQ(dma, pcie::dma_address(kMySlot, reinterpret_cast<uint64_t>(c.p))) << std::strerror(errno);
    EXPECT_TRUE(filled(c.p, c.n, seed));
    expect_same_memory(peer, dma, c.p, c.n);
    // Pinning again converts nothing more and returns the same address.
    const size_t runs = pub.converted_runs();
    EXPECT_EQ(pub.pin(c.p, c.n), dma);
    EXPECT_EQ(pub.converted_runs(), runs);
    pub.unpin(c.p, c.n);
    pub.unpin(c.p, c.n);
  };
  check({heap.data(), heap.size()}, 3);
  check({g_static_buffer, sizeof(g_static_buffer)}, 4);
  // A stack buffer, on a thread of its own: the forking test below must not run on a registered
  // stack (shared_memory.h, fork).
  std::thread on_stack([&] {
    uint8_t stack_buffer[3000];
    check({stack_buffer, sizeof(stack_buffer)}, 5);
  });
  on_stack.join();
  // The own slot resolves to this process's pointers directly.
  PeerMemory self = make_peer(seg, kMySlot, {0, ::getpid(), 0});
  EXPECT_EQ(self.map(pcie::dma_address(kMySlot, reinterpret_cast<uint64_t>(heap.data())), 16).data(), heap.data());
  ::munmap(seg, sizeof(Segment));
}

TEST(SharedMemory, ApplicationSharedMemoryAndHolesAreRefusedWithTheErrnoRealVerbsGive) {
  Segment* seg = map_segment();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* shared = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  const size_t runs_before = pub.converted_runs();
  errno = 0;
  EXPECT_EQ(pub.pin(shared, 64), 0u);
  EXPECT_EQ(errno, EINVAL);
  // Three pages with the middle one unmapped: a hole.
  auto* three = static_cast<uint8_t*>(::mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(three, MAP_FAILED);
  ASSERT_EQ(::munmap(three + page, page), 0);
  errno = 0;
  EXPECT_EQ(pub.pin(three, 3 * page), 0u);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(pub.converted_runs(), runs_before);  // nothing converted by a refused pin
  ::munmap(three, 3 * page);
  ::munmap(shared, page);
  ::munmap(seg, sizeof(Segment));
}

TEST(SharedMemory, CoherentMemoryIsPublishedAndTheLastUnpinUnpublishesARegistration) {
  Segment* seg = map_segment();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  PeerMemory peer = make_peer(seg, kPeerSlot, {0, ::getpid(), 0});
  pcie::DmaMemory ring = pub.alloc_coherent(100);
  ASSERT_TRUE(ring.valid());
  EXPECT_EQ(ring.size, static_cast<size_t>(::sysconf(_SC_PAGESIZE)));
  EXPECT_EQ(ring.dma_addr, pcie::dma_address(kMySlot, reinterpret_cast<uint64_t>(ring.data)));
  expect_same_memory(peer, ring.dma_addr, ring.data, ring.size);

  auto* buf = static_cast<uint8_t*>(std::malloc(5000));
  fill(buf, 5000, 9);
  const uint64_t dma = pub.pin(buf, 5000);
  ASSERT_NE(dma, 0u);
  ASSERT_EQ(pub.pin(buf, 5000), dma);  // nested
  pub.unpin(buf, 5000);
  EXPECT_TRUE(peer_matches(peer, dma, buf, 5000)) << "still pinned once";
  pub.unpin(buf, 5000);
  EXPECT_TRUE(peer.map(dma, 5000).empty() && peer.map(dma + 4999, 1).empty())
      << "no registration uses it: unpublished";
  EXPECT_TRUE(filled(buf, 5000, 9));  // still this process's memory, contents intact
  ASSERT_EQ(pub.pin(buf, 5000), dma);
  EXPECT_TRUE(peer_matches(peer, dma, buf, 5000));
  pub.unpin(buf, 5000);
  std::free(buf);

  pub.free_coherent(ring);
  EXPECT_TRUE(peer.map(ring.dma_addr, 8).empty());
  ::munmap(seg, sizeof(Segment));
}

// One round: a thread increments a counter as fast as it can while this thread pins its page.
// Expect: the counter equals the writer's own count (no increment lost to the copy).
void hammer_while_pinning(MemoryPublisher& pub, std::atomic<uint64_t>* counter) {
  std::atomic<bool> stop{false};
  uint64_t done = 0;
  std::thread writer([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      counter->fetch_add(1, std::memory_order_relaxed);
      ++done;
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + kBound;
  while (counter->load(std::memory_order_relaxed) < 1000 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  const uint64_t dma = pub.pin(counter, sizeof(*counter));
  const uint64_t at_pin = counter->load(std::memory_order_relaxed);
  while (counter->load(std::memory_order_relaxed) < at_pin + 1000 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  stop.store(true);
  writer.join();
  EXPECT_NE(dma, 0u);
  EXPECT_EQ(counter->load(), done);
  pub.unpin(counter, sizeof(*counter));
}

TEST(SharedMemory, AWriterHammeringAPageWhileItIsPinnedLosesNoIncrement) {
  Segment* seg = map_segment();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  // Fresh pages each round, so every round converts; the counter shares its page with other data.
  for (int round = 0; round < 40; ++round) {
    auto* p = static_cast<uint8_t*>(::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(p, MAP_FAILED);
    fill(p, 2 * page, static_cast<uint8_t>(round));
    auto* counter = new (p + page - 64) std::atomic<uint64_t>(0);
    hammer_while_pinning(pub, counter);
    if (HasFailure()) break;
    EXPECT_TRUE(filled(p, page - 64, static_cast<uint8_t>(round)));
  }
  // And on the heap, where allocator metadata shares the page.
  auto* heap_counter = new std::atomic<uint64_t>(0);
  hammer_while_pinning(pub, heap_counter);
  delete heap_counter;
  // How often the writer actually hit a read-only page depends on scheduling: reported, not asserted.
  RecordProperty("faults_waited", std::to_string(MemoryPublisher::faults_waited()));
  std::printf("writes retried after waiting for a conversion: %llu\n",
              static_cast<unsigned long long>(MemoryPublisher::faults_waited()));
  ::munmap(seg, sizeof(Segment));
}

TEST(SharedMemory, AnUnmappedThenRemappedRangeIsConvertedAgainAndPeersSeeTheNewPages) {
  Segment* seg = map_segment();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  PeerMemory peer = make_peer(seg, kPeerSlot, {0, ::getpid(), 0});
  const size_t len = 3 * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto* p = static_cast<uint8_t*>(::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  fill(p, len, 1);
  const size_t runs_before = pub.converted_runs();
  const uint64_t dma = pub.pin(p, len);
  ASSERT_NE(dma, 0u);
  std::span<uint8_t> old_view = peer.map(dma, len);
  ASSERT_EQ(old_view.size(), len);
  const uint64_t old_generation = seg->tables[kMySlot].generation(0);

  // The application frees the registered memory and maps new memory at the same address.
  ASSERT_EQ(::munmap(p, len), 0);
  old_view[0] = 0x77;  // the device writing into memory nobody reads: no crash
  void* again = ::mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(again, static_cast<void*>(p));
  fill(p, len, 2);

  ASSERT_EQ(pub.pin(p, len), dma);
  EXPECT_EQ(pub.converted_runs(), runs_before + 1);  // the stale run was replaced, not kept beside the new one
  EXPECT_NE(seg->tables[kMySlot].generation(0), old_generation);
  std::span<uint8_t> new_view = peer.map(dma, len);
  ASSERT_EQ(new_view.size(), len);
  EXPECT_TRUE(filled(new_view.data(), len, 2));
  expect_same_memory(peer, dma, p, len);
  pub.unpin(p, len);
  pub.unpin(p, len);
  ::munmap(p, len);
  ::munmap(seg, sizeof(Segment));
}

// Child side of the fork test; returns the exit code (no gtest in the child).
int fork_child(Segment* seg, uint8_t* parent_buf, size_t n, uint64_t parent_dma) {
  // Copy-on-fork: the child's copy has the contents, and writing it does not reach the parent.
  if (!filled(parent_buf, n, 5)) return 10;
  parent_buf[0] = 0xee;
  // The parent's registered memory through the device path: a peer mapping of its memfd.
  PeerMemory peer = make_peer(seg, kPeerSlot, {0, ::getppid(), ::getpid()});
  uint8_t* first = peer_byte(peer, parent_dma);
  uint8_t* second = peer_byte(peer, parent_dma + 1);
  if (first == nullptr || second == nullptr) return 11;
  if (*first != static_cast<uint8_t>(5)) return 12;  // the parent's byte, not the child's 0xee
  *second = 0xc1;
  // The child's own registration, for the parent to write.
  MemoryPublisher pub(seg->tables[kPeerSlot], kPeerSlot);
  auto* mine = static_cast<uint8_t*>(std::malloc(n));
  fill(mine, n, 6);
  const uint64_t dma = pub.pin(mine, n);
  if (dma == 0) return 13;
  seg->child_dma.store(dma);
  seg->step.store(1);
  const auto deadline = std::chrono::steady_clock::now() + kBound;
  while (seg->step.load() != 2) {
    if (std::chrono::steady_clock::now() > deadline) return 14;
    std::this_thread::yield();
  }
  return mine[2] == 0xd2 ? 0 : 15;
}

TEST(SharedMemory, AForkChildGetsPrivateCopiesAndPeersOfEitherSideSeeEachOthersWrites) {
  Segment* seg = map_segment();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  constexpr size_t kBytes = 9000;
  auto* buf = static_cast<uint8_t*>(std::malloc(kBytes));
  fill(buf, kBytes, 5);
  const uint64_t dma = pub.pin(buf, kBytes);
  ASSERT_NE(dma, 0u);

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(fork_child(seg, buf, kBytes, dma));

  const auto deadline = std::chrono::steady_clock::now() + kBound;
  while (seg->step.load() != 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  if (seg->step.load() == 1) {
    PeerMemory peer = make_peer(seg, kMySlot, {0, ::getpid(), child});
    std::vector<uint8_t> expected(kBytes);
    fill(expected.data(), kBytes, 6);
    EXPECT_TRUE(peer_matches(peer, seg->child_dma.load(), expected.data(), kBytes));
    uint8_t* third = peer_byte(peer, seg->child_dma.load() + 2);
    EXPECT_NE(third, nullptr);
    if (third != nullptr) *third = 0xd2;
  }
  seg->step.store(2);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see fork_child for the failing step";
  EXPECT_EQ(buf[0], static_cast<uint8_t>(5)) << "the child's write to its copy reached the parent";
  EXPECT_EQ(buf[1], 0xc1) << "the child's write through the peer mapping is lost";
  pub.unpin(buf, kBytes);
  std::free(buf);
  ::munmap(seg, sizeof(Segment));
}

}  // namespace
}  // namespace softhca::runtime
