// Device-side contexts of the queue objects: what the device keeps about each CQ, EQ, SRQ and QP
// (ring addresses, sizes, counters, transport state). Created and destroyed by commands; used by
// the data path under the device lock. They live in the device region (several processes map it
// at different addresses): plain bytes, no pointers, variable-size arrays as region offsets.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "base/units.h"
#include "hca/send_wqe.h"
#include "hca/xrc_domain.h"
#include "hwif/cmd.h"
#include "hwif/cqe.h"

namespace softhca::hca {

// Events that find the ring full (pi - ci = nent) wait in the device, each as a flag of the object
// it is about (CompletionQueue, QueuePair, SharedReceiveQueue) or, for port events, in the EQ's
// own short list: `held` counts them all, and while any is held a new event waits behind them.
// The EQ doorbell that frees slots writes them (Device::write_held_events).
struct EventQueue {
  static constexpr uint32_t kHeldPortEvents = 4;
  uint64_t ring = 0;
  uint32_t log_nent = 0;
  uint32_t pi = 0;  // next entry to write (free-running)
  uint64_t msi_vector = hwif::CreateEqIn::kNoVector;  // what the host kernel handed out
  uint32_t users = 0;  // CQs reporting to it
  bool in_error = false;  // a DMA fault on the ring: no more events
  bool async_events = false;  // a context's async EQ: takes the port's events
  uint32_t ci = 0;    // consumer index the driver last published (EQ doorbell), free-running
  uint32_t held = 0;  // events waiting for room
  uint32_t held_port_count = 0;
  std::array<uint8_t, kHeldPortEvents> held_port{};  // hwif::kEqePort* sub-types, oldest first
};

struct CompletionQueue {
  uint64_t ring = 0;
  uint64_t dbrec = 0;
  uint32_t log_nent = 0;
  uint32_t pi = 0;  // next CQE to write (free-running); owner bit = (pi >> log_nent) & 1
  uint32_t eqn = hwif::kNoEq;
  bool armed = false;
  bool armed_solicited_only = false;
  bool in_error = false;  // overrun, or a DMA fault on the ring or doorbell record: no more CQEs
  bool timestamps = false;  // hwif::kCqTimestamps: success CQEs carry the device clock
  uint32_t users = 0;  // QPs and SRQs attached
  uint32_t async_eqn = hwif::kNoEq;  // where its CQ_ERR goes
  bool completion_held = false;  // a completion event waits for room in EQ eqn
  bool error_held = false;       // a CQ error event waits for room in EQ async_eqn
  // Moderation (hwif::ModifyCqIn): while armed, the event waits for mod_count qualifying CQEs or
  // for mod_deadline (mod_period_us after the first of them), whichever comes first.
  uint16_t mod_count = 0;
  uint16_t mod_period_us = 0;
  uint32_t mod_pending = 0;          // qualifying CQEs written since the arm, event not yet raised
  Picoseconds mod_deadline{-1};      // -1: no moderation timer running
  uint32_t event_pi = 0;             // pi when the last completion event was raised (Completer::arm)
  // The consumer index last read from the doorbell record: the driver only moves it on, so while
  // pi is less than a ring ahead of it no CQE can overrun, and the record is not read (Completer::write).
  uint32_t ci_seen = 0;
};

struct SharedReceiveQueue {
  uint32_t pdn = 0;
  uint64_t ring = 0;
  uint64_t dbrec = 0;
  uint32_t log_wqe_cnt = 0;
  uint32_t log_stride = 0;
  uint16_t head = 0;       // index of the next WQE to consume (follows next_wqe_index links)
  uint16_t consumed = 0;   // WQEs consumed (16-bit, compared with the doorbell record counter)
  uint16_t posted_cached = 0;
  uint32_t limit = 0;  // armed when not 0; disarmed (0) when it fires
  uint32_t users = 0;
  uint32_t async_eqn = hwif::kNoEq;
  bool limit_held = false;  // SRQ_LIMIT_REACHED waits for room in EQ async_eqn
  uint32_t xrcdn = hwif::kNoXrcd;  // an XRC SRQ's domain (kNoXrcd: a basic SRQ)
  uint32_t cqn = 0;                // an XRC SRQ's CQ: where the receives of TGT QPs complete
};

// One receive WQE in use by a message being received.
struct RecvBuffer {
  bool valid = false;
  uint16_t wqe_counter = 0;
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSendSges> sge{};
  uint64_t capacity = 0;  // sum of SGE lengths
  uint64_t offset = 0;    // bytes placed so far
};

// One WQE that the requester has started executing and not yet completed.
struct SendRecord {
  uint32_t first_psn = 0;
  uint32_t npkts = 1;          // PSNs the message consumes
  bool response_done = false;  // READ/atomic: all response data arrived
  uint32_t resp_received = 0;  // READ response packets placed so far
  bool executed = false;
  // Where the first SGE's bytes lie (host DMA address), as prepare() found when it checked the
  // local keys; 0 when it has none (inline data, or no bytes).
  uint64_t sge0_host_addr = 0;
  SendWqe wqe;  // last: its SGE slots, rarely all used, end the record
};
// A WQE with one SGE, or inline data, touches only the record's first two cache lines.
static_assert(offsetof(SendRecord, wqe) + offsetof(SendWqe, sge) + sizeof(Sge) <= 128);

struct RequesterState {
  uint32_t next_psn = 0;      // PSN the next new WQE gets
  uint32_t una_psn = 0;       // oldest unacknowledged PSN
  uint32_t tx_psn = 0;        // next PSN to put on the wire (behind next_psn when the window is full)
  uint32_t max_sent_psn = 0;  // one past the highest PSN ever sent: below it is a retransmission
  uint16_t fetch = 0;         // next basic block to fetch from the ring
  uint16_t producer = 0;      // producer index from the last doorbell
  uint16_t exec = 0;          // next basic block to execute
  uint16_t complete = 0;      // oldest basic block not yet completed
  uint32_t outstanding_rd = 0;  // READ/atomic requests in flight
  uint32_t retries_left = 0;
  uint32_t rnr_retries_left = 0;
  Picoseconds deadline{-1};   // retransmit or RNR timer, -1 = none
  bool rnr_wait = false;      // deadline is an RNR wait
  // The first missing READ/atomic response PSN an implied NAK last went back to: ACKs queued behind
  // the first one that say the same thing do not send the window again (the timer covers a loss
  // of what was sent again). ResponderState::kNoPsn: none.
  uint32_t implied_nak_psn = 0xffffffff;
  uint32_t nak_psn = 0xffffffff;  // the PSN of the last sequence-error NAK gone back to
};

struct ResponderState {
  uint32_t epsn = 0;       // expected PSN
  uint32_t msn = 0;        // message sequence number (24 bits)
  bool nak_sent = false;   // a sequence-error NAK is outstanding
  RecvBuffer recv{};       // the receive WQE of a SEND in progress
  // An RDMA WRITE in progress: where the next payload goes.
  bool write_active = false;
  uint64_t write_host_addr = 0;
  uint64_t write_remaining = 0;
  uint64_t write_length = 0;     // the whole WRITE's DMA length, from the first packet's RETH
  bool uc_drop_message = false;  // UC: drop until the next first/only packet
  // XRC TGT: the SRQ the request being executed names (its XRCETH); kNoSrq outside one.
  uint32_t xrc_srqn = hwif::kNoSrq;
  // The atomics executed last, to answer a repeated request without executing it again (IBA
  // 9.7: a duplicate atomic is answered from the saved result, never executed again). The
  // requester keeps at most max_rd_atomic <= our max_dest_rd_atomic READs and atomics in flight
  // (its max_rd_atomic), so a request it repeats is among our last max_dest_rd_atomic atomics: the ring uses
  // that many slots (the caps allow up to kAtomicReplaySlots, DeviceCaps::max_qp_rd_atom).
  static constexpr uint32_t kAtomicReplaySlots = 16;
  static constexpr uint32_t kNoPsn = 0xffffffff;  // outside the 24-bit PSN space: an empty slot
  struct AtomicReplay {
    uint32_t psn = kNoPsn;
    uint64_t orig = 0;  // the value the atomic returned, host order
  };
  std::array<AtomicReplay, kAtomicReplaySlots> atomic_replay{};
  uint32_t atomic_replay_next = 0;  // the slot the next executed atomic takes (mod the slots used)
};

// What one QP did, for observers (softhca stats, docs/observability.md). Counted by the device at
// its entry and exit points, under the device lock; read without it by observers (plain aligned
// integers: a reader may see a count a moment old, never a torn pointer). Units: packets, bytes
// on the wire, CQEs.
// alignas(64): a QP keeps two sets on lines of their own (QueuePair::counters); those counted on
// every message come first, within one cache line.
struct alignas(64) QpCounters {
  uint64_t packets_sent = 0;      // by this QP: requests, retransmissions, ACKs, READ responses
  uint64_t bytes_sent = 0;        // [bytes] on the wire
  uint64_t packets_received = 0;  // addressed to this QP and taken (QP state, transport, P_Key passed)
  uint64_t bytes_received = 0;    // [bytes] on the wire
  uint64_t doorbells = 0;         // doorbell rings (one 8-byte MWr each, cause doorbell)
  uint64_t blueflame_writes = 0;  // WQEs written through the BAR (cause blueflame)
  uint64_t cqes = 0;              // CQEs written for its send and receive queues (one MWr each, cause cqe_write)
  uint64_t packets_dropped = 0;   // addressed to this QP but refused (state, transport, P_Key)
  uint64_t retransmitted = 0;     // packets the requester sent again
  uint64_t naks_sent = 0;         // NAKs and RNR NAKs the responder sent
  uint64_t naks_received = 0;     // NAKs and RNR NAKs the requester received
  uint64_t error_cqes = 0;        // of which completions with an error (flushes included)

