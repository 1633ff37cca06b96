// Conversions between enum ibv_rate (the IBA static-rate encoding, verbs.h) and link speeds.
// A "mult" is a multiple of the 2.5 Gb/s base rate; it is defined for the rates of the original
// StaticRate encoding (2.5 ... 120 Gb/s, values 2-10) only. Mb/s values are the data rates after
// line coding, as rdma-core reports them (e.g. FDR "14 Gb/s" is 14062 Mb/s).
#include <infiniband/verbs.h>

#include <array>

namespace {

struct RateRow {
  ibv_rate rate;
  int mult;  // multiple of 2.5 Gb/s, 0 for rates outside the original encoding
  int mbps;
};

constexpr std::array<RateRow, 24> kRates{{
    {IBV_RATE_2_5_GBPS, 1, 2500},
    {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},
    {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},
    {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},
    {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},
    {IBV_RATE_14_GBPS, 0, 14062},
    {IBV_RATE_56_GBPS, 0, 56250},
    {IBV_RATE_112_GBPS, 0, 112500},
    {IBV_RATE_168_GBPS, 0, 168750},
    {IBV_RATE_25_GBPS, 0, 25781},
    {IBV_RATE_100_GBPS, 0, 103125},
    {IBV_RATE_200_GBPS, 0, 206250},
    {IBV_RATE_300_GBPS, 0, 309375},
    {IBV_RATE_28_GBPS, 0, 28125},
    {IBV_RATE_50_GBPS, 0, 53125},
    {IBV_RATE_400_GBPS, 0, 425000},
    {IBV_RATE_600_GBPS, 0, 637500},
    {IBV_RATE_800_GBPS, 0, 850000},
    {IBV_RATE_1200_GBPS, 0, 1275000},
    {IBV_RATE_MAX, 0, 0},
}};

}  // namespace

extern "C" {

// The rate as a multiple of 2.5 Gb/s, or -1 for other rates.
int ibv_rate_to_mult(ibv_rate rate) {
  for (const RateRow& row : kRates) {
    if (row.rate == rate && row.mult != 0) return row.mult;
  }
  return -1;
}

// The rate that is mult times 2.5 Gb/s, or IBV_RATE_MAX when there is none.
ibv_rate mult_to_ibv_rate(int mult) {
  for (const RateRow& row : kRates) {
    if (row.mult != 0 && row.mult == mult) return row.rate;
  }
  return IBV_RATE_MAX;
}

// The rate in Mb/s, or -1 when it is not a rate.
int ibv_rate_to_mbps(ibv_rate rate) {
  for (const RateRow& row : kRates) {
    if (row.rate == rate && row.mbps != 0) return row.mbps;
  }
  return -1;
}

// The rate of exactly mbps Mb/s (as ibv_rate_to_mbps reports it), or IBV_RATE_MAX.
ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const RateRow& row : kRates) {
    if (row.mbps != 0 && row.mbps == mbps) return row.rate;
  }
  return IBV_RATE_MAX;
}

}  // extern "C"
