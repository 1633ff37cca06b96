// The control path between driver and device: a command interface in the spirit of mlx5's
// command queue. Each command is a pair of plain structs (native byte order: the mailbox is a
// software structure, not a PCIe payload) with a fixed opcode. Commands are not counted as PCIe
// traffic: the model counts the data path only (docs/model.md).
#pragma once
#include <cstdint>

#include "hwif/caps.h"

namespace softhca::hwif {

enum class CmdOpcode : uint16_t {
  kQueryDevice = 1,
  kQueryPort,
  kAllocPd,
  kDeallocPd,
  kCreateMkey,
  kDestroyMkey,
  kCreateEq,
  kDestroyEq,
  kCreateCq,
  kDestroyCq,
  kCreateSrq,
  kModifySrq,
  kQuerySrq,
  kDestroySrq,
  kCreateQp,
  kModifyQp,
  kQueryQp,
  kDestroyQp,
  kResizeCq,  // appended: opcodes are never renumbered
  kSetMadAgent,
  kBindService,
  kUnbindService,
  kTrackConnection,
  kUntrackConnection,
  kAttachMcast,
  kDetachMcast,
  kSetPortState,
  kModifyCq,
  kQueryClock,
  kModifyMkey,
  kOpenXrcd,
  kCloseXrcd,
  kOpenQp,
  kAllocDm,
  kFreeDm,
  kAllocMw,
  kDeallocMw,
};

struct NoOut {};

struct QueryDeviceIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kQueryDevice; };
struct QueryDeviceOut { DeviceCaps caps; };

struct QueryPortIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kQueryPort; uint8_t port = 1; };
struct QueryPortOut { PortCaps port; };

struct AllocPdIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kAllocPd; };
struct AllocPdOut { uint32_t pdn = 0; };
struct DeallocPdIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kDeallocPd; uint32_t pdn = 0; };

// Access rights of a memory key (same bit values as enum ibv_access_flags).
enum MkeyAccess : uint32_t {
  kAccessLocalWrite = 1,
  kAccessRemoteWrite = 2,
  kAccessRemoteRead = 4,
  kAccessRemoteAtomic = 8,
  kAccessMwBind = 16,     // an MR memory windows may be bound to
  kAccessZeroBased = 32,  // a window bind: the window's addresses start at 0
};
inline constexpr uint32_t kAccessRemote = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
struct CreateMkeyIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kCreateMkey;
  uint32_t pdn = 0;
  uint32_t access = 0;   // MkeyAccess bits
  uint64_t host_addr = 0;  // where the region starts in host (DMA) address space
  uint64_t iova = 0;       // the address the keys are used with
  uint64_t length = 0;
  // Device memory the range lies in (ibv_reg_dm_mr): host_addr is then its device address
  // (AllocDmOut::dma_addr + offset), and [host_addr, + length) must lie inside it (EINVAL).
  // 0: host memory.
  uint32_t dmn = 0;
};
struct CreateMkeyOut { uint32_t lkey = 0; uint32_t rkey = 0; };
struct DestroyMkeyIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kDestroyMkey; uint32_t lkey = 0; };
// ibv_rereg_mr: changes a key in place — its translation (host_addr, iova, length), its PD, its
// access, each when its bit is in `what` — and keeps the key itself. Atomic for the data path:
// every use after the command sees the new values, none the old ones. EINVAL for a key of
// another owner or none, a PD that does not exist, remote write or atomic without local write, or
// a length above max_mr_size; nothing changes then.
enum MkeyChange : uint32_t {
  kMkeyTranslation = 1u << 0,
  kMkeyPd = 1u << 1,
  kMkeyAccess = 1u << 2,
};
struct ModifyMkeyIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kModifyMkey;
  uint32_t lkey = 0;
  uint32_t what = 0;  // MkeyChange bits
  uint32_t pdn = 0;
  uint32_t access = 0;
  uint64_t host_addr = 0;
  uint64_t iova = 0;
  uint64_t length = 0;
};

