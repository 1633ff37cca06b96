// InfiniBand routing and transport headers exactly as they sit on the wire (IBA vol 1, 7.7 LRH,
// 8.3 GRH, 9.2 BTH, 9.3 and the extended transport headers of RC, UC, UD and XRC). Left out: RDETH (RD),
// the CNP payload and raw packets. Sizes in bytes; LRH PktLen is in 4-byte words.
#pragma once
#include <cstddef>
#include <cstdint>

#include "base/endian.h"

namespace softhca::fabric {

// Header sizes, figures.md W1.
inline constexpr size_t kLrhBytes = 8;
inline constexpr size_t kGrhBytes = 40;
inline constexpr size_t kBthBytes = 12;
inline constexpr size_t kRethBytes = 16;
inline constexpr size_t kAethBytes = 4;
inline constexpr size_t kDethBytes = 8;
inline constexpr size_t kImmDtBytes = 4;
inline constexpr size_t kAtomicEthBytes = 28;
inline constexpr size_t kAtomicAckEthBytes = 8;
inline constexpr size_t kIethBytes = 4;
inline constexpr size_t kXrcethBytes = 4;
inline constexpr size_t kIcrcBytes = 4;
inline constexpr size_t kVcrcBytes = 2;

inline constexpr size_t kWordBytes = 4;  // unit of LRH PktLen and of the BTH pad (W2)

// LRH Link Next Header (IBA 7.7): what follows the LRH.
enum class Lnh : uint8_t {
  kRaw = 0,        // raw packet, no ICRC
  kIpNonIba = 1,   // raw IPv6, no ICRC
  kIbaLocal = 2,   // BTH follows
  kIbaGlobal = 3,  // GRH, then BTH
};

// Local Route Header (IBA 7.7).
struct Lrh {
  uint8_t vl_lver;  // VL<<4 | LVer
  uint8_t sl_lnh;   // SL<<4 | Rsv2<<2 | LNH
  Be16 dlid;
  Be16 pkt_len;  // Rsv5<<11 | PktLen: 4-byte words from the first LRH byte through the ICRC
  Be16 slid;

  static constexpr uint16_t kPktLenMask = 0x7ff;  // 11 bits

  [[nodiscard]] constexpr uint8_t vl() const { return static_cast<uint8_t>(vl_lver >> 4); }
  [[nodiscard]] constexpr uint8_t lver() const { return static_cast<uint8_t>(vl_lver & 0xf); }
  [[nodiscard]] constexpr uint8_t sl() const { return static_cast<uint8_t>(sl_lnh >> 4); }
  [[nodiscard]] constexpr Lnh lnh() const { return static_cast<Lnh>(sl_lnh & 0x3); }
  [[nodiscard]] constexpr uint16_t pkt_len_words() const {
    return static_cast<uint16_t>(pkt_len.get() & kPktLenMask);
  }
  constexpr void set_vl(uint8_t vl) { vl_lver = static_cast<uint8_t>(((vl & 0xf) << 4) | (vl_lver & 0xf)); }
  // Writes every field; LVer and the reserved bits are 0. Values are cut to their field widths.
  constexpr void set(uint8_t vl, uint8_t sl, Lnh next, uint16_t dlid_v, uint16_t words, uint16_t slid_v) {
    vl_lver = static_cast<uint8_t>((vl & 0xf) << 4);
    sl_lnh = static_cast<uint8_t>(((sl & 0xf) << 4) | static_cast<uint8_t>(next));
    dlid = dlid_v;
    pkt_len = static_cast<uint16_t>(words & kPktLenMask);
    slid = slid_v;
  }
};
static_assert(sizeof(Lrh) == kLrhBytes);
static_assert(offsetof(Lrh, sl_lnh) == 1);
static_assert(offsetof(Lrh, dlid) == 2);
static_assert(offsetof(Lrh, pkt_len) == 4);
static_assert(offsetof(Lrh, slid) == 6);

// Global Route Header (IBA 8.3): an IPv6 header in all but name.
struct Grh {
  Be32 ver_tclass_flow;  // IPVer<<28 | TClass<<20 | FlowLabel (20 bits)
  Be16 pay_len;          // bytes after the GRH through the ICRC
  uint8_t next_header;   // 0x1B: IBA transport (BTH follows)
  uint8_t hop_limit;
  uint8_t sgid[16];
  uint8_t dgid[16];

