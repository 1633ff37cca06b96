// The InfiniBand CM messages (IBA vol 1, 12.6 Tables 106-120) as plain decoded structs: every field
// of the tables, host byte order, each value no wider than its wire field (encode() cuts wider ones).
// Private data is the whole fixed-size wire field; a decoded message always has the full length.
// LAP and APR (alternate path migration) are not modelled: mad_codec decodes them as unsupported.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>

#include "base/psn.h"
#include "base/strong_id.h"

namespace softhca::cm {

// Communication ID: the 32-bit id each end gives its side of a connection (IBA 12.6.2). 0 means "none"
// (a REJ sent before the rejecting side allocated one).
using CommId = StrongId<struct CommIdTag, uint32_t>;
// Service ID: what a REQ or SIDR_REQ asks to reach (IBA 12.6.5, A3); rdma_cm builds it from the port
// space and port (cma_header.h).
using ServiceId = StrongId<struct ServiceIdTag, uint64_t>;
// A port GID, in wire order.
using Gid = std::array<uint8_t, 16>;

// Private data of one message: the wire field of N bytes and how many of them the sender meant.
// The wire carries all N (zero padded); decode() gives length N since the receiver cannot tell.
template <size_t N>
struct PrivateData {
  static constexpr size_t kCapacity = N;
  std::array<uint8_t, N> bytes{};
  size_t length = 0;  // [bytes] <= N