// An event queue: a ring of Eqe in host memory and its MSI-X vector (the value the host kernel
// handed out, pcie::HostKernel::alloc_vector; the device raises it through pcie::HostBridge).
// The device writes an EQE only where the consumer index the driver last published through the
// EQ doorbell (uar.h kEqDoorbellOffset) leaves room; an event that finds the ring full waits in
// the device, and is written when a later doorbell frees a slot. An async EQ (one per context)
// also takes the port's events; QPs, CQs and SRQs name theirs at creation (async_eqn).
struct CreateEqIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kCreateEq;
  static constexpr uint64_t kNoVector = ~uint64_t{0};  // an EQ that raises no interrupt
  uint64_t ring_addr = 0;
  uint32_t log_nent = 0;
  uint64_t msi_vector = kNoVector;
  bool async_events = false;
};
struct CreateEqOut { uint32_t eqn = 0; };
struct DestroyEqIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kDestroyEq; uint32_t eqn = 0; };

inline constexpr uint32_t kNoEq = 0xffffffff;
// CreateCqIn::flags.
enum CqFlags : uint32_t {
  // The device writes its clock into every success CQE (Cqe64::timestamp): a CQ created for
  // IBV_WC_EX_WITH_COMPLETION_TIMESTAMP(_WALLCLOCK). Others leave the field 0 and read no clock.
  kCqTimestamps = 1u << 0,
};
struct CreateCqIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kCreateCq;
  uint64_t ring_addr = 0;   // nent * 64-byte CQEs, initialised to op_own = 0xf0
  uint64_t dbrec_addr = 0;  // CqDbRec
  uint32_t log_nent = 0;
  uint32_t eqn = kNoEq;     // where completion events go (kNoEq: no completion channel)
  uint32_t uar_index = 0;
  uint32_t async_eqn = kNoEq;  // where its CQ error event goes (kNoEq: nowhere)
  uint32_t flags = 0;       // CqFlags
};
struct CreateCqOut { uint32_t cqn = 0; };
struct DestroyCqIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kDestroyCq; uint32_t cqn = 0; };

// Moves a CQ to a new ring (ibv_resize_cq). The device switches atomically: every CQE it wrote
// before is in the old ring at free-running indices [consumer index, out.pi), every later one goes
// to the new ring, at index & (2^log_nent - 1) with owner bit (index >> log_nent) & 1. The driver
// copies the old ones over (it holds its CQ lock, so the consumer index is still). EINVAL when more
// than `cqe` CQEs are outstanding, or for a CQ of another owner.
struct ResizeCqIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kResizeCq;
  uint32_t cqn = 0;
  uint64_t ring_addr = 0;  // nent * 64-byte CQEs, initialised to op_own = 0xf0
  uint32_t log_nent = 0;
  uint32_t cqe = 0;        // the entries the caller asked for (< 2^log_nent)
};
struct ResizeCqOut { uint32_t pi = 0; };  // the producer index at the switch

// CQ moderation (ibv_modify_cq, IBV_CQ_ATTR_MODERATE): an armed CQ raises its event once
// `cq_count` CQEs that qualify for it were written since the arm, or `cq_period_us` microseconds
// after the first of them, whichever comes first. cq_count 0 or 1: every qualifying CQE raises it
// at once (no moderation); cq_period_us 0: the count alone decides. EINVAL above the device's
// DeviceCaps::max_cq_moderation_count / _period_us, or for a CQ of another owner.
struct ModifyCqIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kModifyCq;
  uint32_t cqn = 0;
  uint32_t cq_count = 0;
  uint32_t cq_period_us = 0;
};

// The device's free-running clock (DeviceCaps::hca_core_clock_khz ticks: 1 tick = 1 ns) now, and
// the wall clock (CLOCK_REALTIME, ns since the Unix epoch) at that same instant: what a driver needs
// to turn the ticks of a CQE into wall-clock time (mlx5's clock_info page serves the same purpose).
struct QueryClockIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kQueryClock; };
struct QueryClockOut {
  uint64_t ticks = 0;
  int64_t wall_ns = 0;
};