  QpCounters& operator+=(const QpCounters& o) {
    packets_sent += o.packets_sent;
    bytes_sent += o.bytes_sent;
    packets_received += o.packets_received;
    bytes_received += o.bytes_received;
    doorbells += o.doorbells;
    blueflame_writes += o.blueflame_writes;
    cqes += o.cqes;
    packets_dropped += o.packets_dropped;
    retransmitted += o.retransmitted;
    naks_sent += o.naks_sent;
    naks_received += o.naks_received;
    error_cqes += o.error_cqes;
    return *this;
  }
};

// The affiliated events of a QP, each a bit of QueuePair::held_events while it waits for room in
// the QP's async EQ; held events are written in this order.
inline constexpr std::array<uint8_t, 6> kQpEventTypes = {
    hwif::kEqeTypeCommEst,          hwif::kEqeTypeSqDrained,     hwif::kEqeTypeWqCatastrophic,
    hwif::kEqeTypeWqInvalidRequest, hwif::kEqeTypeWqAccessError, hwif::kEqeTypeSrqLastWqe};

struct QueuePair {
  uint32_t qpn = 0;
  hwif::QpType type = hwif::QpType::kRc;
  uint32_t pdn = 0;
  uint32_t send_cqn = 0;
  uint32_t recv_cqn = 0;
  uint32_t srqn = hwif::kNoSrq;
  bool sq_sig_all = false;
  bool mad_agent = false;  // QP1's agent for its process (management.cc): sends as from QP1
  hwif::QpAttributes attr{};  // attr.state is the current state
  uint64_t sq_addr = 0;
  uint32_t log_sq_bbs = 0;
  uint64_t rq_addr = 0;
  uint32_t log_rq_cnt = 0;
  uint32_t log_rq_stride = 0;
  uint64_t dbrec = 0;
  uint16_t rq_ci = 0;
  uint16_t rq_posted_cached = 0;
  // Region offsets (Device::sq_shadow() and Device::record() resolve them):
  uint64_t sq_shadow = 0;  // sq_bbs() * 64 bytes: fetched WQE bytes, indexed like the ring
  uint64_t records = 0;    // sq_bbs() SendRecords, by first basic block of each WQE
  uint32_t owner = 0;  // the process (Device::owner()) that created it
  uint32_t async_eqn = hwif::kNoEq;  // where its affiliated events go
  uint16_t held_events = 0;      // bits by kQpEventTypes index: waiting for room in EQ async_eqn
  bool comm_est_raised = false;  // COMM_EST was raised in this stay in RTR (reset by RESET)
  bool sqd_notify = false;       // RTS->SQD asked for SQ_DRAINED and it has not been raised yet
  uint32_t xrcdn = hwif::kNoXrcd;  // a TGT QP's domain
  HandleRefs handles;              // a TGT QP's handles (its creator's and ibv_open_qp's)
  // Each on lines of its own: with two processes on one device, the requester state is written by
  // the QP's own process, the responder state by its peer's, and neither should pull the other's
  // line across cores on every message (docs/live-mode.md, "Cache lines"). For the same reason the
  // counters come in two sets, [0] counted by the owner's threads, [1] by other processes' (a
  // peer placing a message here, and this QP's ACKs sent meanwhile): zeroed when the QP is created,
  // read as their sum.
  alignas(64) RequesterState req{};
  alignas(64) ResponderState resp{};
  std::array<QpCounters, 2> counters{};

  [[nodiscard]] QpCounters total_counters() const {
    QpCounters sum = counters[0];
    sum += counters[1];
    return sum;
  }

  [[nodiscard]] uint32_t sq_bbs() const { return 1u << log_sq_bbs; }
  [[nodiscard]] uint64_t sq_shadow_bytes() const { return uint64_t{sq_bbs()} * hwif::kSendWqeBbBytes; }
  [[nodiscard]] uint64_t records_bytes() const { return uint64_t{sq_bbs()} * sizeof(SendRecord); }
  [[nodiscard]] hwif::QpState state() const { return attr.state; }
};

// Everything here is stored in the device region.
static_assert(std::is_trivially_copyable_v<EventQueue> && std::is_trivially_copyable_v<CompletionQueue> &&
              std::is_trivially_copyable_v<SharedReceiveQueue> && std::is_trivially_copyable_v<SendRecord> &&
              std::is_trivially_copyable_v<QueuePair>);

}  // namespace softhca::hca
