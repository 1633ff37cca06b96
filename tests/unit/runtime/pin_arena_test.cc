// Where converted pages go and who uses them (src/runtime/pin_arena.h): a page at va sits at
// offset va mod kChunkBytes; a clash with another address's pages moves the run to the next chunk;
// an address's own reservation is reused only over holes; use counts per page, released ranges
// come back idle with the address they were counted for.
#include "runtime/pin_arena.h"

#include <gtest/gtest.h>

#include <vector>

namespace softhca::runtime {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kS = PinArena::kChunkBytes;
const PinArena::Holes kAllHoles = [](uint32_t, uint64_t, uint64_t) { return true; };
const PinArena::Holes kNoHoles = [](uint32_t, uint64_t, uint64_t) { return false; };

TEST(PinArena, ARunGoesAtItsAddressModuloTheChunkSizeIntoTheFirstChunkWhereThoseOffsetsAreFree) {
  PinArena a;
  const uint64_t va = 5 * kS + 0x123000;
  EXPECT_EQ(PinArena::offset_for(va), 0x123000u);
  EXPECT_EQ(a.place(va, kPage, kAllHoles), PinArena::kNoRoom) << "no chunk yet";
  const uint32_t c0 = a.add_chunk({0x7000'0000'0000, 3, 11});
  EXPECT_EQ(a.place(va, kPage, kAllHoles), 0);
  a.use(c0, 0x123000, 0x123000 + kPage, va - 0x123000);
  // Another address with the same offset clashes: the next chunk.
  EXPECT_EQ(a.place(va + kS, kPage, kAllHoles), PinArena::kNoRoom);
  const uint32_t c1 = a.add_chunk({0x7100'0000'0000, 4, 12});
  EXPECT_EQ(a.place(va + kS, kPage, kAllHoles), static_cast<int>(c1));
  // The same address over its own reservation: only where the file holds nothing.
  EXPECT_EQ(a.place(va, kPage, kAllHoles), 0);
  EXPECT_EQ(a.place(va, kPage, kNoHoles), 1) << "old pages of that address are still there";
  // Too long, or across a chunk's end: never.
  EXPECT_EQ(a.place(0, PinArena::kLargestRun + kPage, kAllHoles), PinArena::kNever);
  EXPECT_EQ(a.place(kS - kPage, 2 * kPage, kAllHoles), PinArena::kNever);
  EXPECT_EQ(a.chunk_of_inode(12), 1);
  EXPECT_EQ(a.chunk_of_view(0x7100'0000'0000 + kS - 1), 1);
  EXPECT_EQ(a.chunk_of_view(0x7100'0000'0000 + kS), -1);
}

TEST(PinArena, UsesCountPerPageAndARangeGoesIdleWhenItsLastPinGoes) {
  PinArena a;
  const uint32_t c = a.add_chunk({0x7000'0000'0000, 3, 11});
  a.use(c, 0, 3 * kPage, 0x10000);          // a whole buffer
  a.use(c, kPage, 2 * kPage, 0x10000);      // its middle page again
  EXPECT_TRUE(a.in_use(c, 0, 3 * kPage));
  EXPECT_FALSE(a.in_use(c, 0, 4 * kPage));
  EXPECT_EQ(a.bytes_in_use(), 3 * kPage);
  std::vector<PinArena::Idle> idle;
  a.release(c, 0, 3 * kPage, &idle);
  ASSERT_EQ(idle.size(), 2u) << "the outer pages, not the middle one";
  EXPECT_EQ(idle[0].offset, 0u);
  EXPECT_EQ(idle[0].end, kPage);
  EXPECT_EQ(idle[0].delta, 0x10000u);
  EXPECT_EQ(idle[1].offset, 2 * kPage);
  EXPECT_TRUE(a.in_use(c, kPage, 2 * kPage));
  idle.clear();
  a.release(c, kPage, 2 * kPage, &idle);
  ASSERT_EQ(idle.size(), 1u);
  EXPECT_EQ(idle[0].offset, kPage);
  EXPECT_EQ(a.bytes_in_use(), 0u);
}

TEST(PinArena, NeighbouringPinsMergeIntoOneCountedRangeAndSplitAgainOnRelease) {
  PinArena a;
  const uint32_t c = a.add_chunk({0x7000'0000'0000, 3, 11});
  for (uint64_t i = 0; i < 1000; ++i) a.use(c, i * kPage, (i + 1) * kPage, 0x40000000);
  EXPECT_TRUE(a.in_use(c, 0, 1000 * kPage));
  std::vector<PinArena::Idle> idle;
  a.release(c, 500 * kPage, 501 * kPage, &idle);
  ASSERT_EQ(idle.size(), 1u);
  EXPECT_EQ(idle[0].offset, 500 * kPage);
  EXPECT_FALSE(a.in_use(c, 0, 1000 * kPage));
  EXPECT_TRUE(a.in_use(c, 0, 500 * kPage));
  EXPECT_TRUE(a.in_use(c, 501 * kPage, 1000 * kPage));
  EXPECT_EQ(a.bytes_in_use(), 999 * kPage);
  a.reset();
  EXPECT_EQ(a.chunks(), 0u);
}

TEST(PinArena, BlocksRoundOutToSixtyFourKibibytes) {
  EXPECT_EQ(PinArena::block_down(PinArena::kBlockBytes + 5), PinArena::kBlockBytes);
  EXPECT_EQ(PinArena::block_up(PinArena::kBlockBytes + 5), 2 * PinArena::kBlockBytes);
  EXPECT_EQ(PinArena::block_up(PinArena::kBlockBytes), PinArena::kBlockBytes);
  EXPECT_EQ(PinArena::kChunkBytes % PinArena::kBlockBytes, 0u) << "a block never spans two chunks";
}

}  // namespace
}  // namespace softhca::runtime
