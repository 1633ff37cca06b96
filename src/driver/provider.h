// The user-space provider (the mlx5-style driver) as the verbs layer calls it.
// The driver owns the objects behind every ibv_* handle (each embeds its ibv struct first, so the
// handle and the object share an address), builds WQEs in host-memory rings, rings doorbells and
// writes BlueFlame through pcie::HostPort, polls CQEs, and talks to the device's command
// interface for the control path. It never includes the device model (src/hca).
//
// Conventions: functions returning int return 0 or a positive errno; pointer-returning functions
// return nullptr and set errno. Argument checks that libibverbs itself does (NULL handles,
// comp_mask checks of the extended verbs) belong to src/verbs; checks that the provider or the
// device does (caps, sizes, states, masks) belong here or in the device.
#pragma once
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

#include "hwif/device_interface.h"
#include "pcie/host_kernel.h"
#include "pcie/host_port.h"

namespace softhca::driver {

// How a context reaches its device: the BAR (through the counted host port), the command
// interface, and the host kernel that gives the driver DMA-reachable memory, pins registered
// memory and hands out interrupt vectors. Owned by the runtime; outlives every context opened on
// it (and every object created on one).
// When a single WQE is written through the BAR instead of rung with a doorbell
// (verbs-abi.md §6.1 "Post list vs. BlueFlame"):
//   kAuto   as mlx5: a single inline WQE that fits the BlueFlame buffer
//   kOff    never (MLX5_SHUT_UP_BF)
//   kPrefer every single WQE that fits, inline or not (MLX5_POST_SEND_PREFER_BF)
enum class BlueFlameMode : uint8_t { kAuto, kOff, kPrefer };

struct DeviceLink {
  pcie::HostPort* host_port = nullptr;
  hwif::CommandInterface* cmd = nullptr;
  uint32_t uar_index = 0;  // the UAR page this context may use
  BlueFlameMode blueflame = BlueFlameMode::kAuto;
  pcie::HostKernel* kernel = nullptr;  // required: open_context fails with EINVAL without one
};

// ---- context -------------------------------------------------------------------------------
// Allocates the context object (a verbs_context at its start), initialises the verbs_context
// header (sz, abi_compat, device) and fills the data-path ops (poll_cq, req_notify_cq, post_send,
// post_recv, post_srq_recv) of context.ops, and creates the context's async EQ: context.async_fd
// is its vector's fd (async_events.cc). cmd_fd is a real descriptor owned by the context after
// this call. Returns nullptr with errno on failure (cmd_fd then stays the caller's).
verbs_context* open_context(ibv_device* device, const DeviceLink& link, int cmd_fd);
int close_context(ibv_context* ctx);

// ---- asynchronous events (async_events.cc) -----------------------------------------------------
// Blocks (unless async_fd is non-blocking: -1/EAGAIN; a signal: -1/EINTR) until an event arrives:
// 0 with *event filled, as ibv_get_async_event.
int get_async_event(ibv_context* ctx, ibv_async_event* event);
void ack_async_event(ibv_async_event* event);

int query_device(ibv_context* ctx, ibv_device_attr* attr);
int query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t attr_size);
// port_attr_len is the caller's sizeof(struct ibv_port_attr) (48 for the old ABI, 52 now).
int query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t port_attr_len);
int query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid);
int query_pkey(ibv_context* ctx, uint8_t port, int index, uint16_t* pkey);

