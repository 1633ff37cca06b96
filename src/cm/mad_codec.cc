#include "cm/mad_codec.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "base/endian.h"

namespace softhca::cm {
namespace {

// Byte offsets in the common MAD header (IBA 13.4.3).
constexpr size_t kHdrBaseVersion = 0;
constexpr size_t kHdrMgmtClass = 1;
constexpr size_t kHdrClassVersion = 2;
constexpr size_t kHdrMethod = 3;
constexpr size_t kHdrStatus = 4;
constexpr size_t kHdrClassSpecific = 6;
constexpr size_t kHdrTid = 8;
constexpr size_t kHdrAttributeId = 16;
constexpr size_t kHdrAttributeModifier = 20;
constexpr uint8_t kMethodResponseBit = 0x80;

// Field access inside the CM message data, at the CM offsets of the IBA tables (MAD byte 24 = CM
// byte 0). Bit fields are named as the tables do: the highest bit and the width, bit 7 = MSB.
class Writer {
 public:
  explicit Writer(uint8_t* cm_data) : d_(cm_data) {}
  void u8(size_t off, uint8_t v) { d_[off] = v; }
  void u16(size_t off, uint16_t v) { store_as(d_ + off, Be16(v)); }
  void u24(size_t off, uint32_t v) {
    d_[off] = static_cast<uint8_t>(v >> 16);
    d_[off + 1] = static_cast<uint8_t>(v >> 8);
    d_[off + 2] = static_cast<uint8_t>(v);
  }
  void u32(size_t off, uint32_t v) { store_as(d_ + off, Be32(v)); }
  void u64(size_t off, uint64_t v) { store_as(d_ + off, Be64(v)); }
  // ORs v, cut to width bits, into bits hi..hi-width+1 of byte off (the message starts zeroed).
  void bits(size_t off, int hi, int width, uint32_t v) {
    const uint32_t mask = (1u << width) - 1;
    d_[off] = static_cast<uint8_t>(d_[off] | ((v & mask) << (hi - width + 1)));
  }
  void flag(size_t off, int bit, bool v) { bits(off, bit, 1, v ? 1 : 0); }
  void raw(size_t off, std::span<const uint8_t> b) { std::memcpy(d_ + off, b.data(), b.size()); }
  template <size_t N>
  void private_data(size_t off, const PrivateData<N>& p) {
    std::memcpy(d_ + off, p.bytes.data(), std::min(p.length, N));
  }

 private:
  uint8_t* d_;
};

class Reader {
 public:
  explicit Reader(const uint8_t* cm_data) : d_(cm_data) {}
  [[nodiscard]] uint8_t u8(size_t off) const { return d_[off]; }
  [[nodiscard]] uint16_t u16(size_t off) const { return load_as<Be16>(d_ + off).get(); }
  [[nodiscard]] uint32_t u24(size_t off) const {
    return (static_cast<uint32_t>(d_[off]) << 16) | (static_cast<uint32_t>(d_[off + 1]) << 8) | d_[off + 2];
  }
  [[nodiscard]] uint32_t u32(size_t off) const { return load_as<Be32>(d_ + off).get(); }
  [[nodiscard]] uint64_t u64(size_t off) const { return load_as<Be64>(d_ + off).get(); }
  [[nodiscard]] uint8_t bits(size_t off, int hi, int width) const {
    return static_cast<uint8_t>((d_[off] >> (hi - width + 1)) & ((1u << width) - 1));
  }
  [[nodiscard]] bool flag(size_t off, int bit) const { return bits(off, bit, 1) != 0; }
  template <size_t N>
  void raw(size_t off, std::array<uint8_t, N>& out) const { std::memcpy(out.data(), d_ + off, N); }
  template <size_t N>
  void private_data(size_t off, PrivateData<N>& p) const {
    std::memcpy(p.bytes.data(), d_ + off, N);
    p.length = N;
  }

