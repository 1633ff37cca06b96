// Link rates the timing model serializes at: PCIe after encoding and at the TLP layer as the
// pcie-bench model computes them (figures.md P1, P7, P8), InfiniBand after encoding (W5).
#include "sim/link_rate.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace softhca::sim {
namespace {

constexpr double kTwoDecimals = 0.005;  // the figures are given to two decimals

TEST(LinkRate, Gen3x8Is63_02GbpsAfterEncodingAnd57_88AtTheTlpLayer_P7) {
  EXPECT_NEAR(pcie_raw_gbps(3, 8), 63.02, kTwoDecimals);
  EXPECT_NEAR(pcie_tlp_gbps(3, 8, 256), 57.88, kTwoDecimals);
}

TEST(LinkRate, Gen3x16AndGen4x16MatchTheModelsFigures_P8) {
  EXPECT_NEAR(pcie_raw_gbps(3, 16), 126.03, kTwoDecimals);
  EXPECT_NEAR(pcie_tlp_gbps(3, 16, 256), 113.70, kTwoDecimals);
  EXPECT_NEAR(pcie_raw_gbps(4, 16), 252.06, kTwoDecimals);
  EXPECT_NEAR(pcie_tlp_gbps(4, 16, 256), 227.40, kTwoDecimals);
}

TEST(LinkRate, Gen1AndGen2Use8b10bEncoding_P1) {
  EXPECT_DOUBLE_EQ(pcie_raw_gbps(1, 1), 2.0);
  EXPECT_DOUBLE_EQ(pcie_raw_gbps(2, 4), 16.0);
  EXPECT_NEAR(pcie_raw_gbps(5, 16), 504.12, kTwoDecimals);
}

TEST(LinkRate, DllpTrafficTakesAShareThatShrinksWithALargerMps) {
  EXPECT_LT(pcie_tlp_efficiency(3, 8, 128), pcie_tlp_efficiency(3, 8, 1024));
  EXPECT_GT(pcie_tlp_efficiency(3, 8, 256), 0.9);
}

TEST(LinkRate, BadGenerationsWidthsAndMpsAreRejected) {
  EXPECT_THROW(pcie_raw_gbps(0, 8), std::invalid_argument);
  EXPECT_THROW(pcie_raw_gbps(6, 8), std::invalid_argument);
  EXPECT_THROW(pcie_raw_gbps(3, 12), std::invalid_argument);
  EXPECT_THROW(pcie_tlp_gbps(3, 8, 100), std::invalid_argument);
}

TEST(LinkRate, Edr4xCarries100GbpsAndHdr4x200_W5) {
  EXPECT_DOUBLE_EQ(ib_data_gbps(25.0, 4), 100.0);
  EXPECT_DOUBLE_EQ(ib_data_gbps(50.0, 4), 200.0);
}

TEST(LinkRate, ByteTimesAreIntegerFemtoseconds) {
  EXPECT_EQ(femtoseconds_per_byte(8.0), 1000000u);  // 1 ns per byte at 8 Gb/s
  EXPECT_EQ(femtoseconds_per_byte(100.0), 80000u);  // 80 ps per byte at EDR 4x
  EXPECT_THROW(femtoseconds_per_byte(0), std::invalid_argument);
}

}  // namespace
}  // namespace softhca::sim