// ---- PD, MR, AH ------------------------------------------------------------------------------
ibv_pd* alloc_pd(ibv_context* ctx);
int dealloc_pd(ibv_pd* pd);  // EBUSY while MRs, QPs, SRQs, AHs, CQs or parent domains use it
// Thread and parent domains (domains.cc; ibv_alloc_td(3), ibv_alloc_parent_domain(3)). alloc_td:
// EINVAL for a comp_mask. dealloc_td: EBUSY while a parent domain uses it. A parent domain is an
// ibv_pd of attr->pd's protection whose queues (QPs, SRQs, CQs created with
// IBV_CQ_INIT_ATTR_MASK_PD) take their rings and doorbell records from the caller's alloc/free;
// ibv_dealloc_pd frees it. EINVAL for no or a foreign PD (or a parent domain as PD), a TD of
// another context, unknown comp_mask bits, or only one of alloc and free.
ibv_td* alloc_td(ibv_context* ctx, const ibv_td_init_attr* attr);
int dealloc_td(ibv_td* td);
ibv_pd* alloc_parent_domain(ibv_context* ctx, const ibv_parent_domain_init_attr* attr);
ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access);
// The provider part of ibv_rereg_mr (flags: enum ibv_rereg_mr_flags, already checked by the verbs
// layer). 0 or an errno (EINVAL: no change asked for, a PD of another context, inconsistent
// access, a length above max_mr_size; EFAULT: the new pages cannot be pinned so); on an error
// the registration is what it was. lkey and rkey are kept.
int rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access);
int dereg_mr(ibv_mr* mr);
ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr);
int destroy_ah(ibv_ah* ah);

// ---- CQ and completion channels ----------------------------------------------------------------
ibv_comp_channel* create_comp_channel(ibv_context* ctx);
int destroy_comp_channel(ibv_comp_channel* channel);  // EBUSY while CQs use it
ibv_cq* create_cq(ibv_context* ctx, int cqe, ibv_comp_channel* channel, int comp_vector);
int destroy_cq(ibv_cq* cq);  // EBUSY while a QP or SRQ uses it
// 0 or an errno: EINVAL for a NULL cq, cqe <= 0 or > max_cqe, or fewer entries than CQEs not yet
// polled. Completions not yet polled are kept, in order.
int resize_cq(ibv_cq* cq, int cqe);
// ibv_create_cq_ex: a CQ polled through the ibv_cq_ex ops (start_poll .. end_poll, the read_*
// functions; cq_ex_poll.cc), also usable with poll_cq. EINVAL for comp_mask bits rdma-core 44
// does not define; EOPNOTSUPP for wc_flags beyond the standard ones and the two timestamps
// (CVLAN, FLOW_TAG, TM_INFO) or creation flags other than SINGLE_THREADED; EINVAL for a PD that
// is not a parent domain; then as create_cq.
ibv_cq_ex* create_cq_ex(ibv_context* ctx, const ibv_cq_init_attr_ex* attr);
// ibv_modify_cq: moderation (IBV_CQ_ATTR_MODERATE). 0 or an errno: EINVAL for no or unknown
// attr_mask bits and for a period above the device's max_cq_moderation_period.
int modify_cq(ibv_cq* cq, const ibv_modify_cq_attr* attr);
// ibv_query_rt_values_ex: the device clock in raw_clock.tv_nsec (tv_sec 0), as mlx5 reports its
// cycle counter. EINVAL for comp_mask bits other than IBV_VALUES_MASK_RAW_CLOCK.
int query_rt_values(ibv_context* ctx, ibv_values_ex* values);
// Blocks (unless the channel fd is non-blocking: -1/EAGAIN) until an event arrives.
int get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context);
void ack_cq_events(ibv_cq* cq, unsigned int nevents);

// ---- SRQ ----------------------------------------------------------------------------------------
ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr);
// An SRQ of `pd`; with an XRC domain (open in this context) an XRC SRQ whose receives complete in
// `cq` (ibv_create_srq_ex(3), IBV_SRQT_XRC).
ibv_srq* create_srq_in(ibv_pd* pd, ibv_srq_init_attr* attr, ibv_xrcd* xrcd, ibv_cq* cq);
int get_srq_num(ibv_srq* srq, uint32_t* srq_num);  // EINVAL for an SRQ that is not XRC
int modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int attr_mask);
int query_srq(ibv_srq* srq, ibv_srq_attr* attr);
int destroy_srq(ibv_srq* srq);