  // Copies up to N bytes of data; the rest of the field is zeroed. Returns false (and copies only N)
  // when data is longer than the field.
  bool assign(std::span<const uint8_t> data) {
    bytes.fill(0);
    const size_t n = std::min(data.size(), N);
    std::copy_n(data.begin(), n, bytes.begin());
    length = n;
    return data.size() <= N;
  }
  [[nodiscard]] std::span<const uint8_t> view() const { return std::span<const uint8_t>(bytes).first(std::min(length, N)); }
  bool operator==(const PrivateData&) const = default;
};

// Private data field sizes (IBA 12.6, Tables 106-120; rdmacm.md 4.3).
inline constexpr size_t kReqPrivateDataBytes = 92;
inline constexpr size_t kMraPrivateDataBytes = 222;
inline constexpr size_t kRejPrivateDataBytes = 148;
inline constexpr size_t kRepPrivateDataBytes = 196;
inline constexpr size_t kRtuPrivateDataBytes = 224;
inline constexpr size_t kDreqPrivateDataBytes = 220;
inline constexpr size_t kDrepPrivateDataBytes = 224;
inline constexpr size_t kSidrReqPrivateDataBytes = 216;
inline constexpr size_t kSidrRepPrivateDataBytes = 136;
// REJ Additional Rejection Information and SIDR_REP Additional Information (Tables 108, 120).
inline constexpr size_t kRejAriBytes = 72;
inline constexpr size_t kSidrRepInfoBytes = 72;

// REQ Transport Service Type (Table 106).
enum class TransportType : uint8_t { kRc = 0, kUc = 1, kRd = 2, kXrc = 3 };

// REJ reasons (IBA Table 109; rdmacm.md 4.9). Any 16-bit value may arrive; these are the named ones.
enum class RejReason : uint16_t {
  kNoQp = 1,
  kNoEec = 2,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupported = 5,
  kInvalidCommId = 6,
  kInvalidCommInstance = 7,
  kInvalidServiceId = 8,
  kInvalidTransportType = 9,
  kStaleConnection = 10,
  kRdcNotExist = 11,
  kInvalidGid = 12,
  kInvalidLid = 13,
  kInvalidSl = 14,
  kInvalidTrafficClass = 15,
  kInvalidHopLimit = 16,
  kInvalidPacketRate = 17,
  kInvalidAltGid = 18,
  kInvalidAltLid = 19,
  kInvalidAltSl = 20,
  kInvalidAltTrafficClass = 21,
  kInvalidAltHopLimit = 22,
  kInvalidAltPacketRate = 23,
  kPortCmRedirect = 24,
  kPortRedirect = 25,
  kInvalidMtu = 26,
  kInsufficientRespResources = 27,
  kConsumerDefined = 28,
  kInvalidRnrRetry = 29,
  kDuplicateLocalCommId = 30,
  kInvalidClassVersion = 31,
  kInvalidFlowLabel = 32,
  kInvalidAltFlowLabel = 33,
  kVendorOptionNotSupported = 35,
};

// Which message a REJ refuses (Table 108 "Message REJected") and an MRA delays (Table 107 "Message
// MRAed"): 2 bits on the wire, 3 is reserved and refused by decode().
enum class RejectedMessage : uint8_t { kReq = 0, kRep = 1, kOther = 2 };
enum class MraedMessage : uint8_t { kReq = 0, kRep = 1, kLap = 2 };

// SIDR_REP Status (Table 120).
enum class SidrStatus : uint8_t {
  kSuccess = 0,
  kServiceIdNotSupported = 1,  // no listener for the service ID
  kRejected = 2,
  kNoQp = 3,
  kRedirect = 4,
  kUnsupportedVersion = 5,
};

// One path of a REQ (Table 106, primary at CM bytes 52-95, alternate at 96-139).
struct ReqPath {
  Lid local_lid;           // RoCE: 0xFFFF (permissive) when routed
  Lid remote_lid;
  Gid local_gid{};         // the REQ sender's port GID
  Gid remote_gid{};        // the receiver's port GID
  uint32_t flow_label = 0;      // 20 bits
  uint8_t packet_rate = 0;      // 6 bits, IB rate enum
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint8_t sl = 0;               // 4 bits
  bool subnet_local = false;
  uint8_t local_ack_timeout = 0;  // 5 bits, 4.096 us * 2^x
  bool operator==(const ReqPath&) const = default;
};

// REQ (Table 106): request for communication.
struct Req {
  CommId local_comm_id;
  uint32_t vendor_id = 0;         // 24 bits, ECE vendor (newer kernels; 0 unless ECE is set)
  ServiceId service_id;
  uint64_t local_ca_guid = 0;
  uint32_t local_qkey = 0;        // 0 for RC
  Qpn local_qpn;                  // 24 bits
  uint8_t responder_resources = 0;
  uint32_t local_eecn = 0;        // 24 bits
  uint8_t initiator_depth = 0;
  uint32_t remote_eecn = 0;       // 24 bits
  uint8_t remote_cm_response_timeout = 0;  // 5 bits, 4.096 us * 2^x
  TransportType transport_type = TransportType::kRc;
  bool end_to_end_flow_control = false;
  Psn starting_psn;               // the PSN the sender's receive queue expects
  uint8_t local_cm_response_timeout = 0;   // 5 bits
  uint8_t retry_count = 0;        // 3 bits
  uint16_t pkey = 0xffff;
  uint8_t path_mtu = 0;           // 4 bits, IB MTU enum (1 = 256 ... 5 = 4096)
  bool rdc_exists = false;
  uint8_t rnr_retry_count = 0;    // 3 bits
  uint8_t max_cm_retries = 0;     // 4 bits
  bool srq = false;
  uint8_t extended_transport_type = 0;  // 3 bits (1 = XRC)
  ReqPath primary;
  ReqPath alternate;              // all zero when there is none (rdma_cm never sends one)
  bool sap_supported = false;
  PrivateData<kReqPrivateDataBytes> private_data;
  bool operator==(const Req&) const = default;
};

// MRA (Table 107): message receipt acknowledgement, "more time needed".
struct Mra {
  CommId local_comm_id;
  CommId remote_comm_id;
  MraedMessage message_mraed = MraedMessage::kReq;
  uint8_t service_timeout = 0;    // 5 bits, 4.096 us * 2^x
  PrivateData<kMraPrivateDataBytes> private_data;
  bool operator==(const Mra&) const = default;
};

// REJ (Table 108).
struct Rej {
  CommId local_comm_id;           // 0 when rejecting a REQ before giving it an id
  CommId remote_comm_id;          // the id of the REQ/REP sender
  RejectedMessage message_rejected = RejectedMessage::kReq;
  uint8_t ari_length = 0;         // 7 bits, <= kRejAriBytes
  RejReason reason = RejReason::kConsumerDefined;
  std::array<uint8_t, kRejAriBytes> ari{};
  PrivateData<kRejPrivateDataBytes> private_data;
  bool operator==(const Rej&) const = default;
};

// REP (Table 110): reply to a REQ.
struct Rep {
  CommId local_comm_id;
  CommId remote_comm_id;
  uint32_t local_qkey = 0;
  Qpn local_qpn;                  // 24 bits
  uint32_t vendor_id = 0;         // 24 bits, ECE (split over CM bytes 15, 19, 23 on the wire)
  uint32_t local_eecn = 0;        // 24 bits
  Psn starting_psn;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;   // 5 bits
  uint8_t failover_accepted = 0;  // 2 bits
  bool end_to_end_flow_control = false;
  uint8_t rnr_retry_count = 0;    // 3 bits
  bool srq = false;
  uint64_t local_ca_guid = 0;
  PrivateData<kRepPrivateDataBytes> private_data;
  bool operator==(const Rep&) const = default;
};

// RTU (Table 111): ready to use.
struct Rtu {
  CommId local_comm_id;
  CommId remote_comm_id;
  PrivateData<kRtuPrivateDataBytes> private_data;
  bool operator==(const Rtu&) const = default;
};

// DREQ (Table 112): disconnect request.
struct Dreq {
  CommId local_comm_id;
  CommId remote_comm_id;
  Qpn remote_qpn;                 // 24 bits: the receiver's QPN (Remote QPN/EECN)
  PrivateData<kDreqPrivateDataBytes> private_data;
  bool operator==(const Dreq&) const = default;
};

// DREP (Table 113): disconnect reply.
struct Drep {
  CommId local_comm_id;
  CommId remote_comm_id;
  PrivateData<kDrepPrivateDataBytes> private_data;
  bool operator==(const Drep&) const = default;
};

// SIDR_REQ (Table 119): service ID resolution request (UD).
struct SidrReq {
  uint32_t request_id = 0;
  uint16_t pkey = 0xffff;
  ServiceId service_id;
  PrivateData<kSidrReqPrivateDataBytes> private_data;
  bool operator==(const SidrReq&) const = default;
};

// SIDR_REP (Table 120).
struct SidrRep {
  uint32_t request_id = 0;
  SidrStatus status = SidrStatus::kSuccess;
  uint8_t additional_info_length = 0;  // <= kSidrRepInfoBytes
  uint32_t vendor_id = 0;         // 24 bits, ECE (CM bytes 6-7 and 11 on the wire)
  Qpn qpn;                        // 24 bits
  ServiceId service_id;
  uint32_t qkey = 0;
  std::array<uint8_t, kSidrRepInfoBytes> additional_info{};  // ClassPortInfo on a redirect
  PrivateData<kSidrRepPrivateDataBytes> private_data;
  bool operator==(const SidrRep&) const = default;
};

using CmMessage = std::variant<Req, Mra, Rej, Rep, Rtu, Dreq, Drep, SidrReq, SidrRep>;

}  // namespace softhca::cm
