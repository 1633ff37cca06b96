// The 64-byte completion queue entry the device DMA-writes and the driver polls
// (mlx5_cqe64 layout, ../shared/reference/verbs-abi.md §6.3). Big-endian throughout.
// Ownership: entry n is valid for software when op_own's owner bit equals (n / nent) & 1.
#pragma once
#include <cstddef>
#include <cstdint>

#include "base/endian.h"

namespace softhca::hwif {

inline constexpr uint32_t kCqeBytes = 64;

enum class CqeOpcode : uint8_t {
  kReq = 0,
  kRespWrImm = 1,
  kRespSend = 2,
  kRespSendImm = 3,
  kRespSendInv = 4,
  kReqErr = 13,
  kRespErr = 14,
  kInvalid = 15,
};

// Error syndromes of an error CQE (mlx5 values; each maps to one ibv_wc_status).
enum class CqeSyndrome : uint8_t {
  kLocLenErr = 0x01,
  kLocQpOpErr = 0x02,
  kLocProtErr = 0x04,
  kWrFlushErr = 0x05,
  kMwBindErr = 0x06,
  kBadRespErr = 0x10,
  kLocAccessErr = 0x11,
  kRemInvReqErr = 0x12,
  kRemAccessErr = 0x13,
  kRemOpErr = 0x14,
  kRetryExcErr = 0x15,
  kRnrRetryExcErr = 0x16,
  kRemAbortErr = 0x22,
};

inline constexpr uint8_t kCqeOwnerBit = 0x01;
inline constexpr uint8_t kCqeSolicitedBit = 0x02;
inline constexpr uint32_t kCqeGrhBits = 0x30000000;  // flags_rqpn bits 28-29: GRH present

struct Cqe64 {
  uint8_t rsvd0[2];
  Be16 wqe_id;
  uint8_t rsvd4[13];
  uint8_t ml_path;
  uint8_t rsvd18[4];
  Be16 slid;
  Be32 flags_rqpn;  // GRH bits 28-29, SL bits 24-27, source QPN bits 0-23 (UD)
  uint8_t hds_ip_ext;
  uint8_t l4_hdr_type_etc;
  Be16 vlan_info;
  Be32 srqn_uidx;
  Be32 imm_inval_pkey;  // immediate data (network order) or pkey index
  uint8_t app;
  uint8_t app_op;
  Be16 app_info;
  Be32 byte_cnt;
  // The device clock (DeviceCaps::hca_core_clock_khz ticks) when the CQE was written: success CQEs
  // of a CQ created with kCqTimestamps (mlx5's CQE carries it at the same offset). 0 otherwise; an
  // error CQE has no such field (ErrCqe64 uses these bytes).
  Be64 timestamp;
  Be32 sop_drop_qpn;  // requester: WQE opcode<<24 | qpn; error CQE: same
  Be16 wqe_counter;
  uint8_t signature;
  uint8_t op_own;  // opcode<<4 | flags<<1 | owner

  [[nodiscard]] CqeOpcode opcode() const { return static_cast<CqeOpcode>(op_own >> 4); }
  [[nodiscard]] uint8_t owner() const { return op_own & kCqeOwnerBit; }
};
static_assert(sizeof(Cqe64) == 64);
static_assert(offsetof(Cqe64, wqe_id) == 2);
static_assert(offsetof(Cqe64, ml_path) == 17);
static_assert(offsetof(Cqe64, slid) == 22);
static_assert(offsetof(Cqe64, flags_rqpn) == 24);
static_assert(offsetof(Cqe64, srqn_uidx) == 32);
static_assert(offsetof(Cqe64, imm_inval_pkey) == 36);
static_assert(offsetof(Cqe64, byte_cnt) == 44);
static_assert(offsetof(Cqe64, timestamp) == 48);
static_assert(offsetof(Cqe64, sop_drop_qpn) == 56);
static_assert(offsetof(Cqe64, wqe_counter) == 60);
static_assert(offsetof(Cqe64, op_own) == 63);

// The error CQE overlays the same 64 bytes.
struct ErrCqe64 {
  uint8_t rsvd0[32];
  Be32 srqn;
  uint8_t rsvd36[18];
  uint8_t vendor_err_synd;
  uint8_t syndrome;
  Be32 s_wqe_opcode_qpn;
  Be16 wqe_counter;
  uint8_t signature;
  uint8_t op_own;
};
static_assert(sizeof(ErrCqe64) == 64);
static_assert(offsetof(ErrCqe64, srqn) == 32);
static_assert(offsetof(ErrCqe64, vendor_err_synd) == 54);
static_assert(offsetof(ErrCqe64, syndrome) == 55);
static_assert(offsetof(ErrCqe64, s_wqe_opcode_qpn) == 56);
static_assert(offsetof(ErrCqe64, wqe_counter) == 60);
static_assert(offsetof(ErrCqe64, op_own) == 63);

// Event queue entry: written by the device into the EQ ring before it raises the EQ's interrupt.
// Types are mlx5's event types (PRM "Event Queue Entry"); `element` is the 24-bit number of the
// object the event is about: the CQN of a completion or CQ error, the QPN of a QP event, the SRQN
// of an SRQ event; port events name the port in `port` and say what changed in `sub_type`.
inline constexpr uint32_t kEqeBytes = 16;
inline constexpr uint8_t kEqeTypeCompletion = 0x00;
inline constexpr uint8_t kEqeTypeCommEst = 0x02;             // IBV_EVENT_COMM_EST
inline constexpr uint8_t kEqeTypeSqDrained = 0x03;           // IBV_EVENT_SQ_DRAINED
inline constexpr uint8_t kEqeTypeCqError = 0x04;             // IBV_EVENT_CQ_ERR
inline constexpr uint8_t kEqeTypeWqCatastrophic = 0x05;      // IBV_EVENT_QP_FATAL
inline constexpr uint8_t kEqeTypePortChange = 0x09;          // IBV_EVENT_PORT_ACTIVE / PORT_ERR
inline constexpr uint8_t kEqeTypeWqInvalidRequest = 0x10;    // IBV_EVENT_QP_REQ_ERR
inline constexpr uint8_t kEqeTypeWqAccessError = 0x11;       // IBV_EVENT_QP_ACCESS_ERR
inline constexpr uint8_t kEqeTypeSrqLastWqe = 0x13;          // IBV_EVENT_QP_LAST_WQE_REACHED (a QPN)
inline constexpr uint8_t kEqeTypeSrqLimit = 0x14;            // IBV_EVENT_SRQ_LIMIT_REACHED (an SRQN)
inline constexpr uint8_t kEqePortDown = 0x01;                // sub_type of kEqeTypePortChange
inline constexpr uint8_t kEqePortActive = 0x04;
struct Eqe {
  uint8_t type;
  uint8_t sub_type;
  uint8_t port;
  uint8_t rsvd3;
  Be32 element;
  uint8_t rsvd8[7];
  uint8_t owner;  // pass number & 1, as for CQEs
};
static_assert(sizeof(Eqe) == kEqeBytes);
static_assert(offsetof(Eqe, sub_type) == 1);
static_assert(offsetof(Eqe, port) == 2);
static_assert(offsetof(Eqe, element) == 4);
static_assert(offsetof(Eqe, owner) == 15);

}  // namespace softhca::hwif
