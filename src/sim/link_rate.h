// Link data rates for the timing model: PCIe per generation and width after line encoding (P1),
// and at the TLP layer after the link's own DLLP traffic (ACK and UpdateFC DLLPs at the rates the
// PCIe base spec recommends, and SKIP ordered sets), computed as the pcie-bench model does (P7, P8);
// InfiniBand per lane speed and width after encoding (W5). Rates in Gb/s (10^9 bit/s).
#pragma once
#include <cstdint>

namespace softhca::sim {

// P1: lanes x transfer rate x encoding efficiency (8b/10b for Gen1-2, 128b/130b for Gen3-5).
// Gen3 x8 = 63.02 Gb/s (P7). generation 1..5, lanes 1..32 (a power of two).
double pcie_raw_gbps(uint32_t generation, uint32_t lanes);

// The share of the raw rate left for TLPs: 1 - (ACK DLLP + UpdateFC DLLP + SKIP) overhead, with
// one 8-byte ACK and one 8-byte UpdateFC DLLP per the spec's recommended interval for this
// generation, width and MPS (P5) and a 4-symbol SKIP ordered set every 1538 symbols.
double pcie_tlp_efficiency(uint32_t generation, uint32_t lanes, uint32_t mps_bytes);

// P7, P8: Gen3 x8 MPS 256 = 57.88 Gb/s; Gen3 x16 = 113.70; Gen4 x16 = 227.40.
double pcie_tlp_gbps(uint32_t generation, uint32_t lanes, uint32_t mps_bytes);

// W5: data rate per lane (after encoding) x width. EDR 4x = 100 Gb/s.
double ib_data_gbps(double lane_gbps, uint32_t width);

// Serialization cost of one byte at `gbps`, in femtoseconds (integer, rounded to nearest), so a
// transfer of n bytes takes n * fs / 1000 picoseconds with no floating point at run time.
uint64_t femtoseconds_per_byte(double gbps);

}  // namespace softhca::sim
