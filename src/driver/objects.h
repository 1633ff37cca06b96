// The driver objects behind the ibv_* handles. Each embeds its ibv struct first, so the handle the
// application holds and the object share an address (the verbs layer relies on it). Sizes of rings
// are in entries or 64-byte basic blocks (BBs) as named; indices are free-running counters.
//
// Who may touch what:
//  - ibv fields (state, qp_num, cqe, ...) are written on the control path only, before the
//    handle is returned or under the caller's ownership of the object (verbs semantics).
//  - SendQueue fields under SendQueue::lock (post_send, ibv_wr_*, modify_qp to RESET), except
//    `tail`, which poll_cq stores (release, under the CQ lock) and post_send loads (acquire).
//  - RecvQueue fields under RecvQueue::lock, except `tail`, as for the SQ.
//  - Srq ring state under Srq::lock (post_srq_recv, and poll_cq freeing a completed WQE while it
//    holds the CQ lock: lock order is always CQ lock -> SRQ lock).
//  - Cq consumer state, ring and size under Cq::lock (poll_cq, req_notify_cq, CQ cleaning on
//    destroy/reset, resize_cq).
//  - `users` counters are changed on the control path only; atomics so that checks never race.
#pragma once
#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>

#include "driver/event_ring.h"
#include "driver/host_buffer.h"
#include "driver/provider.h"
#include "driver/rsc_table.h"
#include "hwif/caps.h"
#include "hwif/cmd.h"
#include "hwif/cqe.h"
#include "hwif/doorbell_record.h"
#include "hwif/wqe.h"

