// Registered memory reachable by other processes (src/runtime/memory_publisher.h, peer_memory.h):
// a pin's DMA address names its window, peers map the same pages through the published memfd, an
// unpin takes them away from peers at once and their next drop_unpublished() unmaps them, and a
// fork child gets private copies yet reaches its parent's registrations as a peer.
#include "runtime/memory_publisher.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "memfd_census.h"
#include "runtime/coherent_pool.h"
#include "pcie/host_bridge.h"
#include "runtime/peer_memory.h"
#include "runtime/pin_arena.h"
#include "runtime/pinned_pages.h"

namespace softhca::runtime {
namespace {

using pcie::PinAccess;

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

// The segment of a test, unmapped when the test ends: declared before the publishers, it outlives
// them (a publisher unpublishes what it still publishes, an arena chunk's view for one, when it goes).
class SegmentMapping {
 public:
  SegmentMapping() {
    void* p = ::mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    seg_ = p == MAP_FAILED ? nullptr : static_cast<Segment*>(p);  // zeroed: empty tables
  }
  ~SegmentMapping() {
    if (seg_ != nullptr) ::munmap(seg_, sizeof(Segment));
  }
  SegmentMapping(const SegmentMapping&) = delete;
  SegmentMapping& operator=(const SegmentMapping&) = delete;
  [[nodiscard]] Segment* get() const { return seg_; }

 private:
  Segment* seg_ = nullptr;
};

// A PeerMemory acting as `me`, resolving slot s to tables[s] and the pid pids[s].
PeerMemory make_peer(Segment* seg, uint32_t me, std::vector<pid_t> pids) {
  return PeerMemory(
      me, [seg](uint32_t s) -> const RangeTable* { return s < 3 ? &seg->tables[s] : nullptr; },
      [pids](uint32_t s) { return s < pids.size() ? pids[s] : 0; });
}

size_t page() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
}
bool filled(const uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<uint8_t>(seed + i * 7)) return false;
  return true;
}

// Whether peer's view of [dma, dma + n) equals `expected`. A registration may span several
// published ranges (pieces of its window), so it is mapped piece by piece as the device does
// (HostBridge::map may return less than asked).
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

TEST(MemoryPublisher, APinsDmaAddressNamesItsWindowWhichPeersAndTheOwnerReachAsTheSamePages) {
  const SegmentMapping mapping;
  Segment* seg = mapping.get();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  // Resolving as another slot of this same process: the path a peer takes, through /proc/<pid>/fd.
  PeerMemory peer = make_peer(seg, kPeerSlot, {0, ::getpid(), 0});
  PeerMemory self = make_peer(seg, kMySlot, {0, ::getpid(), 0});
  std::vector<uint8_t> heap(10000);
  fill(heap.data(), heap.size(), 3);
  const uint64_t held_before = test::held_memfd_bytes();
  const uint64_t dma = pub.pin(heap.data(), heap.size(), PinAccess::kWrite);
  ASSERT_NE(dma, 0u) << std::strerror(errno);
  EXPECT_EQ(pcie::dma_slot(dma), kMySlot);
  EXPECT_NE(pcie::dma_va(dma), reinterpret_cast<uint64_t>(heap.data())) << "the device's own mapping";
  EXPECT_TRUE(filled(heap.data(), heap.size(), 3));
  expect_same_memory(peer, dma, heap.data(), heap.size());
  // The owner's own device entries use the window's pointer directly: the same pages.
  std::span<uint8_t> own = self.map(dma, heap.size());
  ASSERT_EQ(own.size(), heap.size());
  EXPECT_EQ(own.data(), reinterpret_cast<uint8_t*>(pcie::dma_va(dma)));
  EXPECT_EQ(std::memcmp(own.data(), heap.data(), heap.size()), 0);
  // A second pin of the same range reaches the same pages at the same address of the same view.
  const size_t entries = pub.published_entries();
  EXPECT_EQ(entries, 1u) << "the arena chunk's view, once";
  const uint64_t again = pub.pin(heap.data(), heap.size(), PinAccess::kRead);
  ASSERT_NE(again, 0u);
  EXPECT_EQ(again, dma);
  EXPECT_EQ(pub.published_entries(), entries);
  pub.unpin(again, heap.size());
  EXPECT_TRUE(peer_matches(peer, dma, heap.data(), heap.size())) << "the first pin is untouched";
  pub.unpin(dma, heap.size());
  EXPECT_EQ(test::held_memfd_bytes(), held_before) << "the pages went back (the view stays for the next pin)";
  EXPECT_TRUE(filled(heap.data(), heap.size(), 3));
  // A zero-length pin reaches nothing and pins nothing.
  EXPECT_EQ(pub.pin(heap.data(), 0, PinAccess::kWrite), pcie::dma_address(kMySlot, reinterpret_cast<uint64_t>(heap.data())));
  EXPECT_EQ(pub.published_entries(), entries);
}

