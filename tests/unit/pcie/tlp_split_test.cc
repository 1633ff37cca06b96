#include "pcie/tlp_split.h"

#include <gtest/gtest.h>

#include <vector>

namespace softhca::pcie {
namespace {

TEST(TlpSplit, AnAlignedTransferIsCutIntoWholeUnits) {
  EXPECT_EQ(count_aligned_chunks(0x1000, 1024, 256), 4u);
}

TEST(TlpSplit, AnUnalignedStartAddsAPiece) {
  std::vector<std::pair<uint64_t, uint64_t>> pieces;
  for_each_aligned_chunk(0x10f0, 0x20, 0x100, [&](uint64_t a, uint64_t n) { pieces.emplace_back(a, n); });
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0], std::make_pair(uint64_t{0x10f0}, uint64_t{0x10}));
  EXPECT_EQ(pieces[1], std::make_pair(uint64_t{0x1100}, uint64_t{0x10}));
}

TEST(TlpSplit, ZeroLengthMakesNoPieces) { EXPECT_EQ(count_aligned_chunks(0x1234, 0, 64), 0u); }

}  // namespace
}  // namespace softhca::pcie