// XRC domains (IBA 11.2.4.x "XRC domain", ibv_open_xrcd(3)): every process that opens the same
// file (named by its device and inode, as the kernel does) gets the same domain; `anonymous`
// (fd -1) always makes a new one that only this process holds. `create`: O_CREAT, make the
// domain when none exists for the file; `exclusive`: O_EXCL, refuse one that exists. Both
// refusals are EINVAL, as the kernel's ib_uverbs_open_xrcd answers. A domain lives while any process holds it open (each open counts; a process's opens go
// when it does), and while XRC SRQs and TGT QPs are in it.
inline constexpr uint32_t kNoXrcd = 0;
struct OpenXrcdIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kOpenXrcd;
  uint64_t file_dev = 0;
  uint64_t file_ino = 0;
  bool anonymous = false;
  bool create = false;
  bool exclusive = false;
};
struct OpenXrcdOut { uint32_t xrcdn = 0; };
// Drops one open of the caller's. EINVAL when the caller holds none; EBUSY when it is the last
// open of all and XRC SRQs or TGT QPs are still in the domain (nothing changes then).
struct CloseXrcdIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kCloseXrcd; uint32_t xrcdn = 0; };

// Device memory (ibv_alloc_dm(3)): max_dm_size bytes of the device's own memory, handed out in
// whole pages (as mlx5's MEMIC), shared by the processes of a host. The CPU reaches an allocation
// through the BAR at kDeviceMemoryBarOffset + bar_offset (uar.h); the device at dma_addr
// (pcie::kDeviceMemoryDma and up), which never crosses PCIe. Zeroed when allocated. EINVAL for a
// length of 0 or above max_dm_size, or an alignment above kDmMaxLogAlign; ENOMEM when no run of
// free pages fits. An allocation goes with its process.
inline constexpr uint64_t kDmPageBytes = 4096;
inline constexpr uint32_t kDmMaxLogAlign = 17;  // a whole 128 KiB window
struct AllocDmIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kAllocDm;
  uint64_t length = 0;
  uint32_t log_align = 0;  // the start's alignment, log2 bytes (a page at least)
};
struct AllocDmOut {
  uint32_t dmn = 0;
  uint64_t bar_offset = 0;  // from the start of the device memory window
  uint64_t dma_addr = 0;
};
// EINVAL for an allocation of another process or none; EBUSY while memory keys lie in it.
struct FreeDmIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kFreeDm; uint32_t dmn = 0; };

// Memory windows (ibv_alloc_mw(3)): a key of the MR table that opens no memory until a bind WQE
// (wqe.h BindSeg) binds it to part of an MR of its PD; type 1 or 2 (IBV_MW_TYPE_*). EINVAL for a
// PD that does not exist or another type; ENOMEM when the key table is full. Dealloc unbinds it
// first; EINVAL for a window of another process or a key that is no window.
struct AllocMwIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kAllocMw; uint32_t pdn = 0; uint32_t type = 0; };
struct AllocMwOut { uint32_t rkey = 0; };
struct DeallocMwIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kDeallocMw; uint32_t rkey = 0; };

struct CreateSrqIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kCreateSrq;
  uint32_t pdn = 0;
  uint64_t ring_addr = 0;
  uint64_t dbrec_addr = 0;  // SrqDbRec
  uint32_t log_wqe_cnt = 0;
  uint32_t log_stride = 0;  // bytes per WQE, log2 (next segment + data segments)
  uint32_t limit = 0;       // armed when not 0: see ModifySrqIn
  uint32_t async_eqn = kNoEq;
  // An XRC SRQ (IBV_SRQT_XRC): its domain, which the caller must hold open, and the CQ its
  // receive completions go to (a TGT QP has none). kNoXrcd: a basic SRQ (cqn unused).
  uint32_t xrcdn = kNoXrcd;
  uint32_t cqn = 0;
};
struct CreateSrqOut { uint32_t srqn = 0; };
// Arms the SRQ limit (IBA 10.2.9.3): when the WQEs the SRQ holds drop below `limit`, the device
// raises SRQ_LIMIT_REACHED once and sets the limit back to 0 (disarmed). 0 disarms.
struct ModifySrqIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kModifySrq; uint32_t srqn = 0; uint32_t limit = 0; };
struct QuerySrqIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kQuerySrq; uint32_t srqn = 0; };
struct QuerySrqOut { uint32_t limit = 0; };
struct DestroySrqIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kDestroySrq; uint32_t srqn = 0; };

