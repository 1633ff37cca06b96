// Where coherent buffers go (src/runtime/coherent_pool.h): small ones on cache lines of a shared
// page, larger ones as page runs that coalesce when freed, the largest in a chunk of their own;
// what the caller is told to do with freed memory.
#include "runtime/coherent_pool.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace softhca::runtime {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kBase = uint64_t{1} << 40;  // any page-aligned address: the pool maps nothing

TEST(CoherentPool, SizesRoundToACacheLinePowerOfTwoBelowHalfAPageAndToWholePagesAbove) {
  CoherentPool pool(kPage);
  EXPECT_EQ(pool.rounded(0), 64u);
  EXPECT_EQ(pool.rounded(1), 64u);
  EXPECT_EQ(pool.rounded(65), 128u);
  EXPECT_EQ(pool.rounded(2048), 2048u);
  EXPECT_EQ(pool.rounded(2049), kPage);
  EXPECT_EQ(pool.rounded(kPage + 1), 2 * kPage);
  EXPECT_EQ(pool.rounded(UINT64_MAX), 0u);
}

TEST(CoherentPool, AnEmptyPoolAsksForAChunkAndThenCarvesSmallBlocksFromOnePage) {
  CoherentPool pool(kPage);
  EXPECT_EQ(pool.allocate(64).chunk, 0u);
  EXPECT_EQ(pool.new_chunk_bytes(64), CoherentPool::kChunkBytes);
  pool.add_chunk(kBase, CoherentPool::kChunkBytes, false, 7);
  EXPECT_EQ(pool.fd_of(kBase), 7);
  std::set<uint64_t> seen;
  for (uint64_t i = 0; i < kPage / 64; ++i) {
    const CoherentPool::Place p = pool.allocate(64);
    ASSERT_EQ(p.chunk, kBase);
    EXPECT_EQ(p.offset % 64, 0u);
    EXPECT_LT(p.offset, kPage) << "the first 64 blocks share the first page";
    EXPECT_TRUE(seen.insert(p.offset).second) << "handed out twice: " << p.offset;
  }
  EXPECT_FALSE(pool.has_own_chunk(kBase)) << "a block at a shared chunk's start is no own chunk";
  const CoherentPool::Place next = pool.allocate(64);
  EXPECT_GE(next.offset, kPage);
  EXPECT_EQ(pool.bytes_in_use(), (kPage / 64 + 1) * 64);
}

TEST(CoherentPool, FreedPageRunsCoalesceSoTheWholeChunkCanBeHandedOutAgain) {
  CoherentPool pool(kPage);
  pool.add_chunk(kBase, CoherentPool::kChunkBytes, false, 3);
  std::vector<uint64_t> runs;
  for (uint64_t at = 0; at < CoherentPool::kChunkBytes; at += 4 * kPage) {
    const CoherentPool::Place p = pool.allocate(4 * kPage);
    ASSERT_EQ(p.chunk, kBase) << at;
    runs.push_back(p.chunk + p.offset);
  }
  EXPECT_EQ(pool.allocate(kPage).chunk, 0u) << "the chunk is full";
  // Free every other run first, then the rest: the runs must merge back into one.
  for (size_t i = 0; i < runs.size(); i += 2) {
    CoherentPool::Release r;
    ASSERT_TRUE(pool.release(runs[i], 4 * kPage, &r));
    EXPECT_EQ(r.punch_bytes, 4 * kPage);
    EXPECT_EQ(r.zero_bytes, 0u);
    EXPECT_EQ(r.drop_chunk, 0u);
  }
  EXPECT_EQ(pool.allocate(8 * kPage).chunk, 0u) << "no two free runs are adjacent yet";
  for (size_t i = 1; i < runs.size(); i += 2) {
    CoherentPool::Release r;
    ASSERT_TRUE(pool.release(runs[i], 4 * kPage, &r));
  }
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  const CoherentPool::Place whole = pool.allocate(CoherentPool::kOwnChunkAbove);
  EXPECT_EQ(whole.chunk, kBase);
}

TEST(CoherentPool, AFreedSmallBlockIsZeroedByTheCallerAndComesBackFirst) {
  CoherentPool pool(kPage);
  pool.add_chunk(kBase, CoherentPool::kChunkBytes, false, 3);
  const CoherentPool::Place a = pool.allocate(100);
  CoherentPool::Release r;
  ASSERT_TRUE(pool.release(a.chunk + a.offset, 100, &r));
  EXPECT_EQ(r.zero_bytes, 128u);
  EXPECT_EQ(r.punch_bytes, 0u);
  const CoherentPool::Place b = pool.allocate(128);
  EXPECT_EQ(b.offset, a.offset);
  EXPECT_FALSE(pool.release(kBase + CoherentPool::kChunkBytes, 64, &r)) << "outside every chunk";
}

TEST(CoherentPool, ABufferAboveAQuarterChunkIsAChunkOfItsOwnDroppedWhenFreed) {
  CoherentPool pool(kPage);
  const uint64_t big = CoherentPool::kOwnChunkAbove + kPage;
  EXPECT_EQ(pool.allocate(big).chunk, 0u);
  EXPECT_EQ(pool.new_chunk_bytes(big), big);
  pool.add_chunk(kBase, big, true, 9);
  EXPECT_TRUE(pool.has_own_chunk(kBase));
  EXPECT_EQ(pool.bytes_in_use(), big);
  EXPECT_EQ(pool.allocate(64).chunk, 0u) << "an own chunk lends nothing to others";
  CoherentPool::Release r;
  EXPECT_FALSE(pool.release(kBase + kPage, big, &r)) << "not its start";
  ASSERT_TRUE(pool.release(kBase, big, &r));
  EXPECT_EQ(r.drop_chunk, kBase);
  EXPECT_EQ(r.chunk_bytes, big);
  EXPECT_EQ(pool.chunks(), 0u);
  EXPECT_EQ(pool.fd_of(kBase), -1);
}

TEST(CoherentPool, RunsNeverCoalesceAcrossTwoChunksThatHappenToBeAdjacent) {
  CoherentPool pool(kPage);
  pool.add_chunk(kBase, CoherentPool::kChunkBytes, false, 3);
  pool.add_chunk(kBase + CoherentPool::kChunkBytes, CoherentPool::kChunkBytes, false, 4);
  // A run as large as a chunk fits in neither alone... but kOwnChunkAbove is a quarter chunk, so
  // ask for every quarter: each must lie within one chunk.
  for (int i = 0; i < 8; ++i) {
    const CoherentPool::Place p = pool.allocate(CoherentPool::kOwnChunkAbove);
    ASSERT_NE(p.chunk, 0u) << i;
    EXPECT_LE(p.offset + CoherentPool::kOwnChunkAbove, CoherentPool::kChunkBytes) << i;
  }
  EXPECT_EQ(pool.allocate(kPage).chunk, 0u);
}

}  // namespace
}  // namespace softhca::runtime