  static constexpr uint32_t kFlowLabelMask = 0xfffff;

  [[nodiscard]] constexpr uint8_t ip_version() const { return static_cast<uint8_t>(ver_tclass_flow.get() >> 28); }
  [[nodiscard]] constexpr uint8_t traffic_class() const {
    return static_cast<uint8_t>((ver_tclass_flow.get() >> 20) & 0xff);
  }
  [[nodiscard]] constexpr uint32_t flow_label() const { return ver_tclass_flow.get() & kFlowLabelMask; }
  constexpr void set_word0(uint8_t ip_ver, uint8_t tclass, uint32_t flow) {
    ver_tclass_flow = (static_cast<uint32_t>(ip_ver & 0xf) << 28) | (static_cast<uint32_t>(tclass) << 20) |
                      (flow & kFlowLabelMask);
  }
};
static_assert(sizeof(Grh) == kGrhBytes);
static_assert(offsetof(Grh, pay_len) == 4);
static_assert(offsetof(Grh, next_header) == 6);
static_assert(offsetof(Grh, hop_limit) == 7);
static_assert(offsetof(Grh, sgid) == 8);
static_assert(offsetof(Grh, dgid) == 24);

// Base Transport Header (IBA 9.2).
struct Bth {
  uint8_t opcode;
  uint8_t se_m_pad_tver;   // SE<<7 | M<<6 | PadCnt<<4 | TVer
  Be16 pkey;
  Be32 resv8a_dest_qp;     // Resv8a<<24 | DestQP; Resv8a carries FECN/BECN since IBA 1.2 and is variant
  Be32 ack_psn;            // AckReq<<31 | Resv7<<24 | PSN

  static constexpr uint32_t kQpMask = 0xffffff;
  static constexpr uint32_t kPsnMask = 0xffffff;

  [[nodiscard]] constexpr uint8_t raw_opcode() const { return opcode; }
  [[nodiscard]] constexpr bool se() const { return (se_m_pad_tver & 0x80) != 0; }
  [[nodiscard]] constexpr bool m() const { return (se_m_pad_tver & 0x40) != 0; }
  [[nodiscard]] constexpr uint8_t pad_count() const { return static_cast<uint8_t>((se_m_pad_tver >> 4) & 0x3); }
  [[nodiscard]] constexpr uint8_t tver() const { return static_cast<uint8_t>(se_m_pad_tver & 0xf); }
  [[nodiscard]] constexpr uint16_t p_key() const { return pkey.get(); }
  [[nodiscard]] constexpr uint32_t dest_qp() const { return resv8a_dest_qp.get() & kQpMask; }
  [[nodiscard]] constexpr bool ack_req() const { return (ack_psn.get() >> 31) != 0; }
  [[nodiscard]] constexpr uint32_t psn() const { return ack_psn.get() & kPsnMask; }
  // Writes every field; TVer, Resv8a and Resv7 are 0. Values are cut to their field widths.
  constexpr void set(uint8_t op, bool solicited, bool migreq, uint8_t pad, uint16_t p_key_v, uint32_t qp,
                     bool ack_request, uint32_t psn_v) {
    opcode = op;
    se_m_pad_tver = static_cast<uint8_t>((solicited ? 0x80 : 0) | (migreq ? 0x40 : 0) | ((pad & 0x3) << 4));
    pkey = p_key_v;
    resv8a_dest_qp = qp & kQpMask;
    ack_psn = (ack_request ? 0x80000000u : 0u) | (psn_v & kPsnMask);
  }
};
static_assert(sizeof(Bth) == kBthBytes);
static_assert(offsetof(Bth, se_m_pad_tver) == 1);
static_assert(offsetof(Bth, pkey) == 2);
static_assert(offsetof(Bth, resv8a_dest_qp) == 4);
static_assert(offsetof(Bth, ack_psn) == 8);

// RDMA Extended Transport Header (IBA 9.3): RDMA WRITE first/only and READ request.
struct Reth {
  Be64 va;
  Be32 rkey;
  Be32 dma_len;  // [bytes] length of the whole RDMA operation
};
static_assert(sizeof(Reth) == kRethBytes);
static_assert(offsetof(Reth, rkey) == 8);
static_assert(offsetof(Reth, dma_len) == 12);

// ACK Extended Transport Header (IBA 9.3); syndrome encoding in opcode.h.
struct Aeth {
  Be32 syndrome_msn;  // Syndrome<<24 | MSN (24 bits)