// Values of enum ibv_qp_type. XRC (IBA 9.8.x, 11.2.4): an INI QP is an RC requester whose
// messages name the SRQ they go to (XRCETH); a TGT QP is an RC responder with no queues of its
// own, in an XRC domain, that places each message through the XRC SRQ the message names.
enum class QpType : uint8_t { kRc = 2, kUc = 3, kUd = 4, kXrcIni = 9, kXrcTgt = 10 };
// The reliable transports: RC and both halves of XRC (ACKs, retries, READ and atomics).
constexpr bool is_reliable(QpType t) { return t == QpType::kRc || t == QpType::kXrcIni || t == QpType::kXrcTgt; }
constexpr bool is_xrc(QpType t) { return t == QpType::kXrcIni || t == QpType::kXrcTgt; }
enum class QpState : uint8_t { kReset = 0, kInit, kRtr, kRts, kSqd, kSqe, kErr };  // enum ibv_qp_state

inline constexpr uint32_t kNoSrq = 0xffffffff;
struct CreateQpIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kCreateQp;
  QpType type = QpType::kRc;
  uint32_t pdn = 0;
  uint32_t send_cqn = 0;
  uint32_t recv_cqn = 0;
  uint32_t srqn = kNoSrq;
  uint64_t sq_addr = 0;     // send ring: 2^log_sq_bbs basic blocks of 64 bytes
  uint32_t log_sq_bbs = 0;
  uint64_t rq_addr = 0;     // receive ring (unused with an SRQ)
  uint32_t log_rq_cnt = 0;
  uint32_t log_rq_stride = 0;
  uint64_t dbrec_addr = 0;  // QpDbRec
  uint32_t uar_index = 0;
  bool sq_sig_all = false;
  uint32_t async_eqn = kNoEq;  // where its affiliated events go
  // A TGT QP's domain (held open by the caller); it has no send or receive queue, CQs, PD or
  // SRQ. An INI QP has a send queue and send CQ only.
  uint32_t xrcdn = kNoXrcd;
};
struct CreateQpOut { uint32_t qpn = 0; };
// ibv_open_qp: a handle on an existing TGT QP of a domain the caller holds open (EINVAL for a
// QPN that is no TGT QP of that domain). A TGT QP lives while any handle is held: DestroyQpIn
// on it drops the caller's handle, and the QP goes with the last (IBA 11.2.4; the kernel's
// shared XRC target QPs). A process's handles go when it does.
struct OpenQpIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kOpenQp;
  uint32_t xrcdn = 0;
  uint32_t qpn = 0;
};

// Address vector of a connected QP's primary path.
struct AddressVector {
  uint16_t dlid = 0;
  uint8_t sl = 0;
  uint8_t src_path_bits = 0;
  uint8_t static_rate = 0;
  bool is_global = false;
  Gid dgid{};
  uint32_t flow_label = 0;
  uint8_t sgid_index = 0;
  uint8_t hop_limit = 0;
  uint8_t traffic_class = 0;
  uint8_t port_num = 0;
};

// Attribute mask bits: the values of enum ibv_qp_attr_mask (IBA 11.2.5.2, verbs.h).
enum QpAttrMask : uint32_t {
  kQpState = 1u << 0,
  kQpCurState = 1u << 1,
  kQpEnSqdAsyncNotify = 1u << 2,
  kQpAccessFlags = 1u << 3,
  kQpPkeyIndex = 1u << 4,
  kQpPort = 1u << 5,
  kQpQkey = 1u << 6,
  kQpAv = 1u << 7,
  kQpPathMtu = 1u << 8,
  kQpTimeout = 1u << 9,
  kQpRetryCnt = 1u << 10,
  kQpRnrRetry = 1u << 11,
  kQpRqPsn = 1u << 12,
  kQpMaxQpRdAtomic = 1u << 13,
  kQpAltPath = 1u << 14,
  kQpMinRnrTimer = 1u << 15,
  kQpSqPsn = 1u << 16,
  kQpMaxDestRdAtomic = 1u << 17,
  kQpPathMigState = 1u << 18,
  kQpCap = 1u << 19,
  kQpDestQpn = 1u << 20,
};

