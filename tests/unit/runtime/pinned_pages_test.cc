// Pinned pages and the device's own view of them (src/runtime/pinned_pages.h): a pin's window is
// a second mapping of the pinned pages, which keeps them whatever the application does to its own
// mapping; unpinning gives the pages back (private again, the memfd closed); access is checked
// against the mapping's protection; concurrent writers lose nothing; fork privatizes.
#include "runtime/pinned_pages.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "memfd_census.h"
#include "runtime/coherent_pool.h"
#include "runtime/page_conversion.h"
#include "runtime/pin_arena.h"

namespace softhca::runtime {
namespace {

using pcie::PinAccess;
using test::held_memfd_bytes;
using test::mapped_memfd_bytes;
using test::open_memfds;
using test::private_page;

constexpr auto kBound = std::chrono::seconds(20);

size_t page() { return PinnedPages::page_bytes(); }

void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
}
bool filled(const uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<uint8_t>(seed + i * 7)) return false;
  return true;
}

uint8_t* map_anonymous(size_t len, int prot = PROT_READ | PROT_WRITE) {
  void* p = ::mmap(nullptr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

// len bytes of fresh anonymous memory starting on a pin block (PinArena::kBlockBytes), so that
// which pages share a block does not depend on where mmap put them; the rest is unmapped.
uint8_t* map_block_aligned(size_t len) {
  constexpr uint64_t kBlock = PinArena::kBlockBytes;
  uint8_t* p = map_anonymous(len + kBlock);
  if (p == nullptr) return nullptr;
  auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uint64_t>(p) + kBlock - 1) / kBlock * kBlock);
  if (aligned > p) ::munmap(p, static_cast<size_t>(aligned - p));
  const size_t tail = static_cast<size_t>(p + len + kBlock - (aligned + len));
  if (tail > 0) ::munmap(aligned + len, tail);
  return aligned;
}

// The window's view is the very memory at `app`: a store through either shows in the other.
void expect_same_memory(uint8_t* device, uint8_t* app, size_t n) {
  ASSERT_NE(device, app);
  EXPECT_EQ(std::memcmp(device, app, n), 0);
  const uint8_t old = app[n - 1];
  device[n - 1] = static_cast<uint8_t>(old ^ 0xa5);
  EXPECT_EQ(app[n - 1], static_cast<uint8_t>(old ^ 0xa5));
  app[n - 1] = old;
  EXPECT_EQ(device[n - 1], old);
}

uint8_t g_static_buffer[6000];

TEST(PinnedPages, APinGivesASecondMappingOfTheSamePagesAtAnAddressTheApplicationNeverGot) {
  std::vector<uint8_t> heap(10000);
  auto check = [](uint8_t* p, size_t n, uint8_t seed) {
    fill(p, n, seed);
    const Window w = PinnedPages::pin(p, n, PinAccess::kWrite);
    ASSERT_NE(w.device, nullptr) << std::strerror(errno);
    EXPECT_EQ(w.base % page(), 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(w.device) % page(), reinterpret_cast<uintptr_t>(p) % page());
    EXPECT_TRUE(w.arena_view) << "a small run goes into the arena";
    EXPECT_TRUE(filled(p, n, seed));
    expect_same_memory(w.device, p, n);
    EXPECT_FALSE(PinnedPages::unpin(w.device + 4 * PinArena::kBlockBytes, n)) << "pages no pin uses";
    EXPECT_TRUE(PinnedPages::unpin(w.device, n));
    EXPECT_TRUE(filled(p, n, seed));
    EXPECT_TRUE(private_page(p)) << test::mapping_of(p);
  };
  check(heap.data(), heap.size(), 3);
  check(g_static_buffer, sizeof(g_static_buffer), 4);
  // A stack buffer, on a thread of its own (fork tests must not run on a registered stack).
  std::thread on_stack([&] {
    uint8_t stack_buffer[3000];
    check(stack_buffer, sizeof(stack_buffer), 5);
  });
  on_stack.join();
  EXPECT_FALSE(PinnedPages::unpin(heap.data(), 1)) << "an application address is no window";
}

