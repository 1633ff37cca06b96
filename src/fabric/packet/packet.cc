#include "fabric/packet/packet.h"

#include <algorithm>
#include <cstring>

#include "fabric/packet/crc.h"

namespace softhca::fabric {
namespace {

constexpr size_t kCrcBytes = kIcrcBytes + kVcrcBytes;

// ICRC and VCRC go on the wire least significant byte first (see packet.h).
void put_crc32(uint8_t* p, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_crc16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xff);
  p[1] = static_cast<uint8_t>(v >> 8);
}
uint32_t get_crc32(const uint8_t* p) {
  uint32_t v = 0;
  for (size_t i = 4; i-- > 0;) v = (v << 8) | p[i];
  return v;
}
uint16_t get_crc16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

bool ext_headers_match(const PacketFields& f, const OpcodeInfo& info) {
  return f.deth.has_value() == info.deth && f.xrceth.has_value() == info.xrceth && f.reth.has_value() == info.reth &&
         f.atomic_eth.has_value() == info.atomic_eth && f.aeth.has_value() == info.aeth &&
         f.atomic_ack.has_value() == info.atomic_ack_eth && f.imm.has_value() == info.immdt &&
         f.ieth.has_value() == info.ieth;
}

// Appends one header struct at off.
template <class H>
void put(std::span<uint8_t> out, size_t& off, const H& h) {
  store_as(out.data() + off, h);
  off += sizeof(H);
}

// Writes the extension headers f carries, in the IBA order, at off.
void put_ext_headers(const PacketFields& f, std::span<uint8_t> out, size_t& off) {
  if (f.deth) {
    Deth h{};
    h.qkey = f.deth->qkey;
    h.rsv8_src_qp = f.deth->src_qp.value() & kQpnMask;
    put(out, off, h);
  }
  if (f.xrceth) {
    Xrceth h{};
    h.rsv8_srq = f.xrceth->srqn & 0xffffff;
    put(out, off, h);
  }
  if (f.reth) {
    Reth h{};
    h.va = f.reth->va;
    h.rkey = f.reth->rkey.value();
    h.dma_len = f.reth->dma_len;
    put(out, off, h);
  }
  if (f.atomic_eth) {
    AtomicEth h{};
    h.va = f.atomic_eth->va;
    h.rkey = f.atomic_eth->rkey.value();
    h.swap_add = f.atomic_eth->swap_add;
    h.compare = f.atomic_eth->compare;
    put(out, off, h);
  }
  if (f.aeth) {
    Aeth h{};
    h.set(f.aeth->syndrome, f.aeth->msn);
    put(out, off, h);
  }
  if (f.atomic_ack) {
    AtomicAckEth h{};
    h.orig_remote_data = f.atomic_ack->orig;
    put(out, off, h);
  }
  if (f.imm) {
    ImmDt h{};
    std::memcpy(h.data, &*f.imm, sizeof(h.data));
    put(out, off, h);
  }
  if (f.ieth) {
    Ieth h{};
    h.rkey = f.ieth->rkey.value();
    put(out, off, h);
  }
}

// Reads one header struct at off and steps past it. The caller has checked that it is there.
template <class H>
H take(std::span<const uint8_t> in, size_t& off) {
  const H h = load_as<H>(in.data() + off);
  off += sizeof(H);
  return h;
}

// Reads the extension headers info names, in the IBA order, from off. The caller has checked that
// info.ext_bytes() bytes are there.
void get_ext_headers(const OpcodeInfo& info, std::span<const uint8_t> in, size_t& off, PacketFields& f) {
  if (info.deth) {
    const Deth h = take<Deth>(in, off);
    f.deth = DethFields{h.qkey.get(), Qpn(h.src_qp())};
  }
  if (info.xrceth) {
    const Xrceth h = take<Xrceth>(in, off);
    f.xrceth = XrcethFields{h.srqn()};
  }
  if (info.reth) {
    const Reth h = take<Reth>(in, off);
    f.reth = RethFields{h.va.get(), RKey(h.rkey.get()), h.dma_len.get()};
  }
  if (info.atomic_eth) {
    const AtomicEth h = take<AtomicEth>(in, off);
    f.atomic_eth = AtomicEthFields{h.va.get(), RKey(h.rkey.get()), h.swap_add.get(), h.compare.get()};
  }
  if (info.aeth) {
    const Aeth h = take<Aeth>(in, off);
    f.aeth = AethFields{h.syndrome(), h.msn()};
  }
  if (info.atomic_ack_eth) {
    const AtomicAckEth h = take<AtomicAckEth>(in, off);
    f.atomic_ack = AtomicAckFields{h.orig_remote_data.get()};
  }
  if (info.immdt) {
    const ImmDt h = take<ImmDt>(in, off);
    uint32_t raw = 0;
    std::memcpy(&raw, h.data, sizeof(raw));
    f.imm = raw;
  }
  if (info.ieth) {
    const Ieth h = take<Ieth>(in, off);
    f.ieth = IethFields{RKey(h.rkey.get())};
  }
}

}  // namespace

