// Link parameters the TLP byte model needs (figures.md P2-P6, K1, K5). Bytes throughout.
#pragma once
#include <cstdint>

namespace softhca::pcie {

struct PcieConfig {
  uint32_t mps_bytes = 256;          // max payload size (P7, P8 use 256)
  uint32_t mrrs_bytes = 512;         // max read request size (P7, P8 use 512)
  uint32_t completion_bytes = 128;   // read completions are cut at this aligned boundary (RCB multiple, K5)
  // Per-TLP bytes beyond the payload: header + 8 bytes of framing (P2). With 64-bit addresses
  // and no ECRC: MWr 16+8, MRd 16+8, CplD 12+8 (P3, P4).
  uint32_t mwr_overhead_bytes = 24;
  uint32_t mrd_overhead_bytes = 24;
  uint32_t cpld_overhead_bytes = 20;
  uint32_t write_combine_bytes = 64;  // CPU write-combining buffer: BlueFlame chunk size (K2)
};

// The header accounting of Kalia et al. (K1): 26 B per request TLP, 22 B per completion, with
// 128-byte read completions (K5). Reproduces the worked example K6.
inline constexpr PcieConfig kalia_atc16_config() {
  PcieConfig c;
  c.completion_bytes = 128;
  c.mwr_overhead_bytes = 26;
  c.mrd_overhead_bytes = 26;
  c.cpld_overhead_bytes = 22;
  return c;
}

}  // namespace softhca::pcie