  static constexpr uint32_t kMsnMask = 0xffffff;

  [[nodiscard]] constexpr uint8_t syndrome() const { return static_cast<uint8_t>(syndrome_msn.get() >> 24); }
  [[nodiscard]] constexpr uint32_t msn() const { return syndrome_msn.get() & kMsnMask; }
  constexpr void set(uint8_t syndrome_v, uint32_t msn_v) {
    syndrome_msn = (static_cast<uint32_t>(syndrome_v) << 24) | (msn_v & kMsnMask);
  }
};
static_assert(sizeof(Aeth) == kAethBytes);

// Datagram Extended Transport Header (IBA 9.3): UD.
struct Deth {
  Be32 qkey;
  Be32 rsv8_src_qp;  // Rsv8<<24 | SrcQP

  [[nodiscard]] constexpr uint32_t src_qp() const { return rsv8_src_qp.get() & 0xffffff; }
};
static_assert(sizeof(Deth) == kDethBytes);
static_assert(offsetof(Deth, rsv8_src_qp) == 4);

// Immediate data (IBA 9.3): opaque bytes, copied verbatim from the sender's WQE to the receiver's CQE.
struct ImmDt {
  uint8_t data[4];
};
static_assert(sizeof(ImmDt) == kImmDtBytes);

// Atomic Extended Transport Header (IBA 9.3): CmpSwap and FetchAdd requests.
struct AtomicEth {
  Be64 va;
  Be32 rkey;
  Be64 swap_add;  // CmpSwap: the swap value; FetchAdd: the value to add
  Be64 compare;   // CmpSwap only
};
static_assert(sizeof(AtomicEth) == kAtomicEthBytes);
static_assert(offsetof(AtomicEth, rkey) == 8);
static_assert(offsetof(AtomicEth, swap_add) == 12);
static_assert(offsetof(AtomicEth, compare) == 20);

// Atomic ACK Extended Transport Header (IBA 9.3): the value the target held before the atomic.
struct AtomicAckEth {
  Be64 orig_remote_data;
};
static_assert(sizeof(AtomicAckEth) == kAtomicAckEthBytes);

// XRC Extended Transport Header (IBA 9.3): every XRC request, right after the BTH; the SRQ of the
// responder's XRC domain that takes the message.
struct Xrceth {
  Be32 rsv8_srq;  // Rsv8<<24 | XRCSRQ (24 bits)

  [[nodiscard]] constexpr uint32_t srqn() const { return rsv8_srq.get() & 0xffffff; }
};
static_assert(sizeof(Xrceth) == kXrcethBytes);

// Invalidate Extended Transport Header (IBA 9.3): SEND with invalidate.
struct Ieth {
  Be32 rkey;
};
static_assert(sizeof(Ieth) == kIethBytes);

}  // namespace softhca::fabric