 private:
  const uint8_t* d_;
};

// ---- REQ (Table 106) ----------------------------------------------------------------------------
// A path is 44 bytes: primary at CM byte 52, alternate at 96. Offsets below are within the path.
constexpr size_t kReqPrimaryPath = 52;
constexpr size_t kReqAlternatePath = 96;
constexpr size_t kReqPrivateData = 140;

void put_path(Writer& w, size_t at, const ReqPath& p) {
  w.u16(at + 0, p.local_lid.value());
  w.u16(at + 2, p.remote_lid.value());
  w.raw(at + 4, p.local_gid);
  w.raw(at + 20, p.remote_gid);
  w.u32(at + 36, (p.flow_label & 0xfffff) << 12);  // Flow Label: bits 31..12 of the word; then 6 reserved
  w.bits(at + 39, 5, 6, p.packet_rate);
  w.u8(at + 40, p.traffic_class);
  w.u8(at + 41, p.hop_limit);
  w.bits(at + 42, 7, 4, p.sl);
  w.flag(at + 42, 3, p.subnet_local);
  w.bits(at + 43, 7, 5, p.local_ack_timeout);
}

ReqPath get_path(const Reader& r, size_t at) {
  ReqPath p;
  p.local_lid = Lid(r.u16(at + 0));
  p.remote_lid = Lid(r.u16(at + 2));
  std::array<uint8_t, 16> g{};
  r.raw(at + 4, g);
  p.local_gid = g;
  r.raw(at + 20, g);
  p.remote_gid = g;
  p.flow_label = r.u32(at + 36) >> 12;
  p.packet_rate = r.bits(at + 39, 5, 6);
  p.traffic_class = r.u8(at + 40);
  p.hop_limit = r.u8(at + 41);
  p.sl = r.bits(at + 42, 7, 4);
  p.subnet_local = r.flag(at + 42, 3);
  p.local_ack_timeout = r.bits(at + 43, 7, 5);
  return p;
}

void put(Writer& w, const Req& m) {
  w.u32(0, m.local_comm_id.value());
  w.u24(5, m.vendor_id);
  w.u64(8, m.service_id.value());
  w.u64(16, m.local_ca_guid);
  w.u32(28, m.local_qkey);
  w.u24(32, m.local_qpn.value());
  w.u8(35, m.responder_resources);
  w.u24(36, m.local_eecn);
  w.u8(39, m.initiator_depth);
  w.u24(40, m.remote_eecn);
  w.bits(43, 7, 5, m.remote_cm_response_timeout);
  w.bits(43, 2, 2, static_cast<uint8_t>(m.transport_type));
  w.flag(43, 0, m.end_to_end_flow_control);
  w.u24(44, m.starting_psn.value());
  w.bits(47, 7, 5, m.local_cm_response_timeout);
  w.bits(47, 2, 3, m.retry_count);
  w.u16(48, m.pkey);
  w.bits(50, 7, 4, m.path_mtu);
  w.flag(50, 3, m.rdc_exists);
  w.bits(50, 2, 3, m.rnr_retry_count);
  w.bits(51, 7, 4, m.max_cm_retries);
  w.flag(51, 3, m.srq);
  w.bits(51, 2, 3, m.extended_transport_type);
  put_path(w, kReqPrimaryPath, m.primary);
  put_path(w, kReqAlternatePath, m.alternate);
  w.flag(kReqAlternatePath + 43, 2, m.sap_supported);  // CM byte 139 bit 2
  w.private_data(kReqPrivateData, m.private_data);
}

DecodeStatus get(const Reader& r, Req& m) {
  m.local_comm_id = CommId(r.u32(0));
  m.vendor_id = r.u24(5);
  m.service_id = ServiceId(r.u64(8));
  m.local_ca_guid = r.u64(16);
  m.local_qkey = r.u32(28);
  m.local_qpn = Qpn(r.u24(32));
  m.responder_resources = r.u8(35);
  m.local_eecn = r.u24(36);
  m.initiator_depth = r.u8(39);
  m.remote_eecn = r.u24(40);
  m.remote_cm_response_timeout = r.bits(43, 7, 5);
  m.transport_type = static_cast<TransportType>(r.bits(43, 2, 2));
  m.end_to_end_flow_control = r.flag(43, 0);
  m.starting_psn = Psn(r.u24(44));
  m.local_cm_response_timeout = r.bits(47, 7, 5);
  m.retry_count = r.bits(47, 2, 3);
  m.pkey = r.u16(48);
  m.path_mtu = r.bits(50, 7, 4);
  m.rdc_exists = r.flag(50, 3);
  m.rnr_retry_count = r.bits(50, 2, 3);
  m.max_cm_retries = r.bits(51, 7, 4);
  m.srq = r.flag(51, 3);
  m.extended_transport_type = r.bits(51, 2, 3);
  m.primary = get_path(r, kReqPrimaryPath);
  m.alternate = get_path(r, kReqAlternatePath);
  m.sap_supported = r.flag(kReqAlternatePath + 43, 2);
  r.private_data(kReqPrivateData, m.private_data);
  return DecodeStatus::kOk;
}

// ---- MRA (Table 107) ----------------------------------------------------------------------------
void put(Writer& w, const Mra& m) {
  w.u32(0, m.local_comm_id.value());
  w.u32(4, m.remote_comm_id.value());
  w.bits(8, 7, 2, static_cast<uint8_t>(m.message_mraed));
  w.bits(9, 7, 5, m.service_timeout);
  w.private_data(10, m.private_data);
}

DecodeStatus get(const Reader& r, Mra& m) {
  m.local_comm_id = CommId(r.u32(0));
  m.remote_comm_id = CommId(r.u32(4));
  const uint8_t which = r.bits(8, 7, 2);
  if (which > static_cast<uint8_t>(MraedMessage::kLap)) return DecodeStatus::kBadField;
  m.message_mraed = static_cast<MraedMessage>(which);
  m.service_timeout = r.bits(9, 7, 5);
  r.private_data(10, m.private_data);
  return DecodeStatus::kOk;
}

// ---- REJ (Table 108) ----------------------------------------------------------------------------
void put(Writer& w, const Rej& m) {
  w.u32(0, m.local_comm_id.value());
  w.u32(4, m.remote_comm_id.value());
  w.bits(8, 7, 2, static_cast<uint8_t>(m.message_rejected));
  w.bits(9, 7, 7, m.ari_length);
  w.u16(10, static_cast<uint16_t>(m.reason));
  w.raw(12, m.ari);
  w.private_data(84, m.private_data);
}

DecodeStatus get(const Reader& r, Rej& m) {
  m.local_comm_id = CommId(r.u32(0));
  m.remote_comm_id = CommId(r.u32(4));
  const uint8_t which = r.bits(8, 7, 2);
  if (which > static_cast<uint8_t>(RejectedMessage::kOther)) return DecodeStatus::kBadField;
  m.message_rejected = static_cast<RejectedMessage>(which);
  m.ari_length = r.bits(9, 7, 7);
  if (m.ari_length > kRejAriBytes) return DecodeStatus::kBadField;
  m.reason = static_cast<RejReason>(r.u16(10));
  r.raw(12, m.ari);
  r.private_data(84, m.private_data);
  return DecodeStatus::kOk;
}

// ---- REP (Table 110) ----------------------------------------------------------------------------
void put(Writer& w, const Rep& m) {
  w.u32(0, m.local_comm_id.value());
  w.u32(4, m.remote_comm_id.value());
  w.u32(8, m.local_qkey);
  w.u24(12, m.local_qpn.value());
  w.u8(15, static_cast<uint8_t>(m.vendor_id >> 16));
  w.u24(16, m.local_eecn);
  w.u8(19, static_cast<uint8_t>(m.vendor_id >> 8));
  w.u24(20, m.starting_psn.value());
  w.u8(23, static_cast<uint8_t>(m.vendor_id));
  w.u8(24, m.responder_resources);
  w.u8(25, m.initiator_depth);
  w.bits(26, 7, 5, m.target_ack_delay);
  w.bits(26, 2, 2, m.failover_accepted);
  w.flag(26, 0, m.end_to_end_flow_control);
  w.bits(27, 7, 3, m.rnr_retry_count);
  w.flag(27, 4, m.srq);
  w.u64(28, m.local_ca_guid);
  w.private_data(36, m.private_data);
}

DecodeStatus get(const Reader& r, Rep& m) {
  m.local_comm_id = CommId(r.u32(0));
  m.remote_comm_id = CommId(r.u32(4));
  m.local_qkey = r.u32(8);
  m.local_qpn = Qpn(r.u24(12));
  m.vendor_id = (static_cast<uint32_t>(r.u8(15)) << 16) | (static_cast<uint32_t>(r.u8(19)) << 8) | r.u8(23);
  m.local_eecn = r.u24(16);
  m.starting_psn = Psn(r.u24(20));
  m.responder_resources = r.u8(24);
  m.initiator_depth = r.u8(25);
  m.target_ack_delay = r.bits(26, 7, 5);
  m.failover_accepted = r.bits(26, 2, 2);
  m.end_to_end_flow_control = r.flag(26, 0);
  m.rnr_retry_count = r.bits(27, 7, 3);
  m.srq = r.flag(27, 4);
  m.local_ca_guid = r.u64(28);
  r.private_data(36, m.private_data);
  return DecodeStatus::kOk;
}

// ---- RTU, DREQ, DREP (Tables 111-113) -----------------------------------------------------------
void put(Writer& w, const Rtu& m) {
  w.u32(0, m.local_comm_id.value());
  w.u32(4, m.remote_comm_id.value());
  w.private_data(8, m.private_data);
}

DecodeStatus get(const Reader& r, Rtu& m) {
  m.local_comm_id = CommId(r.u32(0));
  m.remote_comm_id = CommId(r.u32(4));
  r.private_data(8, m.private_data);
  return DecodeStatus::kOk;
}

void put(Writer& w, const Dreq& m) {
  w.u32(0, m.local_comm_id.value());
  w.u32(4, m.remote_comm_id.value());
  w.u24(8, m.remote_qpn.value());
  w.private_data(12, m.private_data);
}

DecodeStatus get(const Reader& r, Dreq& m) {
  m.local_comm_id = CommId(r.u32(0));
  m.remote_comm_id = CommId(r.u32(4));
  m.remote_qpn = Qpn(r.u24(8));
  r.private_data(12, m.private_data);
  return DecodeStatus::kOk;
}

void put(Writer& w, const Drep& m) {
  w.u32(0, m.local_comm_id.value());
  w.u32(4, m.remote_comm_id.value());
  w.private_data(8, m.private_data);
}

DecodeStatus get(const Reader& r, Drep& m) {
  m.local_comm_id = CommId(r.u32(0));
  m.remote_comm_id = CommId(r.u32(4));
  r.private_data(8, m.private_data);
  return DecodeStatus::kOk;
}

// ---- SIDR_REQ, SIDR_REP (Tables 119, 120) -------------------------------------------------------
void put(Writer& w, const SidrReq& m) {
  w.u32(0, m.request_id);
  w.u16(4, m.pkey);
  w.u64(8, m.service_id.value());
  w.private_data(16, m.private_data);
}

DecodeStatus get(const Reader& r, SidrReq& m) {
  m.request_id = r.u32(0);
  m.pkey = r.u16(4);
  m.service_id = ServiceId(r.u64(8));
  r.private_data(16, m.private_data);
  return DecodeStatus::kOk;
}

void put(Writer& w, const SidrRep& m) {
  w.u32(0, m.request_id);
  w.u8(4, static_cast<uint8_t>(m.status));
  w.u8(5, m.additional_info_length);
  w.u16(6, static_cast<uint16_t>(m.vendor_id >> 8));
  w.u24(8, m.qpn.value());
  w.u8(11, static_cast<uint8_t>(m.vendor_id));
  w.u64(12, m.service_id.value());
  w.u32(20, m.qkey);
  w.raw(24, m.additional_info);
  w.private_data(96, m.private_data);
}

DecodeStatus get(const Reader& r, SidrRep& m) {
  m.request_id = r.u32(0);
  m.status = static_cast<SidrStatus>(r.u8(4));
  m.additional_info_length = r.u8(5);
  if (m.additional_info_length > kSidrRepInfoBytes) return DecodeStatus::kBadField;
  m.vendor_id = (static_cast<uint32_t>(r.u16(6)) << 8) | r.u8(11);
  m.qpn = Qpn(r.u24(8));
  m.service_id = ServiceId(r.u64(12));
  m.qkey = r.u32(20);
  r.raw(24, m.additional_info);
  r.private_data(96, m.private_data);
  return DecodeStatus::kOk;
}

template <class M>
DecodeStatus decode_as(const Reader& r, CmMessage& out) {
  M m;
  const DecodeStatus s = get(r, m);
  if (s == DecodeStatus::kOk) out = m;
  return s;
}

}  // namespace

std::string_view to_string(DecodeStatus s) {
  switch (s) {
    case DecodeStatus::kOk: return "ok";
    case DecodeStatus::kTooShort: return "shorter than a 256-byte MAD";
    case DecodeStatus::kBadBaseVersion: return "MAD BaseVersion not 1";
    case DecodeStatus::kBadClass: return "MgmtClass not CM (0x07)";
    case DecodeStatus::kBadClassVersion: return "CM ClassVersion not 2";
    case DecodeStatus::kBadMethod: return "Method not SEND";
    case DecodeStatus::kUnsupportedAttribute: return "CM attribute not supported (ClassPortInfo, LAP, APR)";
    case DecodeStatus::kUnknownAttribute: return "unknown CM AttributeID";
    case DecodeStatus::kBadField: return "CM message field with a reserved value";
  }
  return "?";
}

AttributeId attribute_of(const CmMessage& m) {
  static constexpr AttributeId kIds[] = {AttributeId::kReq,  AttributeId::kMra,  AttributeId::kRej,
                                         AttributeId::kRep,  AttributeId::kRtu,  AttributeId::kDreq,
                                         AttributeId::kDrep, AttributeId::kSidrReq, AttributeId::kSidrRep};
  static_assert(std::size(kIds) == std::variant_size_v<CmMessage>);
  return kIds[m.index()];
}

bool decode_mad_header(std::span<const uint8_t> bytes, MadHeader& out) {
  if (bytes.size() < kMadHeaderBytes) return false;
  const uint8_t* p = bytes.data();
  out.base_version = p[kHdrBaseVersion];
  out.mgmt_class = p[kHdrMgmtClass];
  out.class_version = p[kHdrClassVersion];
  out.method = p[kHdrMethod];
  out.status = load_as<Be16>(p + kHdrStatus).get();
  out.class_specific = load_as<Be16>(p + kHdrClassSpecific).get();
  out.transaction_id = load_as<Be64>(p + kHdrTid).get();
  out.attribute_id = load_as<Be16>(p + kHdrAttributeId).get();
  out.attribute_modifier = load_as<Be32>(p + kHdrAttributeModifier).get();
  return true;
}

void encode_mad_header(const MadHeader& h, std::span<uint8_t, kMadHeaderBytes> out) {
  std::fill(out.begin(), out.end(), uint8_t{0});
  uint8_t* p = out.data();
  p[kHdrBaseVersion] = h.base_version;
  p[kHdrMgmtClass] = h.mgmt_class;
  p[kHdrClassVersion] = h.class_version;
  p[kHdrMethod] = h.method;
  store_as(p + kHdrStatus, Be16(h.status));
  store_as(p + kHdrClassSpecific, Be16(h.class_specific));
  store_as(p + kHdrTid, Be64(h.transaction_id));
  store_as(p + kHdrAttributeId, Be16(h.attribute_id));
  store_as(p + kHdrAttributeModifier, Be32(h.attribute_modifier));
}

void encode(const CmMad& m, std::span<uint8_t, kMadBytes> out) {
  std::fill(out.begin(), out.end(), uint8_t{0});
  MadHeader h;
  h.status = m.status;
  h.class_specific = m.class_specific;
  h.transaction_id = m.transaction_id;
  h.attribute_id = static_cast<uint16_t>(attribute_of(m.message));
  h.attribute_modifier = m.attribute_modifier;
  encode_mad_header(h, out.first<kMadHeaderBytes>());
  Writer w(out.data() + kMadHeaderBytes);
  std::visit([&w](const auto& msg) { put(w, msg); }, m.message);
}

MadBytes encode(const CmMad& m) {
  MadBytes out;
  encode(m, out);
  return out;
}

DecodeStatus decode(std::span<const uint8_t> bytes, CmMad& out) {
  if (bytes.size() < kMadBytes) return DecodeStatus::kTooShort;
  MadHeader h;
  (void)decode_mad_header(bytes, h);
  if (h.base_version != kMadBaseVersion) return DecodeStatus::kBadBaseVersion;
  if (h.mgmt_class != kMgmtClassCm) return DecodeStatus::kBadClass;
  if (h.class_version != kCmClassVersion) return DecodeStatus::kBadClassVersion;
  if (h.method != kMadMethodSend) return DecodeStatus::kBadMethod;  // includes the R bit
  static_assert(kMadMethodSend < kMethodResponseBit);

  const Reader r(bytes.data() + kMadHeaderBytes);
  CmMessage msg;
  DecodeStatus s = DecodeStatus::kOk;
  switch (static_cast<AttributeId>(h.attribute_id)) {
    case AttributeId::kReq: s = decode_as<Req>(r, msg); break;
    case AttributeId::kMra: s = decode_as<Mra>(r, msg); break;
    case AttributeId::kRej: s = decode_as<Rej>(r, msg); break;
    case AttributeId::kRep: s = decode_as<Rep>(r, msg); break;
    case AttributeId::kRtu: s = decode_as<Rtu>(r, msg); break;
    case AttributeId::kDreq: s = decode_as<Dreq>(r, msg); break;
    case AttributeId::kDrep: s = decode_as<Drep>(r, msg); break;
    case AttributeId::kSidrReq: s = decode_as<SidrReq>(r, msg); break;
    case AttributeId::kSidrRep: s = decode_as<SidrRep>(r, msg); break;
    case AttributeId::kClassPortInfo:
    case AttributeId::kLap:
    case AttributeId::kApr: return DecodeStatus::kUnsupportedAttribute;
    default: return DecodeStatus::kUnknownAttribute;
  }
  if (s != DecodeStatus::kOk) return s;
  out.transaction_id = h.transaction_id;
  out.attribute_modifier = h.attribute_modifier;
  out.status = h.status;
  out.class_specific = h.class_specific;
  out.message = std::move(msg);
  return DecodeStatus::kOk;
}

}  // namespace softhca::cm