TEST(MemoryPublisher, RefusedPinsGiveTheErrnoRealVerbsGiveAndPublishNothing) {
  const SegmentMapping mapping;
  Segment* seg = mapping.get();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  void* shared = ::mmap(nullptr, page(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  errno = 0;
  EXPECT_EQ(pub.pin(shared, 64, PinAccess::kRead), 0u);
  EXPECT_EQ(errno, EINVAL);
  void* ro = ::mmap(nullptr, page(), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  errno = 0;
  EXPECT_EQ(pub.pin(ro, 64, PinAccess::kWrite), 0u);
  EXPECT_EQ(errno, EFAULT);
  const uint64_t dma = pub.pin(ro, 64, PinAccess::kRead);
  EXPECT_NE(dma, 0u) << "read-only registration of read-only memory";
  EXPECT_EQ(pub.published_entries(), 1u);
  pub.unpin(dma, 64);
  ::munmap(ro, page());
  ::munmap(shared, page());
}

TEST(MemoryPublisher, CoherentMemoryIsPublishedAndAnUnpinnedRangeIsGoneForPeersAtOnce) {
  const SegmentMapping mapping;
  Segment* seg = mapping.get();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  PeerMemory peer = make_peer(seg, kPeerSlot, {0, ::getpid(), 0});
  pcie::DmaMemory ring = pub.alloc_coherent(100);
  ASSERT_TRUE(ring.valid());
  EXPECT_EQ(ring.size, 128u);  // a small block of a shared chunk
  EXPECT_EQ(ring.dma_addr, pcie::dma_address(kMySlot, reinterpret_cast<uint64_t>(ring.data)));
  expect_same_memory(peer, ring.dma_addr, ring.data, ring.size);

  auto* buf = static_cast<uint8_t*>(std::malloc(5000));
  fill(buf, 5000, 9);
  const uint64_t held_before = test::held_memfd_bytes();
  const uint64_t dma = pub.pin(buf, 5000, PinAccess::kWrite);
  ASSERT_NE(dma, 0u);
  EXPECT_TRUE(peer_matches(peer, dma, buf, 5000));
  pub.unpin(dma, 5000);
  // The arena chunk's view stays published for its other pins, but the pages are given back (a
  // peer's device reaches them only through a key, which deregistration removed first).
  EXPECT_EQ(test::held_memfd_bytes(), held_before);
  EXPECT_TRUE(filled(buf, 5000, 9));  // still this process's memory, contents intact
  std::free(buf);

  // A small buffer's chunk stays published for the next one; a buffer with a chunk of its own is
  // unpublished when it is freed.
  const size_t entries = pub.published_entries();
  pub.free_coherent(ring);
  EXPECT_EQ(pub.published_entries(), entries);
  pcie::DmaMemory big = pub.alloc_coherent(CoherentPool::kOwnChunkAbove + 1);
  ASSERT_TRUE(big.valid());
  EXPECT_EQ(pub.published_entries(), entries + 1);
  expect_same_memory(peer, big.dma_addr, big.data, 4096);
  pub.free_coherent(big);
  EXPECT_EQ(pub.published_entries(), entries);
  peer.drop_unpublished();
  EXPECT_TRUE(peer.map(big.dma_addr, 8).empty());
}

TEST(MemoryPublisher, PinsShareOnePeerMappingOfTheirChunkAndUnpinningFreesThePagesUnderIt) {
  const SegmentMapping mapping;
  Segment* seg = mapping.get();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  PeerMemory peer = make_peer(seg, kPeerSlot, {0, ::getpid(), 0});
  // Two blocks of the arena (pages go back by blocks): one pinned throughout, one pinned and
  // unpinned.
  constexpr size_t kBlock = PinArena::kBlockBytes;
  const size_t len = 4 * kBlock;
  auto* app = static_cast<uint8_t*>(::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(app, MAP_FAILED);
  std::memset(app, 0x3c, len);
  uint8_t* const first = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(app) + kBlock - 1) / kBlock * kBlock);
  ASSERT_EQ(::munmap(first + 2 * kBlock, app + len - (first + 2 * kBlock)), 0);  // the two blocks alone
  const uint64_t held_before = test::held_memfd_bytes();
  const uint64_t kept = pub.pin(first, page(), PinAccess::kWrite);  // stays pinned throughout
  const uint64_t dma = pub.pin(first + kBlock, kBlock, PinAccess::kWrite);
  ASSERT_TRUE(kept != 0 && dma != 0);
  EXPECT_EQ(dma, kept + kBlock) << "neighbours in the application, neighbours in the view";
  ASSERT_NE(peer_byte(peer, kept), nullptr);
  ASSERT_NE(peer_byte(peer, dma), nullptr);
  EXPECT_EQ(peer.mapped_ranges(), 1u) << "one mapping of the chunk for both";
  // Outside the brk heap a pin converts its own pages only (pinned_pages.h).
  EXPECT_EQ(test::held_memfd_bytes(), held_before + page() + kBlock);

  pub.unpin(dma, kBlock);
  // Expect: the second block's pages go back at once, although the peer's mapping of the chunk
  // stays; the kept page's block is untouched.
  peer.drop_unpublished();
  EXPECT_EQ(peer.mapped_ranges(), 1u);
  EXPECT_EQ(test::held_memfd_bytes(), held_before + page());
  EXPECT_EQ(*peer_byte(peer, kept), 0x3c);
  EXPECT_EQ(first[kBlock], 0x3c) << "the application's pages are its own again, contents kept";
  pub.unpin(kept, page());
  EXPECT_EQ(test::held_memfd_bytes(), held_before);
  ::munmap(first, 2 * kBlock);
  if (first != app) ::munmap(app, static_cast<size_t>(first - app));
}

TEST(MemoryPublisher, APinWithAWindowOfItsOwnIsUnpublishedAndAPeerDropsItsMappingAtItsNextDrop) {
  // A window of its own: pages in two chunks. The first page is pinned, replaced by new memory
  // (its offsets in the first chunk stay the old pin's) and pinned again, into a second chunk;
  // a pin of that page and the next then spans both chunks.
  const SegmentMapping mapping;
  Segment* seg = mapping.get();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  PeerMemory peer = make_peer(seg, kPeerSlot, {0, ::getpid(), 0});
  auto* app = static_cast<uint8_t*>(::mmap(nullptr, 2 * page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(app, MAP_FAILED);
  const uint64_t old = pub.pin(app, page(), PinAccess::kWrite);
  ASSERT_NE(old, 0u);
  ASSERT_EQ(::mmap(app, page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), app);
  const uint64_t moved = pub.pin(app, page(), PinAccess::kWrite);
  ASSERT_NE(moved, 0u);
  const size_t entries = pub.published_entries();
  const uint64_t both = pub.pin(app, 2 * page(), PinAccess::kWrite);
  ASSERT_NE(both, 0u) << std::strerror(errno);
  EXPECT_EQ(pub.published_entries(), entries + 2) << "a window of two pieces";
  EXPECT_EQ(PinnedPages::usage().windows, 1u);
  app[page() + 3] = 0x19;
  ASSERT_NE(peer_byte(peer, both + page() + 3), nullptr);
  EXPECT_EQ(*peer_byte(peer, both + page() + 3), 0x19);
  const size_t ranges = peer.mapped_ranges();
  pub.unpin(both, 2 * page());
  EXPECT_EQ(pub.published_entries(), entries);
  EXPECT_EQ(PinnedPages::usage().windows, 0u);
  // Expect: the peer's mapping of the window goes at its next drop_unpublished(), nothing else.
  peer.drop_unpublished();
  EXPECT_EQ(peer.mapped_ranges(), ranges - 1);
  EXPECT_TRUE(peer.map(both, 1).empty());
  EXPECT_EQ(app[page() + 3], 0x19);
  pub.unpin(moved, page());
  pub.unpin(old, page());
  EXPECT_EQ(PinnedPages::usage().arena_bytes, 0u);
  ::munmap(app, 2 * page());
}

TEST(MemoryPublisher, AnUnmappedThenRemappedRangeKeepsItsOldPagesForTheOldPinAndANewPinGetsTheNew) {
  const SegmentMapping mapping;
  Segment* seg = mapping.get();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  PeerMemory peer = make_peer(seg, kPeerSlot, {0, ::getpid(), 0});
  const size_t len = 3 * page();
  auto* p = static_cast<uint8_t*>(::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  fill(p, len, 1);
  const uint64_t dma = pub.pin(p, len, PinAccess::kWrite);
  ASSERT_NE(dma, 0u);

  // The application frees the registered memory and maps new memory at the same address.
  ASSERT_EQ(::munmap(p, len), 0);
  void* again = ::mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(again, static_cast<void*>(p));
  fill(p, len, 2);
  // The old pin still reaches the old pages (as hardware would), and writing them leaves the new.
  uint8_t* old_byte = peer_byte(peer, dma);
  ASSERT_NE(old_byte, nullptr);
  EXPECT_EQ(*old_byte, 1);
  *old_byte = 0x77;
  EXPECT_EQ(p[0], 2);

  const uint64_t fresh = pub.pin(p, len, PinAccess::kWrite);
  ASSERT_NE(fresh, 0u);
  EXPECT_NE(fresh, dma);
  expect_same_memory(peer, fresh, p, len);
  const uint64_t held_with_both = test::held_memfd_bytes();
  pub.unpin(dma, len);
  // At least the old pages (with them, any neighbours their block converted) went back.
  EXPECT_LE(test::held_memfd_bytes(), held_with_both - len) << "the old pages went back";
  expect_same_memory(peer, fresh, p, len);
  pub.unpin(fresh, len);
  ::munmap(p, len);
}

TEST(MemoryPublisher, AForkChildHasNoneOfItsParentsPeerViewsAndForgettingThemUnmapsNothingOfItsOwn) {
  const SegmentMapping mapping;
  Segment* seg = mapping.get();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  PeerMemory peer = make_peer(seg, kPeerSlot, {0, ::getpid(), 0});
  std::vector<uint8_t> buf(3 * page());
  const uint64_t dma = pub.pin(buf.data(), buf.size(), PinAccess::kWrite);
  ASSERT_NE(dma, 0u);
  uint8_t* view = peer_byte(peer, dma);
  ASSERT_NE(view, nullptr);
  auto* view_page = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(view) / page() * page());

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The view is not in the child (MADV_DONTFORK): the child may put memory of its own there...
    void* own = ::mmap(view_page, page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                       -1, 0);
    if (own != view_page) ::_exit(20);
    view_page[0] = 0x5a;
    // ... which forgetting the inherited views leaves alone.
    peer.forget(kMySlot);
    ::_exit(view_page[0] == 0x5a ? 0 : 21);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's steps";
  EXPECT_EQ(peer_byte(peer, dma), view) << "the parent's view is untouched";
  pub.unpin(dma, buf.size());
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
  const uint64_t dma = pub.pin(mine, n, PinAccess::kWrite);
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

TEST(MemoryPublisher, AForkChildGetsPrivateCopiesAndPeersOfEitherSideSeeEachOthersWrites) {
  const SegmentMapping mapping;
  Segment* seg = mapping.get();
  ASSERT_NE(seg, nullptr);
  MemoryPublisher pub(seg->tables[kMySlot], kMySlot);
  constexpr size_t kBytes = 9000;
  auto* buf = static_cast<uint8_t*>(std::malloc(kBytes));
  fill(buf, kBytes, 5);
  const uint64_t dma = pub.pin(buf, kBytes, PinAccess::kWrite);
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
  pub.unpin(dma, kBytes);
  std::free(buf);
}

// A slot freed and taken by the next process (HostSegment::detach / free_dead_slot clear it): the
// entries the new process publishes never come back with a generation a peer cached for the old
// one, so a peer that did not see the old process go (it left cleanly) maps the new one's ranges
// afresh instead of writing into the old one's pages.
TEST(RangeTableReuse, ASlotClearedForItsNextProcessNeverRepeatsAGenerationAPeerCached) {
  const SegmentMapping mapping;
  Segment* seg = mapping.get();
  ASSERT_NE(seg, nullptr);
  RangeTable& t = seg->tables[kMySlot];
  RangeSnapshot first;
  first.va = 0x10000;
  first.length = 4096;
  first.fd = 3;
  t.write(0, first);
  const uint64_t cached = t.generation(0);  // what a peer's PeerMemory keeps with its mapping
  ASSERT_EQ(cached % 2, 0u);
  t.clear_keeping_generations();
  EXPECT_FALSE(t.read(0).has_value()) << "no range after the clear";
  EXPECT_EQ(t.used.load(), 0u);
  RangeSnapshot next = first;  // the next process's first range, at the same index and address
  next.fd = 4;
  t.write(0, next);
  EXPECT_NE(t.generation(0), cached);
  EXPECT_EQ(t.generation(0) % 2, 0u);
  const auto got = t.read(0);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->fd, 4);
}

}  // namespace
}  // namespace softhca::runtime