struct QpAttributes {
  QpState state = QpState::kReset;
  QpState cur_state = QpState::kReset;
  uint32_t qkey = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint32_t dest_qpn = 0;
  uint32_t access_flags = 0;  // MkeyAccess bits: what remote peers may do through this QP
  AddressVector av{};
  Mtu path_mtu = Mtu::k1024;
  uint16_t pkey_index = 0;
  uint8_t port_num = 1;
  uint8_t max_rd_atomic = 0;       // outstanding RDMA READ/atomic as initiator
  uint8_t max_dest_rd_atomic = 0;  // as responder
  uint8_t min_rnr_timer = 0;       // IBA encoding, table 45
  uint8_t timeout = 0;             // 4.096 us * 2^timeout; 0 = infinite
  uint8_t retry_cnt = 0;
  uint8_t rnr_retry = 0;           // 7 = infinite
  bool sq_draining = false;
  bool en_sqd_async_notify = false;  // with kQpEnSqdAsyncNotify on RTS->SQD: SQ_DRAINED when drained
};

struct ModifyQpIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kModifyQp;
  uint32_t qpn = 0;
  uint32_t attr_mask = 0;
  QpAttributes attr{};
};
struct QueryQpIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kQueryQp; uint32_t qpn = 0; };
struct QueryQpOut { QpAttributes attr{}; };
struct DestroyQpIn { static constexpr CmdOpcode kOpcode = CmdOpcode::kDestroyQp; uint32_t qpn = 0; };

// QP1, the general services interface (IBA 13.5), as a user-space connection manager shares it
// (docs/cm.md, "QP1 on a shared device"): a UD QP of the caller's becomes a MAD agent. CM MADs
// that reach the port's QP1 go to the agent they belong to (a REQ or SIDR_REQ: the agent that bound
// its service ID; every other CM message: the agent whose number is in the top bits of the
// communication or request ID it names), as UD receives; what the agent sends leaves as from QP1.
inline constexpr uint32_t kMadAgentIdShift = 22;  // a CM id is agent << 22 | the agent's own 22 bits
struct SetMadAgentIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kSetMadAgent;
  uint32_t qpn = 0;  // a UD QP of the caller's
};
struct SetMadAgentOut { uint32_t agent = 0; };  // 1..kMaxMadAgents-1 (hca/mad_agents.h)
// Binds a service ID (rdma_cm: port space << 16 | port) to an agent: REQs and SIDR_REQs for it
// are delivered there. Port 0 in the low 16 bits with `pick_port`: the device picks a free port of
// that port space. EADDRINUSE when another agent holds it; the same agent may bind it again
// (counted, unbound as many times).
struct BindServiceIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kBindService;
  uint32_t qpn = 0;  // the agent's QP
  bool pick_port = false;
  uint64_t service_id = 0;
};
struct BindServiceOut { uint64_t service_id = 0; };
struct UnbindServiceIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kUnbindService;
  uint32_t qpn = 0;
  uint64_t service_id = 0;
};
// An established connection of an agent, for the device to end as a kernel ends a dying process's:
// when the agent's QP goes (its process exits or dies), the device sends the peer a DREQ from QP1
// for each connection still tracked. Untracked when the library disconnects it itself.
struct TrackConnectionIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kTrackConnection;
  uint32_t qpn = 0;             // the agent's QP
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t remote_qpn = 0;      // the peer's data QP (DREQ "Remote QPN/EECN")
  uint16_t dlid = 0;            // the peer's port (InfiniBand)
  bool global = false;          // with a GRH to dgid (always on Ethernet)
  Gid dgid{};
};
struct UntrackConnectionIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kUntrackConnection;
  uint32_t qpn = 0;
  uint32_t local_comm_id = 0;
};

// ibv_attach_mcast / ibv_detach_mcast (IBA 10.5): a UD QP of the caller's takes the datagrams
// sent to a multicast group (GID, and LID on InfiniBand).
struct AttachMcastIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kAttachMcast;
  uint32_t qpn = 0;
  Gid gid{};
  uint16_t lid = 0;
};
struct DetachMcastIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kDetachMcast;
  uint32_t qpn = 0;
  Gid gid{};
  uint16_t lid = 0;
};

// The port's logical state as its management would set it (an SM's PortInfo Set, `ibportstate ...
// disable`, a cable pulled): down, the port neither sends nor takes packets and every async EQ gets
// PORT_ERR; up again, PORT_ACTIVE. Setting the state it has already is a no-op (no event).
struct SetPortStateIn {
  static constexpr CmdOpcode kOpcode = CmdOpcode::kSetPortState;
  uint8_t port = 1;
  bool active = true;
};

}  // namespace softhca::hwif