TEST(PinnedPages, WriteAccessOnPagesTheApplicationCannotWriteIsEfaultAndReadAccessStillWorks) {
  const int fds_before = open_memfds();
  uint8_t* rw = map_anonymous(2 * page());
  ASSERT_NE(rw, nullptr);
  fill(rw, 2 * page(), 8);
  ASSERT_EQ(::mprotect(rw, 2 * page(), PROT_READ), 0);
  errno = 0;
  EXPECT_EQ(PinnedPages::pin(rw, 100, PinAccess::kWrite).device, nullptr);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_TRUE(private_page(rw)) << "a refused pin converts nothing";
  EXPECT_EQ(open_memfds(), fds_before);

  const Window w = PinnedPages::pin(rw, 2 * page(), PinAccess::kRead);
  ASSERT_NE(w.device, nullptr) << std::strerror(errno);
  EXPECT_TRUE(filled(w.device, 2 * page(), 8));
  EXPECT_TRUE(PinnedPages::unpin(w.device, 2 * page()));
  const int fds_after = open_memfds();  // the arena's first chunk may be new: it stays

  // Half writable, half not: the whole range needs write access.
  ASSERT_EQ(::mprotect(rw, page(), PROT_READ | PROT_WRITE), 0);
  errno = 0;
  EXPECT_EQ(PinnedPages::pin(rw, 2 * page(), PinAccess::kWrite).device, nullptr);
  EXPECT_EQ(errno, EFAULT);
  // No access at all: not even a read pin.
  ASSERT_EQ(::mprotect(rw, 2 * page(), PROT_NONE), 0);
  errno = 0;
  EXPECT_EQ(PinnedPages::pin(rw, 8, PinAccess::kRead).device, nullptr);
  EXPECT_EQ(errno, EFAULT);
  ::munmap(rw, 2 * page());

  // Memory the application shares itself, and a hole.
  void* shared = ::mmap(nullptr, page(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  errno = 0;
  EXPECT_EQ(PinnedPages::pin(shared, 64, PinAccess::kRead).device, nullptr);
  EXPECT_EQ(errno, EINVAL);
  ::munmap(shared, page());
  uint8_t* three = map_anonymous(3 * page());
  ASSERT_NE(three, nullptr);
  ASSERT_EQ(::munmap(three + page(), page()), 0);
  errno = 0;
  EXPECT_EQ(PinnedPages::pin(three, 3 * page(), PinAccess::kRead).device, nullptr);
  EXPECT_EQ(errno, EFAULT);
  ::munmap(three, 3 * page());
  EXPECT_EQ(open_memfds(), fds_after);
  EXPECT_EQ(PinnedPages::usage().windows, 0u);
  EXPECT_EQ(PinnedPages::usage().arena_bytes, 0u);
}

TEST(PinnedPages, TheWindowKeepsThePinnedPagesWhenTheApplicationProtectsUnmapsOrRemapsItsRange) {
  const uint64_t held_before = held_memfd_bytes();
  uint8_t* app = map_anonymous(3 * page());
  ASSERT_NE(app, nullptr);
  fill(app, 3 * page(), 1);
  const Window w = PinnedPages::pin(app, 3 * page(), PinAccess::kWrite);
  ASSERT_NE(w.device, nullptr) << std::strerror(errno);
  uint8_t* const first = app;
  uint8_t* const second = app + page();
  uint8_t* const third = app + 2 * page();

  // Made read-only by the application: the device still writes, the application reads it.
  ASSERT_EQ(::mprotect(first, page(), PROT_READ), 0);
  w.device[10] = 0x5a;
  EXPECT_EQ(first[10], 0x5a);
  // Unmapped by the application: the device reads the old bytes and writes without a crash.
  ASSERT_EQ(::munmap(second, page()), 0);
  EXPECT_TRUE(filled(w.device + page(), page(), static_cast<uint8_t>(1 + page() * 7)));
  w.device[page() + 1] = 0x6b;
  EXPECT_EQ(w.device[page() + 1], 0x6b);
  // Replaced by new memory at the same address: the new memory is not the device's.
  ASSERT_EQ(::mmap(third, page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), third);
  w.device[2 * page() + 2] = 0x7c;
  EXPECT_EQ(third[2], 0) << "the write reached the new mapping";
  EXPECT_EQ(w.device[2 * page() + 2], 0x7c);

  EXPECT_TRUE(PinnedPages::unpin(w.device, 3 * page()));
  EXPECT_EQ(first[10], 0x5a) << "given back with the device's write in it";
  EXPECT_TRUE(private_page(first));
  ::munmap(first, page());
  ::munmap(third, page());
  EXPECT_EQ(PinnedPages::usage().arena_bytes, 0u);
  EXPECT_EQ(held_memfd_bytes(), held_before) << "the unmapped page went back too";
}

TEST(PinnedPages, UnpinningGivesThePagesBackPrivateWithTheirContentsAndFreesThem) {
  const uint64_t held_before = held_memfd_bytes();
  uint8_t* app = map_anonymous(4 * page());
  ASSERT_NE(app, nullptr);
  fill(app, 4 * page(), 2);
  const Window w = PinnedPages::pin(app + 100, 3 * page(), PinAccess::kWrite);
  ASSERT_NE(w.device, nullptr) << std::strerror(errno);
  EXPECT_TRUE(w.arena_view);
  // The whole mapping is converted (its pages up to the pin's blocks), and the blocks counted.
  EXPECT_GE(held_memfd_bytes(), held_before + 4 * page()) << "rounded out to whole pages";
  EXPECT_FALSE(private_page(app));
  EXPECT_FALSE(private_page(app + 3 * page()));
  const PinnedPages::Usage held = PinnedPages::usage();
  EXPECT_EQ(held.windows, 0u) << "no window of its own: the chunk's view";
  EXPECT_GE(held.arena_bytes, PinArena::kBlockBytes);
  EXPECT_EQ(held.arena_bytes % PinArena::kBlockBytes, 0u);

  EXPECT_TRUE(PinnedPages::unpin(w.device, 3 * page()));
  EXPECT_EQ(held_memfd_bytes(), held_before);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(private_page(app + i * page())) << test::mapping_of(app + i * page());
  EXPECT_TRUE(filled(app, 4 * page(), 2));
  EXPECT_EQ(PinnedPages::usage().arena_bytes, 0u);
  ::munmap(app, 4 * page());
}

TEST(PinnedPages, PinsOfTheSamePagesShareThemUntilTheLastIsUnpinned) {
  const uint64_t held_before = held_memfd_bytes();
  // In one block: the middle page's pin then keeps all three converted (below).
  uint8_t* app = map_block_aligned(3 * page());
  ASSERT_NE(app, nullptr);
  fill(app, 3 * page(), 3);
  const Window whole = PinnedPages::pin(app, 3 * page(), PinAccess::kWrite);
  const Window middle = PinnedPages::pin(app + page(), page(), PinAccess::kRead);
  ASSERT_NE(whole.device, nullptr);
  ASSERT_NE(middle.device, nullptr);
  EXPECT_EQ(middle.device, whole.device + page()) << "the same pages of the same view";
  const uint64_t held_both = held_memfd_bytes();
  EXPECT_GE(held_both, held_before + 3 * page()) << "converted once";
  EXPECT_TRUE(PinnedPages::unpin(whole.device, 3 * page()));
  // Pages go back by blocks: the middle page's pin keeps its block, neighbours included.
  EXPECT_EQ(held_memfd_bytes(), held_both) << "the middle page is still pinned";
  app[page() + 5] = 0x42;  // the application's store reaches the device's view
  EXPECT_EQ(middle.device[5], 0x42);
  EXPECT_TRUE(PinnedPages::unpin(middle.device, page()));
  EXPECT_EQ(held_memfd_bytes(), held_before);
  EXPECT_TRUE(private_page(app + page()));

  // Pinned again after being given back: converted again, the same memory once more.
  const Window again = PinnedPages::pin(app, 3 * page(), PinAccess::kWrite);
  ASSERT_NE(again.device, nullptr) << std::strerror(errno);
  expect_same_memory(again.device, app, 3 * page());
  EXPECT_TRUE(PinnedPages::unpin(again.device, 3 * page()));
  ::munmap(app, 3 * page());
}

TEST(PinnedPages, CyclesOfMapPinUnpinUnmapOfALargeBufferLeaveNoPagesBehind) {
  constexpr size_t kBytes = size_t{32} << 20;
  const uint64_t held_before = held_memfd_bytes();
  for (int cycle = 0; cycle < 8; ++cycle) {
    uint8_t* app = map_anonymous(kBytes);
    ASSERT_NE(app, nullptr);
    std::memset(app, cycle + 1, kBytes);
    const Window w = PinnedPages::pin(app, kBytes, PinAccess::kWrite);
    ASSERT_NE(w.device, nullptr) << std::strerror(errno);
    EXPECT_EQ(w.device[kBytes - 1], cycle + 1);
    EXPECT_TRUE(PinnedPages::unpin(w.device, kBytes));
    ASSERT_EQ(::munmap(app, kBytes), 0);
    // Expect: after each cycle, nothing of it is held.
    EXPECT_EQ(held_memfd_bytes(), held_before) << "cycle " << cycle;
  }
  EXPECT_EQ(PinnedPages::usage().arena_bytes, 0u);
  EXPECT_EQ(PinnedPages::usage().windows, 0u);
}

TEST(PinnedPages, NeighbouringRegistrationsLeaveOneMergedMappingAndNoMemfdEach) {
  // 512 one-page buffers side by side, each pinned alone (what 512 ibv_reg_mr calls on malloc'd
  // pages do): the kernel merges the converted pages into one mapping, and no pin opens a file.
  constexpr size_t kBuffers = 512;
  uint8_t* app = map_anonymous(kBuffers * page());
  ASSERT_NE(app, nullptr);
  std::memset(app, 9, kBuffers * page());
  const int fds_before = open_memfds();
  std::vector<Window> w(kBuffers);
  for (size_t i = 0; i < kBuffers; ++i) {
    w[i] = PinnedPages::pin(app + i * page(), page(), PinAccess::kWrite);
    ASSERT_NE(w[i].device, nullptr) << i << ": " << std::strerror(errno);
  }
  EXPECT_LE(open_memfds(), fds_before + 1) << "at most one new chunk";
  const std::string first = test::mapping_of(app);
  EXPECT_EQ(first, test::mapping_of(app + (kBuffers - 1) * page())) << "one mapping for all";
  for (size_t i = 0; i < kBuffers; ++i) EXPECT_EQ(w[i].device, w[0].device + i * page());
  for (size_t i = 0; i < kBuffers; i += 2) ASSERT_TRUE(PinnedPages::unpin(w[i].device, page()));
  for (size_t i = 1; i < kBuffers; i += 2) ASSERT_TRUE(PinnedPages::unpin(w[i].device, page()));
  EXPECT_TRUE(private_page(app));
  EXPECT_EQ(PinnedPages::usage().arena_bytes, 0u);
  ::munmap(app, kBuffers * page());
}

TEST(PinnedPages, NewMemoryRegisteredAtTheAddressOfAStillPinnedRangeGoesToAnotherChunk) {
  uint8_t* app = map_anonymous(page());
  ASSERT_NE(app, nullptr);
  app[0] = 1;
  const Window old = PinnedPages::pin(app, page(), PinAccess::kWrite);
  ASSERT_NE(old.device, nullptr);
  ASSERT_EQ(::mmap(app, page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), app);
  app[0] = 2;
  const Window fresh = PinnedPages::pin(app, page(), PinAccess::kWrite);
  ASSERT_NE(fresh.device, nullptr) << std::strerror(errno);
  EXPECT_NE(fresh.base, old.base) << "the offsets of the first chunk are the old pages'";
  EXPECT_EQ(old.device[0], 1);
  EXPECT_EQ(fresh.device[0], 2);
  EXPECT_TRUE(PinnedPages::unpin(old.device, page()));
  EXPECT_EQ(app[0], 2) << "giving the old pages back left the new mapping alone";
  EXPECT_TRUE(PinnedPages::unpin(fresh.device, page()));
  EXPECT_TRUE(private_page(app));
  EXPECT_EQ(app[0], 2);
  ::munmap(app, page());
}

// A thread increments a counter as fast as it can while `act` runs on this thread (a pin or an
// unpin of the counter's page). Expect: the counter equals the writer's own count.
template <class Act>
void hammer_while(std::atomic<uint64_t>* counter, Act act) {
  std::atomic<bool> stop{false};
  uint64_t done = 0;
  counter->store(0);
  std::thread writer([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      counter->fetch_add(1, std::memory_order_relaxed);
      ++done;
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + kBound;
  while (counter->load(std::memory_order_relaxed) < 1000 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  act();
  const uint64_t after = counter->load(std::memory_order_relaxed);
  while (counter->load(std::memory_order_relaxed) < after + 1000 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  stop.store(true);
  writer.join();
  EXPECT_EQ(counter->load(), done);
}

TEST(PinnedPages, AWriterHammeringAPageLosesNoIncrementWhileItIsPinnedOrGivenBack) {
  // Fresh pages each round, so every round converts and gives back; the counter shares its page
  // with other data.
  for (int round = 0; round < 40; ++round) {
    uint8_t* p = map_anonymous(2 * page());
    ASSERT_NE(p, nullptr);
    fill(p, 2 * page(), static_cast<uint8_t>(round));
    auto* counter = new (p + page() - 64) std::atomic<uint64_t>(0);
    Window w;
    hammer_while(counter, [&] { w = PinnedPages::pin(counter, sizeof(*counter), PinAccess::kWrite); });
    ASSERT_NE(w.device, nullptr);
    hammer_while(counter, [&] { EXPECT_TRUE(PinnedPages::unpin(w.device, sizeof(*counter))); });
    if (HasFailure()) break;
    EXPECT_TRUE(filled(p, page() - 64, static_cast<uint8_t>(round)));
    EXPECT_TRUE(private_page(p));
    ::munmap(p, 2 * page());
  }
  // And on the heap, where allocator metadata shares the page.
  auto* heap_counter = new std::atomic<uint64_t>(0);
  Window w;
  hammer_while(heap_counter, [&] { w = PinnedPages::pin(heap_counter, sizeof(*heap_counter), PinAccess::kWrite); });
  hammer_while(heap_counter, [&] { EXPECT_TRUE(PinnedPages::unpin(w.device, sizeof(*heap_counter))); });
  delete heap_counter;
  // How often the writer actually hit a read-only page depends on scheduling: reported, not asserted.
  RecordProperty("faults_waited", std::to_string(page_conversion::faults_waited()));
}

TEST(PinnedPages, CoherentBuffersShareAChunkAndComeBackZeroedWithoutANewMemfd) {
  PinnedPages::CoherentChunk chunk, chunk2;
  size_t size = 0, size2 = 0;
  uint8_t* dbrec = PinnedPages::alloc_coherent(64, &size, &chunk);
  ASSERT_NE(dbrec, nullptr) << std::strerror(errno);
  EXPECT_EQ(size, 64u);  // a cache line, not a page
  const int fds = open_memfds("/memfd:softhca-coherent");
  uint8_t* ring = PinnedPages::alloc_coherent(3 * page() - 5, &size2, &chunk2);
  ASSERT_NE(ring, nullptr) << std::strerror(errno);
  EXPECT_EQ(size2, 3 * page());
  EXPECT_EQ(reinterpret_cast<uint64_t>(ring) % page(), 0u);
  EXPECT_EQ(chunk2.base, chunk.base) << "one chunk for both";
  EXPECT_EQ(open_memfds("/memfd:softhca-coherent"), fds) << "no memfd per buffer";
  for (size_t i = 0; i < size2; ++i) ASSERT_EQ(ring[i], 0) << i;
  std::memset(ring, 0xab, size2);
  std::memset(dbrec, 0xcd, size);
  PinnedPages::free_coherent(ring, size2);
  PinnedPages::free_coherent(dbrec, size);
  // The same places again (best fit, last freed first), zeroed.
  uint8_t* ring_again = PinnedPages::alloc_coherent(3 * page(), &size2, &chunk2);
  uint8_t* dbrec_again = PinnedPages::alloc_coherent(10, &size, &chunk);
  ASSERT_EQ(ring_again, ring);
  ASSERT_EQ(dbrec_again, dbrec);
  for (size_t i = 0; i < size2; ++i) ASSERT_EQ(ring_again[i], 0) << i;
  for (size_t i = 0; i < size; ++i) ASSERT_EQ(dbrec_again[i], 0) << i;
  PinnedPages::free_coherent(ring_again, size2);
  PinnedPages::free_coherent(dbrec_again, size);
}

TEST(PinnedPages, ACoherentBufferAboveAQuarterChunkHasAMemfdOfItsOwnClosedWhenFreed) {
  const int fds_before = open_memfds("/memfd:softhca-coherent");
  PinnedPages::CoherentChunk chunk;
  size_t size = 0;
  uint8_t* cq = PinnedPages::alloc_coherent(CoherentPool::kOwnChunkAbove + 1, &size, &chunk);
  ASSERT_NE(cq, nullptr) << std::strerror(errno);
  EXPECT_EQ(chunk.base, reinterpret_cast<uint64_t>(cq));
  EXPECT_EQ(chunk.length, size);
  EXPECT_EQ(open_memfds("/memfd:softhca-coherent"), fds_before + 1);
  EXPECT_EQ(PinnedPages::coherent_chunk_dropped_by(cq).fd, chunk.fd);
  PinnedPages::free_coherent(cq, size);
  EXPECT_EQ(open_memfds("/memfd:softhca-coherent"), fds_before);
}

// Child side of the fork test; returns the exit code (no gtest in the child).
int fork_child(uint8_t* pinned, uint8_t* given_back, size_t n) {
  if (!filled(pinned, n, 5) || !filled(given_back, n, 6)) return 10;
  pinned[0] = 0xee;  // a private copy: the parent keeps its byte
  given_back[0] = 0xef;
  return PinnedPages::usage().memfds == 0 && PinnedPages::usage().windows == 0 ? 0 : 11;
}

TEST(PinnedPages, AForkChildGetsPrivateCopiesOfPinnedPagesAndNoneOfTheParentsWindows) {
  const size_t n = 2 * page();
  uint8_t* pinned = map_anonymous(n);
  uint8_t* given_back = map_anonymous(n);
  ASSERT_TRUE(pinned != nullptr && given_back != nullptr);
  fill(pinned, n, 5);
  fill(given_back, n, 6);
  const Window w = PinnedPages::pin(pinned, n, PinAccess::kWrite);
  const Window v = PinnedPages::pin(given_back, n, PinAccess::kWrite);
  ASSERT_TRUE(w.device != nullptr && v.device != nullptr);
  ASSERT_TRUE(PinnedPages::unpin(v.device, n));
  const uint64_t generation = PinnedPages::fork_generation();

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(fork_child(pinned, given_back, n));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see fork_child for the failing step";
  EXPECT_EQ(pinned[0], 5) << "the child's write to its copy reached the parent";
  EXPECT_EQ(given_back[0], 6);
  EXPECT_EQ(w.device[0], 5);
  EXPECT_EQ(PinnedPages::fork_generation(), generation) << "the parent's state is still its own";
  EXPECT_TRUE(PinnedPages::unpin(w.device, n));
  ::munmap(pinned, n);
  ::munmap(given_back, n);
}

}  // namespace
}  // namespace softhca::runtime
