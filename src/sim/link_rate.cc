#include "sim/link_rate.h"

#include <array>
#include <bit>
#include <cmath>
#include <stdexcept>

namespace softhca::sim {

namespace {

constexpr std::array<double, 5> kGigaTransfersPerLane = {2.5, 5.0, 8.0, 16.0, 32.0};  // P1

// The PCIe base spec's recommended maximum interval between ACK DLLPs (and between UpdateFC
// DLLPs), in symbol times, by width (x1, x2, x4, x8, x16, x32) and MPS (128 .. 4096 bytes):
// Tables 3-7, 3-8 and 3-9 (ACK) and 2-46, 2-47 and 2-48 (UpdateFC) of revision 5.0, the values
// the pcie-bench model uses. Gen3 and later share one table.
using IntervalTable = std::array<std::array<double, 6>, 6>;
constexpr IntervalTable kGen1Interval = {{
    {237, 416, 559, 1071, 2095, 4143},
    {128, 217, 289, 545, 1057, 2081},
    {73, 118, 154, 282, 538, 1050},
    {67, 107, 86, 150, 278, 534},
    {48, 72, 86, 150, 278, 534},
    {33, 45, 52, 84, 148, 276},
}};
constexpr IntervalTable kGen2Interval = {{
    {288, 467, 610, 1122, 2146, 4194},
    {179, 268, 340, 596, 1108, 2132},
    {124, 169, 205, 333, 589, 1101},
    {118, 158, 137, 201, 329, 585},
    {99, 123, 137, 201, 329, 585},
    {84, 96, 103, 135, 199, 237},
}};
constexpr IntervalTable kGen3Interval = {{
    {333, 512, 655, 1167, 2191, 4239},
    {224, 313, 385, 641, 1153, 2177},
    {169, 214, 250, 378, 634, 1146},
    {163, 203, 182, 246, 374, 630},
    {144, 168, 182, 246, 374, 630},
    {129, 141, 148, 180, 244, 372},
}};

constexpr double kDllpBytes = 8;           // P5: ACK and UpdateFC DLLPs on the wire
constexpr double kSkipSymbols = 4;         // a SKIP ordered set
constexpr double kSkipIntervalSymbols = 1538;

void check(uint32_t generation, uint32_t lanes) {
  if (generation < 1 || generation > kGigaTransfersPerLane.size()) {
    throw std::invalid_argument("PCIe generation must be 1..5");
  }
  if (lanes < 1 || lanes > 32 || !std::has_single_bit(lanes)) {
    throw std::invalid_argument("PCIe width must be x1, x2, x4, x8, x16 or x32");
  }
}

}  // namespace

double pcie_raw_gbps(uint32_t generation, uint32_t lanes) {
  check(generation, lanes);
  const double encoding = generation <= 2 ? 8.0 / 10.0 : 128.0 / 130.0;
  return kGigaTransfersPerLane[generation - 1] * encoding * lanes;
}

double pcie_tlp_efficiency(uint32_t generation, uint32_t lanes, uint32_t mps_bytes) {
  check(generation, lanes);
  if (mps_bytes < 128 || mps_bytes > 4096 || !std::has_single_bit(mps_bytes)) {
    throw std::invalid_argument("PCIe MPS must be a power of two in 128..4096");
  }
  const IntervalTable& t = generation == 1 ? kGen1Interval : generation == 2 ? kGen2Interval : kGen3Interval;
  const auto row = static_cast<size_t>(std::countr_zero(lanes));
  const auto col = static_cast<size_t>(std::countr_zero(mps_bytes) - 7);
  const double interval = t[row][col];
  const double overhead = kDllpBytes / interval + kDllpBytes / interval + kSkipSymbols / kSkipIntervalSymbols;
  return 1.0 - overhead;
}

double pcie_tlp_gbps(uint32_t generation, uint32_t lanes, uint32_t mps_bytes) {
  return pcie_raw_gbps(generation, lanes) * pcie_tlp_efficiency(generation, lanes, mps_bytes);
}

double ib_data_gbps(double lane_gbps, uint32_t width) { return lane_gbps * width; }

uint64_t femtoseconds_per_byte(double gbps) {
  if (!(gbps > 0)) throw std::invalid_argument("link rate must be positive");
  // 8 bits / (gbps * 1e9 bit/s) = 8e6 / gbps femtoseconds.
  return static_cast<uint64_t>(std::llround(8.0e6 / gbps));
}

}  // namespace softhca::sim