// ---- QP -----------------------------------------------------------------------------------------
// Every QP object is an ibv_qp_ex; attr->cap is updated with the actual capabilities.
// send_ops_flags != 0 asks for the ibv_wr_* interface (see qp_ex below).
ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr, uint64_t send_ops_flags);
// ---- device memory (dm.cc; ibv_alloc_dm(3)) ----
// alloc_dm: EINVAL for a length of 0 or above max_dm_size, comp_mask bits it does not know, or
// an alignment above the window's; ENOMEM when no run of free pages fits. The ibv_dm's copy
// functions are MMIO through the BAR: to_dm needs 4-byte aligned offset and length (EINVAL), as
// mlx5's; both answer EFAULT beyond the allocation. reg_dm_mr needs IBV_ACCESS_ZERO_BASED (the
// MR's addresses count from its first byte) and a range inside the allocation (EINVAL).
ibv_dm* alloc_dm(ibv_context* ctx, ibv_alloc_dm_attr* attr);
int free_dm(ibv_dm* dm);  // EBUSY while MRs are registered in it
ibv_mr* reg_dm_mr(ibv_pd* pd, ibv_dm* dm, uint64_t dm_offset, size_t length, unsigned int access);

// ---- memory windows (mw.cc; ibv_alloc_mw(3), ibv_bind_mw(3)) ----
// alloc_mw: type 1 or 2 (EINVAL otherwise); ENOMEM when the key table is full. dealloc_mw unbinds
// it. bind_mw (type 1) posts a bind WQE with the window's next key (ibv_inc_rkey), which is the
// window's rkey once posted; its completion (IBV_WC_BIND_MW) says whether the device bound it
// (IBV_WC_MW_BIND_ERR: an MR without IBV_ACCESS_MW_BIND, a range outside it, rights it cannot
// give). An MR with windows bound is not deregistered or registered again (EBUSY).
ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int dealloc_mw(ibv_mw* mw);
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind);

// ---- XRC (xrc.cc; ibv_open_xrcd(3), ibv_create_qp_ex(3), ibv_open_qp(3)) ----
// fd -1: a new domain of this process's own; otherwise the domain of the file fd names, shared
// with every process of the host that opens it (oflags O_CREAT makes it when there is none:
// EINVAL without; O_CREAT|O_EXCL: EINVAL when there is one; EBADF for a bad fd).
ibv_xrcd* open_xrcd(ibv_context* ctx, int fd, int oflags);
int close_xrcd(ibv_xrcd* xrcd);  // EBUSY while this process's XRC SRQs or TGT QPs are in it
// An XRC TGT QP (IBV_QPT_XRC_RECV) in `xrcd`: no PD, CQs, SRQ or rings. An XRC INI QP
// (IBV_QPT_XRC_SEND) is create_qp's, with a send queue and send CQ only.
ibv_qp* create_xrc_tgt_qp(ibv_xrcd* xrcd, void* qp_context);
// A handle on TGT QP `qpn` of `xrcd` (EINVAL: none such); ibv_destroy_qp drops it.
ibv_qp* open_qp(ibv_xrcd* xrcd, uint32_t qpn, void* qp_context);
int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask);
int query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr);
int destroy_qp(ibv_qp* qp);
// The ibv_qp_ex of a QP created with send_ops_flags, else nullptr.
ibv_qp_ex* qp_to_qp_ex(ibv_qp* qp);

// ---- data path (also installed in context.ops) --------------------------------------------------
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);

// ---- multicast (mad_agent.cc): attach (or detach) a UD QP to the group (gid, lid) -----------------
int attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid, bool attach);

// ---- QP1's MAD agents (mad_agent.cc; hwif::SetMadAgentIn and the bind commands) -----------------
// A UD QP of this process becomes its MAD agent: *agent is its number, the top bits of the CM ids
// it hands out. Then REQs for the service IDs it binds, and replies naming its ids, reach it.
int set_mad_agent(ibv_qp* qp, uint32_t* agent);
// pick_port: the device picks a free port for the low 16 bits of *service_id (written back).
int bind_service(ibv_qp* qp, uint64_t* service_id, bool pick_port);
int unbind_service(ibv_qp* qp, uint64_t service_id);
// An established connection for the device to end with a DREQ if the agent's process goes (c.qpn
// is filled in from `agent`); untracked when the library ends it itself.
int track_connection(ibv_qp* agent, const hwif::TrackConnectionIn& c);
int untrack_connection(ibv_qp* agent, uint32_t local_comm_id);

}  // namespace softhca::driver