std::string_view to_string(ParseStatus s) {
  switch (s) {
    case ParseStatus::kOk: return "ok";
    case ParseStatus::kTruncated: return "truncated";
    case ParseStatus::kBadLrh: return "bad LRH";
    case ParseStatus::kBadGrh: return "bad GRH";
    case ParseStatus::kBadOpcode: return "bad opcode";
    case ParseStatus::kBadLength: return "bad length";
    case ParseStatus::kBadIcrc: return "bad ICRC";
    case ParseStatus::kBadVcrc: return "bad VCRC";
    case ParseStatus::kBadPad: return "bad pad";
    case ParseStatus::kBadIp: return "bad IPv4 header";
    case ParseStatus::kBadUdp: return "bad UDP header";
  }
  return "unknown";
}

namespace {
size_t transport_bytes_of(const OpcodeInfo& info, size_t payload_bytes) {
  return kBthBytes + info.ext_bytes() + payload_bytes + pad_count(payload_bytes);
}
}  // namespace

size_t transport_bytes(const PacketFields& f, size_t payload_bytes) {
  const OpcodeInfo info = opcode_info(f.opcode);
  if (!info.valid || !ext_headers_match(f, info)) return 0;
  if (!info.has_payload && payload_bytes != 0) return 0;
  if (payload_bytes > kMaxPayloadBytes) return 0;
  return transport_bytes_of(info, payload_bytes);
}

size_t serialize_transport(const PacketFields& f, std::span<const uint8_t> payload, std::span<uint8_t> out) {
  const size_t total = transport_bytes(f, payload.size());
  if (total == 0 || out.size() < total) return 0;
  const uint8_t pad = pad_count(payload.size());
  size_t off = 0;

  Bth bth{};
  bth.set(static_cast<uint8_t>(f.opcode), f.solicited, f.migreq, pad, f.pkey, f.dest_qp.value(), f.ack_req,
          f.psn.value());
  put(out, off, bth);

  put_ext_headers(f, out, off);

  if (!payload.empty()) std::memcpy(out.data() + off, payload.data(), payload.size());
  off += payload.size();
  std::fill_n(out.data() + off, pad, uint8_t{0});
  off += pad;
  return off;
}

ParseStatus parse_transport(std::span<const uint8_t> bytes, PacketFields& out, std::span<const uint8_t>& payload) {
  if (bytes.size() < kBthBytes) return ParseStatus::kBadLength;
  size_t off = 0;
  const Bth bth = take<Bth>(bytes, off);
  const OpcodeInfo info = opcode_info(bth.opcode);
  if (!info.valid || bth.tver() != 0) return ParseStatus::kBadOpcode;
  if (bytes.size() - off < info.ext_bytes()) return ParseStatus::kBadLength;

  PacketFields f;
  get_ext_headers(info, bytes, off, f);

  // What is left is payload + pad.
  const size_t area = bytes.size() - off;
  const uint8_t pad = bth.pad_count();
  if (!info.has_payload) {
    if (area != 0) return ParseStatus::kBadLength;
    if (pad != 0) return ParseStatus::kBadPad;
  } else {
    if (pad > area) return ParseStatus::kBadPad;
    if (area - pad > kMaxPayloadBytes) return ParseStatus::kBadLength;
  }

  out.opcode = static_cast<BthOpcode>(bth.opcode);
  out.solicited = bth.se();
  out.migreq = bth.m();
  out.pkey = bth.p_key();
  out.dest_qp = Qpn(bth.dest_qp());
  out.ack_req = bth.ack_req();
  out.psn = Psn(bth.psn());
  out.deth = f.deth;
  out.xrceth = f.xrceth;
  out.reth = f.reth;
  out.atomic_eth = f.atomic_eth;
  out.aeth = f.aeth;
  out.atomic_ack = f.atomic_ack;
  out.imm = f.imm;
  out.ieth = f.ieth;
  payload = bytes.subspan(off, area - pad);
  return ParseStatus::kOk;
}