namespace softhca::driver {

// One lock per queue, as mlx5 (which uses a spinlock). A mutex here: in live mode the device may
// do the work of a doorbell inside the MMIO write, while the SQ lock is held.
using QueueLock = std::mutex;

struct Cq;
struct Qp;
struct Srq;

struct Context {
  verbs_context vctx;  // first: &vctx.context is the ibv_context* (verbs-abi.md §2.2)
  DeviceLink link;
  hwif::DeviceCaps caps;  // from QueryDevice at open_context
  // BlueFlame half of bfreg 1 used by the next send ring: 0 or kBfBufBytes, flipped per ring.
  std::atomic<uint64_t> bf_half{0};
  std::mutex table_lock;  // serialises insert/erase in the tables below (control path)
  RscTable<Qp> qps;       // QPN -> Qp, for CQEs and QP events
  RscTable<Cq> cqs;       // CQN -> Cq, for EQEs
  RscTable<Srq> srqs;     // SRQN -> Srq, for SRQ events
  // The async EQ (async_events.cc): its vector's fd is the context's async_fd.
  EventRing async_eq;
};

// A thread domain (ibv_alloc_td): a promise that one thread at a time uses the queues created
// under it. The queues keep their locks (uncontended then); users counts parent domains.
struct Td {
  ibv_td td;
  std::atomic<uint32_t> users{0};
};

// A protection domain, or a parent domain (ibv_alloc_parent_domain) when `protection` is set: it
// protects as `protection` does (same pdn, which the device sees), and the queues created on it
// take their buffers from `allocator` (when the caller gave one) and belong to `td`.
struct Pd {
  ibv_pd pd;
  uint32_t pdn = 0;
  std::atomic<uint32_t> users{0};  // MRs, AHs, QPs, SRQs, CQs (parent domains) and parent domains
  Pd* protection = nullptr;
  Td* td = nullptr;
  ExternalAllocator allocator{};  // alloc == nullptr: the default allocation
  // The allocator for this PD's queue buffers, or nullptr for the default.
  [[nodiscard]] const ExternalAllocator* buffers() const { return allocator.alloc != nullptr ? &allocator : nullptr; }
};

// Device memory this process allocated (ibv_alloc_dm): pages of the device's own memory, which
// the CPU reaches through the BAR (MMIO, counted by the host port) and the device at dma_addr.
struct Dm {
  ibv_dm dm;
  Context* ctx = nullptr;
  uint32_t dmn = 0;
  uint64_t length = 0;      // as allocated
  uint64_t bar_offset = 0;  // of its first byte in the BAR
  uint64_t dma_addr = 0;    // of its first byte, as the device reaches it
  std::atomic<uint32_t> users{0};  // MRs registered in it (free_dm is EBUSY while any)
};

// The pin made at registration, kept apart from ibv_mr (which the application can see and
// scribble on): dereg_mr unpins exactly what reg_mr pinned, named by the DMA address the kernel
// gave (two registrations of one range are two pins). An MR in device memory (`dm` set) pins nothing.
struct Mr {
  ibv_mr mr;
  uint64_t pinned_dma = 0;
  size_t pinned_len = 0;
  unsigned int access = 0;  // as registered (rereg_mr keeps what it does not change)
  uint64_t iova = 0;
  Dm* dm = nullptr;
};

struct Ah {
  ibv_ah ah;
  hwif::DatagramSeg av{};  // the datagram segment without qkey and remote QPN
};

// A completion channel: an event queue (a ring of EQEs and an interrupt vector from the host
// kernel, whose file descriptor is ch.fd).
struct CompChannel {
  ibv_comp_channel ch;
  EventRing eq;
  std::atomic<uint32_t> users{0};  // CQs reporting to it (changed under eq.lock)
};

struct Cq {
  // A CQ of create_cq_ex is an ibv_cq_ex, whose leading members are an ibv_cq's (ibv_cq_ex_to_cq
  // is a cast): `cq` names those for every CQ.
  union {
    ibv_cq cq;
    ibv_cq_ex cqx;
  };
  Context* ctx = nullptr;
  uint32_t cqn = 0;
  HostBuffer ring;  // nent Cqe64; replaced by resize_cq, under lock
  HostBuffer dbrec_page;
  hwif::CqDbRec* dbrec = nullptr;
  uint32_t log_nent = 0;            // under lock (resize_cq changes it)
  QueueLock lock;
  uint32_t cons_index = 0;          // under lock
  std::atomic<uint32_t> arm_sn{0};  // incremented per delivered event (get_cq_event)
  uint32_t events_reported = 0;     // under cq.mutex: events returned by get_cq_event
  uint32_t async_events_reported = 0;  // under cq.mutex: CQ_ERR events returned by get_async_event
  CompChannel* channel = nullptr;
  std::atomic<uint32_t> users{0};  // QPs (once per queue using it)
  // create_cq_ex only (cq_ex_poll.cc). wc_flags and wall_offset_ns are set at creation; `cur`
  // and `cur_ts` belong to the thread between start_poll and end_poll (which holds `lock`).
  uint64_t wc_flags = 0;       // IBV_WC_EX_WITH_* asked for
  int64_t wall_offset_ns = 0;  // wall clock [ns] - device ticks [1 ns], from QueryClock at creation
  ibv_wc cur{};                // the completion start_poll/next_poll stand on
  uint64_t cur_ts = 0;         // its CQE's timestamp in device ticks (0: an error CQE, or none)
  bool consumed = false;       // CQEs were consumed since start_poll: end_poll publishes the index
  Pd* parent = nullptr;        // the parent domain it was created in (IBV_CQ_INIT_ATTR_MASK_PD)
};

// An XRC domain this process opened (ibv_open_xrcd): the device's domain, shared with every
// process that opened the same file.
struct Xrcd {
  ibv_xrcd xrcd;
  Context* ctx = nullptr;
  uint32_t xrcdn = 0;
  std::atomic<uint32_t> users{0};  // this process's XRC SRQs and TGT QP handles in it
};

struct Srq {
  ibv_srq srq;
  Context* ctx = nullptr;
  Pd* pd = nullptr;
  Xrcd* xrcd = nullptr;  // an XRC SRQ: its domain and the CQ its receives complete in
  Cq* cq = nullptr;
  uint32_t srqn = 0;
  HostBuffer buf;  // wqe_cnt WQEs of 1 << log_stride bytes: SrqNextSeg + data segments
  HostBuffer dbrec_page;
  hwif::SrqDbRec* dbrec = nullptr;
  uint32_t wqe_cnt = 0;  // power of two; one WQE is always the free list's sentinel
  uint32_t log_stride = 0;
  uint32_t max_gs = 0;
  uint32_t limit = 0;
  std::unique_ptr<uint64_t[]> wrid;
  QueueLock lock;
  uint32_t head = 0;     // next free WQE to post into
  uint32_t tail = 0;     // last free WQE (the sentinel)
  uint32_t counter = 0;  // WQEs posted, mirrored to dbrec->counter
  std::atomic<uint32_t> users{0};  // QPs
  uint32_t events_reported = 0;    // under srq.mutex: events returned by get_async_event
};

struct SendQueue {
  HostBuffer buf;
  uint32_t wqe_cnt = 0;   // BBs in the ring, power of two
  uint32_t max_post = 0;  // WRs that fit (each up to wqe_size bytes)
  uint32_t wqe_size = 0;  // bytes: the largest WQE the ring was sized for (a multiple of 64)
  uint32_t max_gs = 0;
  uint32_t max_inline = 0;
  std::unique_ptr<uint64_t[]> wrid;      // by BB index of the WQE's first BB
  std::unique_ptr<uint32_t[]> wqe_head;  // head value when that WQE was posted
  QueueLock lock;
  uint32_t head = 0;      // WRs posted
  uint32_t cur_post = 0;  // BBs posted (the WQE index of the next WQE)
  std::atomic<uint32_t> tail{0};  // WRs retired by poll_cq
};

struct RecvQueue {
  HostBuffer buf;
  uint32_t wqe_cnt = 0;  // power of two (0 with an SRQ)
  uint32_t log_stride = 0;
  uint32_t max_gs = 0;
  std::unique_ptr<uint64_t[]> wrid;
  QueueLock lock;
  uint32_t head = 0;               // WQEs posted
  std::atomic<uint32_t> tail{0};   // WQEs completed
};

// State of an ibv_wr_start .. ibv_wr_complete/abort sequence (held under SendQueue::lock).
struct WrBuilder {
  uint32_t start_head = 0;
  uint32_t start_cur_post = 0;
  uint32_t nreq = 0;
  int err = 0;
  bool open = false;          // a WQE was begun and not yet finished
  bool need_ud_addr = false;  // UD: the datagram segment is still to be set
  bool need_xrc_srqn = false; // XRC INI: the XRC segment is still to be set (at dgram_ptr)
  bool data_set = false;
  bool cur_inline = false;    // the open WQE carries inline data
  bool last_inline = false;   // the last finished WQE carries inline data
  hwif::CtrlSeg ctrl{};       // control segment of the open WQE, written when it finishes
  uint32_t ctrl_idx = 0;      // its BB index (cur_post value)
  uint8_t* ctrl_ptr = nullptr;
  uint8_t* dgram_ptr = nullptr;
  uint8_t* data_ptr = nullptr;  // where data/inline segments go
  uint32_t ds = 0;              // DS so far (ctrl and fixed segments)
  uint32_t last_idx = 0;        // BB index of the last finished WQE
  uint32_t last_ds = 0;
};

struct Qp {
  ibv_qp_ex qpx;  // first: every QP is an ibv_qp_ex, (ibv_qp*)qp == &qpx.qp_base
  Context* ctx = nullptr;
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  Xrcd* xrcd = nullptr;  // a TGT QP's domain (no PD, CQs, SRQ or rings then)
  bool opened = false;   // a TGT QP handle of ibv_open_qp (not in Context::qps: its creator may be)
  uint32_t qpn = 0;
  hwif::QpType type = hwif::QpType::kRc;
  bool sq_sig_all = false;
  uint32_t events_reported = 0;  // under qpx.qp_base.mutex: events returned by get_async_event
  uint64_t send_ops_flags = 0;  // != 0: created for the ibv_wr_* interface
  std::atomic<uint8_t> state{0};  // enum ibv_qp_state, mirrors qpx.qp_base.state for the data path
  ibv_qp_cap cap{};               // what create_qp reported
  HostBuffer dbrec_page;
  hwif::QpDbRec* dbrec = nullptr;
  SendQueue sq;
  RecvQueue rq;
  WrBuilder wr;
};

// GCC only for Qp and Srq: clang 14 with libstdc++ 12 does not count std::unique_ptr as standard
// layout (its tuple base), though both lay these structs out alike (Itanium ABI), so GCC's check
// covers the fuzz build (docs/fuzzing.md) too.
static_assert(std::is_standard_layout_v<Context>, "the verbs_context must be pointer-interconvertible");
#if !defined(__clang__)
static_assert(std::is_standard_layout_v<Qp>);
#endif
static_assert(std::is_standard_layout_v<Cq>);

inline Context* to_ctx(ibv_context* c) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(c) - offsetof(verbs_context, context));
}
inline ibv_context* ibctx(Context* c) { return &c->vctx.context; }
inline Pd* to_pd(ibv_pd* p) { return reinterpret_cast<Pd*>(p); }
inline Td* to_td(ibv_td* t) { return reinterpret_cast<Td*>(t); }
inline Mr* to_mr(ibv_mr* m) { return reinterpret_cast<Mr*>(m); }
inline Ah* to_ah(ibv_ah* a) { return reinterpret_cast<Ah*>(a); }
inline Cq* to_cq(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
inline CompChannel* to_channel(ibv_comp_channel* c) { return reinterpret_cast<CompChannel*>(c); }
inline Srq* to_srq(ibv_srq* s) { return reinterpret_cast<Srq*>(s); }
inline Xrcd* to_xrcd(ibv_xrcd* x) { return reinterpret_cast<Xrcd*>(x); }
inline Dm* to_dm(ibv_dm* d) { return reinterpret_cast<Dm*>(d); }
inline Qp* to_qp(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }
inline Qp* to_qp(ibv_qp_ex* q) { return reinterpret_cast<Qp*>(q); }

inline constexpr uint32_t roundup_pow2(uint32_t v) {
  uint32_t r = 1;
  while (r < v) r <<= 1;
  return r;
}
inline constexpr uint32_t log2_exact(uint32_t pow2) {
  uint32_t l = 0;
  while ((1u << l) < pow2) ++l;
  return l;
}

static_assert(std::is_standard_layout_v<Pd> && std::is_standard_layout_v<Mr> && std::is_standard_layout_v<Ah>);
static_assert(std::is_standard_layout_v<Td> && std::is_standard_layout_v<Xrcd> && std::is_standard_layout_v<Dm>);
static_assert(std::is_standard_layout_v<CompChannel>);
#if !defined(__clang__)
static_assert(std::is_standard_layout_v<Srq>);  // GCC only: see Qp above
#endif

// Sets errno and returns nullptr: the pointer-returning verbs convention.
template <class T>
T* fail_errno(int err) {
  errno = err;
  return nullptr;
}

// Lifecycle helpers shared between files (control path).
void cq_clean(Cq* cq, uint32_t qpn, Srq* srq);  // drops CQEs of qpn not yet polled
void cq_clean_srq(Cq* cq, uint32_t srqn);        // drops an XRC SRQ's receive CQEs not yet polled
void srq_free_wqe(Srq* srq, uint32_t idx);       // caller holds srq->lock
void qp_ex_install_ops(Qp* qp);                  // fills the ibv_qp_ex wr_* pointers
int open_async_events(Context& ctx);             // the async EQ (async_events.cc): 0 or an errno
int close_async_events(Context& ctx);

}  // namespace softhca::driver
