// Helpers shared by the packet tests: random field values within their wire widths, and resealing a
// hand-edited packet with fresh CRCs (as a sender that built it that way would have).
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "fabric/packet/packet.h"

namespace softhca::fabric::testing {

class Random {
 public:
  explicit Random(uint64_t seed) : rng_(seed) {}
  uint64_t upto(uint64_t max) { return std::uniform_int_distribution<uint64_t>(0, max)(rng_); }
  uint64_t u64() { return rng_(); }
  uint32_t u32() { return static_cast<uint32_t>(rng_()); }
  uint8_t u8() { return static_cast<uint8_t>(rng_()); }
  bool coin() { return (rng_() & 1) != 0; }
  std::vector<uint8_t> bytes(size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = u8();
    return v;
  }

 private:
  std::mt19937_64 rng_;
};

inline PacketFields random_fields(BthOpcode op, bool global, Random& r) {
  PacketFields f;
  f.vl = static_cast<uint8_t>(r.upto(15));
  f.sl = static_cast<uint8_t>(r.upto(15));
  f.dlid = Lid(static_cast<uint16_t>(r.upto(0xffff)));
  f.slid = Lid(static_cast<uint16_t>(r.upto(0xffff)));
  if (global) {
    GrhFields g;
    g.traffic_class = r.u8();
    g.flow_label = static_cast<uint32_t>(r.upto(0xfffff));
    g.hop_limit = r.u8();
    for (auto& b : g.sgid) b = r.u8();
    for (auto& b : g.dgid) b = r.u8();
    f.grh = g;
  }
  f.opcode = op;
  f.solicited = r.coin();
  f.migreq = r.coin();
  f.pkey = static_cast<uint16_t>(r.upto(0xffff));
  f.dest_qp = Qpn(static_cast<uint32_t>(r.upto(0xffffff)));
  f.ack_req = r.coin();
  f.psn = Psn(static_cast<uint32_t>(r.upto(0xffffff)));
  const OpcodeInfo info = opcode_info(op);
  if (info.deth) f.deth = DethFields{r.u32(), Qpn(static_cast<uint32_t>(r.upto(0xffffff)))};
  if (info.reth) f.reth = RethFields{r.u64(), RKey(r.u32()), r.u32()};
  if (info.atomic_eth) f.atomic_eth = AtomicEthFields{r.u64(), RKey(r.u32()), r.u64(), r.u64()};
  if (info.aeth) f.aeth = AethFields{r.u8(), static_cast<uint32_t>(r.upto(0xffffff))};
  if (info.atomic_ack_eth) f.atomic_ack = AtomicAckFields{r.u64()};
  if (info.immdt) f.imm = r.u32();
  if (info.ieth) f.ieth = IethFields{RKey(r.u32())};
  if (info.xrceth) f.xrceth = XrcethFields{r.u32() & 0xffffff};
  return f;
}

inline std::vector<uint8_t> build(const PacketFields& f, std::span<const uint8_t> payload) {
  std::vector<uint8_t> out(kMaxPacketBytes);
  out.resize(serialize(f, payload, out));
  return out;
}

// Rewrites ICRC and VCRC for the bytes in front of them (the length must already fit the LRH).
inline void reseal(std::vector<uint8_t>& p) {
  const size_t icrc_off = p.size() - kIcrcBytes - kVcrcBytes;
  const uint32_t icrc = compute_icrc(std::span<const uint8_t>(p).first(icrc_off));
  for (size_t i = 0; i < 4; ++i) p[icrc_off + i] = static_cast<uint8_t>(icrc >> (8 * i));
  const uint16_t vcrc = compute_vcrc(std::span<const uint8_t>(p).first(icrc_off + kIcrcBytes));
  p[p.size() - 2] = static_cast<uint8_t>(vcrc & 0xff);
  p[p.size() - 1] = static_cast<uint8_t>(vcrc >> 8);
}

// Rewrites only the VCRC, as a switch that corrupted the packet in its buffer would.
inline void reseal_vcrc(std::vector<uint8_t>& p) {
  const uint16_t vcrc = compute_vcrc(std::span<const uint8_t>(p).first(p.size() - kVcrcBytes));
  p[p.size() - 2] = static_cast<uint8_t>(vcrc & 0xff);
  p[p.size() - 1] = static_cast<uint8_t>(vcrc >> 8);
}

inline ParseStatus parse_status(std::span<const uint8_t> bytes) {
  PacketFields f;
  std::span<const uint8_t> payload;
  return parse(bytes, f, payload);
}

}  // namespace softhca::fabric::testing