size_t wire_bytes(const PacketFields& f, size_t payload_bytes) {
  if (!f.has_lrh) return 0;
  const size_t transport = transport_bytes(f, payload_bytes);
  if (transport == 0) return 0;
  return kLrhBytes + (f.grh ? kGrhBytes : 0) + transport + kCrcBytes;
}

size_t serialize(const PacketFields& f, std::span<const uint8_t> payload, std::span<uint8_t> out) {
  const size_t total = wire_bytes(f, payload.size());
  if (total == 0 || out.size() < total) return 0;
  const size_t icrc_off = total - kCrcBytes;
  size_t off = 0;

  Lrh lrh{};
  lrh.set(f.vl, f.sl, f.grh ? Lnh::kIbaGlobal : Lnh::kIbaLocal, f.dlid.value(),
          static_cast<uint16_t>((total - kVcrcBytes) / kWordBytes), f.slid.value());
  put(out, off, lrh);

  if (f.grh) {
    Grh grh{};
    grh.set_word0(kGrhIpVersion, f.grh->traffic_class, f.grh->flow_label);
    grh.pay_len = static_cast<uint16_t>(total - kVcrcBytes - kLrhBytes - kGrhBytes);
    grh.next_header = kGrhNextHeaderIba;
    grh.hop_limit = f.grh->hop_limit;
    std::memcpy(grh.sgid, f.grh->sgid.data(), sizeof(grh.sgid));
    std::memcpy(grh.dgid, f.grh->dgid.data(), sizeof(grh.dgid));
    put(out, off, grh);
  }

  off += serialize_transport(f, payload, out.subspan(off, icrc_off - off));

  put_crc32(out.data() + icrc_off, compute_icrc(out.first(icrc_off)));
  put_crc16(out.data() + icrc_off + kIcrcBytes, compute_vcrc(out.first(icrc_off + kIcrcBytes)));
  return total;
}

ParseStatus parse(std::span<const uint8_t> bytes, PacketFields& out, std::span<const uint8_t>& payload) {
  out = PacketFields{};
  payload = {};

  // Link layer: the frame must be exactly PktLen words plus the VCRC, and the VCRC must hold.
  if (bytes.size() < kLrhBytes) return ParseStatus::kTruncated;
  const Lrh lrh = load_as<Lrh>(bytes.data());
  const size_t expected = size_t{lrh.pkt_len_words()} * kWordBytes + kVcrcBytes;
  if (bytes.size() < expected) return ParseStatus::kTruncated;
  if (bytes.size() > expected) return ParseStatus::kBadLrh;
  const size_t vcrc_off = bytes.size() - kVcrcBytes;
  if (compute_vcrc(bytes.first(vcrc_off)) != get_crc16(bytes.data() + vcrc_off)) return ParseStatus::kBadVcrc;

  if (lrh.lver() != 0) return ParseStatus::kBadLrh;
  if (lrh.lnh() != Lnh::kIbaLocal && lrh.lnh() != Lnh::kIbaGlobal) return ParseStatus::kBadLrh;
  const bool global = lrh.lnh() == Lnh::kIbaGlobal;

  // Network and transport layers. The ICRC sits in front of the VCRC; the base headers must fit.
  const size_t base_bytes = kLrhBytes + (global ? kGrhBytes : 0) + kBthBytes;
  if (vcrc_off < base_bytes + kIcrcBytes) return ParseStatus::kBadLength;
  const size_t icrc_off = vcrc_off - kIcrcBytes;
  size_t off = kLrhBytes;

  PacketFields f;
  if (global) {
    const Grh grh = load_as<Grh>(bytes.data() + off);
    if (grh.ip_version() != kGrhIpVersion || grh.next_header != kGrhNextHeaderIba ||
        grh.pay_len.get() != vcrc_off - kLrhBytes - kGrhBytes) {
      return ParseStatus::kBadGrh;
    }
    GrhFields g;
    g.traffic_class = grh.traffic_class();
    g.flow_label = grh.flow_label();
    g.hop_limit = grh.hop_limit;
    std::memcpy(g.sgid.data(), grh.sgid, g.sgid.size());
    std::memcpy(g.dgid.data(), grh.dgid, g.dgid.size());
    f.grh = g;
    off += kGrhBytes;
  }

  if (compute_icrc(bytes.first(icrc_off)) != get_crc32(bytes.data() + icrc_off)) return ParseStatus::kBadIcrc;

  std::span<const uint8_t> body;
  const ParseStatus st = parse_transport(bytes.subspan(off, icrc_off - off), f, body);
  if (st != ParseStatus::kOk) return st;

  f.vl = lrh.vl();
  f.sl = lrh.sl();
  f.dlid = Lid(lrh.dlid.get());
  f.slid = Lid(lrh.slid.get());
  out = f;
  payload = body;
  return ParseStatus::kOk;
}

uint32_t compute_icrc(std::span<const uint8_t> p) {
  const bool global = p.size() >= 2 && static_cast<Lnh>(p[1] & 0x3) == Lnh::kIbaGlobal;
  const size_t head_bytes = kLrhBytes + (global ? kGrhBytes : 0) + kBthBytes;
  std::array<uint8_t, kLrhBytes + kGrhBytes + kBthBytes> head{};
  const size_t n = std::min(head_bytes, p.size());
  std::copy_n(p.data(), n, head.data());

  // Sets the given bits of byte i of the masked copy to 1, if the input reaches that far.
  auto ones = [&](size_t i, uint8_t bits) {
    if (i < n) head[i] = static_cast<uint8_t>(head[i] | bits);
  };
  size_t bth_off = kLrhBytes;
  if (global) {
    for (size_t i = 0; i < kLrhBytes; ++i) ones(i, 0xff);  // a router may rewrite all of the LRH
    const size_t g = kLrhBytes;
    ones(g + 0, 0x0f);  // TClass high nibble (IPVer stays)
    ones(g + 1, 0xff);  // TClass low nibble, FlowLabel high nibble
    ones(g + 2, 0xff);  // FlowLabel
    ones(g + 3, 0xff);  // FlowLabel
    ones(g + 7, 0xff);  // HopLmt
    bth_off += kGrhBytes;
  } else {
    ones(0, 0xf0);  // VL: switches remap it hop by hop
  }
  ones(bth_off + 4, 0xff);  // BTH Resv8a (FECN/BECN)

  Crc32 crc;
  crc.update(std::span<const uint8_t>(head.data(), n));
  crc.update(p.subspan(n));
  return crc.value();
}

uint16_t compute_vcrc(std::span<const uint8_t> lrh_through_icrc) { return crc16_vcrc(lrh_through_icrc); }

bool rewrite_vl(std::span<uint8_t> packet, uint8_t vl) {
  if (packet.size() < kLrhBytes) return false;
  Lrh lrh = load_as<Lrh>(packet.data());
  if (packet.size() != size_t{lrh.pkt_len_words()} * kWordBytes + kVcrcBytes) return false;
  lrh.set_vl(vl);
  store_as(packet.data(), lrh);
  const size_t vcrc_off = packet.size() - kVcrcBytes;
  put_crc16(packet.data() + vcrc_off, compute_vcrc(packet.first(vcrc_off)));
  return true;
}

}  // namespace softhca::fabric
