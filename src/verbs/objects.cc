// Object verbs: PD, MR, AH, completion channels, CQ, SRQ, QP and asynchronous events. Each
// forwards to the driver, which owns the objects; this layer adds what libibverbs itself does
// around the provider call: its argument checks, the consumer's context pointers (cq_context,
// srq_context, qp_context), the back-pointers and qp->state kept current (verbs-abi.md §2.3,
// "plain struct fields read by applications"), and the conversion between the provider's and the
// API's return conventions (0/positive errno vs 0/-1 with errno, noted at each function).
#include <endian.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "driver/provider.h"
#include "verbs/glue.h"

// verbs.h turns these into macros over inline wrappers; the exported functions are what the
// wrappers call, so define them under their own names.
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

namespace softhca::verbs {
namespace {

// Remote write and remote atomic access need local write access too: the kernel's
// ib_check_mr_access rejects them alone with EINVAL before any provider sees them, and pyverbs'
// test_reg_mr_bad_flags expects exactly that (verbs-abi.md §2.3).
bool mr_access_is_consistent(unsigned int access) {
  const unsigned int needs_local_write = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  return (access & needs_local_write) == 0 || (access & IBV_ACCESS_LOCAL_WRITE) != 0;
}

ibv_mr* register_mr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  if (pd == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  // Optional-range bits (RELAXED_ORDERING, which perftest always adds) are hints a device may
  // ignore; libibverbs strips them when the device does not take them, and so do we.
  access &= ~static_cast<unsigned int>(IBV_ACCESS_OPTIONAL_RANGE);
  if (!mr_access_is_consistent(access)) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_mr* mr = driver::reg_mr(pd, addr, length, iova, access);
  if (mr != nullptr) {
    mr->context = pd->context;
    mr->pd = pd;
    mr->addr = addr;
    mr->length = length;
  }
  return mr;
}

// The sgid index whose GID is gid on port_num, or -1.
int find_gid_index(ibv_context* ctx, uint8_t port_num, const ibv_gid& gid) {
  ibv_port_attr port{};
  if (driver::query_port(ctx, port_num, &port, sizeof(port)) != 0) return -1;
  for (int index = 0; index < port.gid_tbl_len; ++index) {
    ibv_gid_entry entry{};
    if (query_gid_entry(ctx, port_num, static_cast<uint32_t>(index), &entry) != 0) continue;
    if (std::memcmp(entry.gid.raw, gid.raw, sizeof(gid.raw)) == 0) return index;
  }
  return -1;
}

// Converts a provider int result to the "0, or -1 with errno" convention.
int minus_one_with_errno(int ret) {
  if (ret == 0) return 0;
  if (ret > 0) errno = ret;
  return -1;
}

}  // namespace

void init_qp_fields(ibv_qp* qp, ibv_pd* pd, const ibv_qp_init_attr& attr) {
  qp->context = pd->context;
  qp->qp_context = attr.qp_context;
  qp->pd = pd;
  qp->send_cq = attr.send_cq;
  const bool sends_only = attr.qp_type == IBV_QPT_XRC_SEND;  // an XRC INI QP has no receive side
  qp->recv_cq = sends_only ? nullptr : attr.recv_cq;
  qp->srq = sends_only ? nullptr : attr.srq;
  qp->qp_type = attr.qp_type;
}

}  // namespace softhca::verbs

using namespace softhca;

extern "C" {

// ---- PD -----------------------------------------------------------------------------------------

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  if (context == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return driver::alloc_pd(context);
}

// 0 or a positive errno (EBUSY while objects use the PD).
int ibv_dealloc_pd(ibv_pd* pd) {
  if (pd == nullptr) return EINVAL;
  return driver::dealloc_pd(pd);
}

// ---- MR -----------------------------------------------------------------------------------------

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return verbs::register_mr(pd, addr, length, reinterpret_cast<uintptr_t>(addr),
                            static_cast<unsigned int>(access));
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return verbs::register_mr(pd, addr, length, iova, static_cast<unsigned int>(access));
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
  return verbs::register_mr(pd, addr, length, iova, access);
}

// libibverbs' checks and fork-range bookkeeping around the provider, reported through enum
// ibv_rereg_mr_err_code with errno (ibv_rereg_mr(3)): input errors leave the MR as it was
// (IBV_REREG_MR_ERR_INPUT, EINVAL); a refusal by the driver or device is IBV_REREG_MR_ERR_CMD with
// its errno, and here too the MR is still the old one (the device changes nothing it refuses).
// A NULL pd with IBV_REREG_MR_CHANGE_PD, which libibverbs would dereference, is an input error.
// lkey and rkey are kept; pd, addr and length follow what changed.
int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  const auto input_error = [] {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  };
  if (mr == nullptr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) != 0) return input_error();
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0 && (length == 0 || addr == nullptr)) return input_error();
  if (access != 0 && (flags & IBV_REREG_MR_CHANGE_ACCESS) == 0) return input_error();
  if ((flags & IBV_REREG_MR_CHANGE_PD) != 0 && pd == nullptr) return input_error();
  const bool new_range = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0;
  if (new_range && ibv_dontfork_range(addr, length) != 0) return IBV_REREG_MR_ERR_DONT_FORK_NEW;
  void* old_addr = mr->addr;
  const size_t old_length = mr->length;
  if (const int err = driver::rereg_mr(mr, flags, pd, addr, length, access); err != 0) {
    errno = err;
    if (new_range && ibv_dofork_range(addr, length) != 0) return IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW;
    return IBV_REREG_MR_ERR_CMD;
  }
  if ((flags & IBV_REREG_MR_CHANGE_PD) != 0) mr->pd = pd;
  if (new_range) {
    mr->addr = addr;
    mr->length = length;
    if (ibv_dofork_range(old_addr, old_length) != 0) return IBV_REREG_MR_ERR_DO_FORK_OLD;
  }
  return 0;
}

// 0 or a positive errno.
int ibv_dereg_mr(ibv_mr* mr) {
  if (mr == nullptr) return EINVAL;
  return driver::dereg_mr(mr);
}

// ---- AH -----------------------------------------------------------------------------------------

ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (pd == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_ah* ah = driver::create_ah(pd, attr);
  if (ah != nullptr) {
    ah->context = pd->context;
    ah->pd = pd;
  }
  return ah;
}

// 0 or a positive errno.
int ibv_destroy_ah(ibv_ah* ah) {
  if (ah == nullptr) return EINVAL;
  return driver::destroy_ah(ah);
}

// The address vector back to the sender of a received message: its LID and SL, and with a GRH
// its GID (as our destination) and flow label (IBA 11.4.1.2 "Create Address Handle from Work
// Completion"). 0, or -1 with errno (ENOENT: the GRH's destination GID is not one of ours).
int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                        ibv_ah_attr* ah_attr) {
  if (context == nullptr || wc == nullptr || ah_attr == nullptr) {
    errno = EINVAL;
    return -1;
  }
  *ah_attr = {};
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port_num;
  if ((wc->wc_flags & IBV_WC_GRH) == 0) return 0;
  if (grh == nullptr) {
    errno = EINVAL;
    return -1;
  }
  const int sgid_index = verbs::find_gid_index(context, port_num, grh->dgid);
  if (sgid_index < 0) {
    errno = ENOENT;
    return -1;
  }
  // version_tclass_flow (network order): IP version 4 bits, traffic class 8, flow label 20.
  const uint32_t version_tclass_flow = be32toh(grh->version_tclass_flow);
  ah_attr->is_global = 1;
  ah_attr->grh.dgid = grh->sgid;
  ah_attr->grh.sgid_index = static_cast<uint8_t>(sgid_index);
  ah_attr->grh.flow_label = version_tclass_flow & 0xfffff;
  ah_attr->grh.traffic_class = static_cast<uint8_t>((version_tclass_flow >> 20) & 0xff);
  ah_attr->grh.hop_limit = 0xff;
  return 0;
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  if (pd == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_ah_attr attr{};
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) return nullptr;
  return ibv_create_ah(pd, &attr);
}

// ---- completion channels and CQ ----------------------------------------------------------------

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  if (context == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return driver::create_comp_channel(context);
}

// 0 or a positive errno (EBUSY while CQs use the channel).
int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (channel == nullptr) return EINVAL;
  return driver::destroy_comp_channel(channel);
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                      int comp_vector) {
  if (context == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_cq* cq = driver::create_cq(context, cqe, channel, comp_vector);
  if (cq != nullptr) {
    cq->context = context;
    cq->channel = channel;
    cq->cq_context = cq_context;
  }
  return cq;
}

// 0 or a positive errno (EBUSY while a QP or SRQ uses the CQ).
int ibv_destroy_cq(ibv_cq* cq) {
  if (cq == nullptr) return EINVAL;
  return driver::destroy_cq(cq);
}

// 0 or a positive errno, as libibverbs returns the provider's answer (EINVAL for a NULL cq, a size
// of 0, below 0 or above max_cqe, or one smaller than the CQEs not yet polled). rdma-core 44 reaches
// the provider through its private verbs_context_ops; the public ibv_context_ops keep only
// _compat_resize_cq, so the export calls the driver as ibv_destroy_cq does.
int ibv_resize_cq(ibv_cq* cq, int cqe) {
  if (cq == nullptr) return EINVAL;
  return driver::resize_cq(cq, cqe);
}

// 0, or -1 with errno (EAGAIN on a non-blocking channel with no event).
int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  if (channel == nullptr || cq == nullptr || cq_context == nullptr) {
    errno = EINVAL;
    return -1;
  }
  return verbs::minus_one_with_errno(driver::get_cq_event(channel, cq, cq_context));
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (cq != nullptr) driver::ack_cq_events(cq, nevents);
}

// ---- SRQ ----------------------------------------------------------------------------------------

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* srq_init_attr) {
  if (pd == nullptr || srq_init_attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_srq* srq = driver::create_srq(pd, srq_init_attr);
  if (srq != nullptr) {
    srq->context = pd->context;
    srq->srq_context = srq_init_attr->srq_context;
    srq->pd = pd;
  }
  return srq;
}

// 0 or a positive errno.
int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* srq_attr, int srq_attr_mask) {
  if (srq == nullptr || srq_attr == nullptr) return EINVAL;
  return driver::modify_srq(srq, srq_attr, srq_attr_mask);
}

// 0 or a positive errno.
int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* srq_attr) {
  if (srq == nullptr || srq_attr == nullptr) return EINVAL;
  return driver::query_srq(srq, srq_attr);
}

// 0 or a positive errno.
int ibv_destroy_srq(ibv_srq* srq) {
  if (srq == nullptr) return EINVAL;
  return driver::destroy_srq(srq);
}

// ---- QP -----------------------------------------------------------------------------------------

// qp_init_attr->cap is updated with the capabilities the QP actually has (perftest reads back
// max_inline_data).
ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (pd == nullptr || qp_init_attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_qp* qp = driver::create_qp(pd, qp_init_attr, 0);
  if (qp != nullptr) verbs::init_qp_fields(qp, pd, *qp_init_attr);
  return qp;
}

// 0 or a positive errno; qp->state follows a successful state change (pyverbs reads it).
int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  if (qp == nullptr || attr == nullptr) return EINVAL;
  const int ret = driver::modify_qp(qp, attr, attr_mask);
  if (ret != 0) return ret;
  if ((attr_mask & IBV_QP_STATE) != 0) qp->state = attr->qp_state;
  return 0;
}

// 0 or a positive errno.
int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr) {
  if (qp == nullptr || attr == nullptr || init_attr == nullptr) return EINVAL;
  const int ret = driver::query_qp(qp, attr, attr_mask, init_attr);
  if (ret != 0) return ret;
  if ((attr_mask & IBV_QP_STATE) != 0) qp->state = attr->qp_state;
  return 0;
}

// 0 or a positive errno.
int ibv_destroy_qp(ibv_qp* qp) {
  if (qp == nullptr) return EINVAL;
  return driver::destroy_qp(qp);
}

// A UD QP takes the datagrams of the multicast group (gid, lid) (IBA 10.5; ibv_attach_mcast(3)):
// 0 or a positive errno (EINVAL: not a UD QP, or not a multicast GID/LID; ENOMEM: the device's
// groups or a group's QPs are all taken).
int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (qp == nullptr || gid == nullptr) return EINVAL;
  return driver::attach_mcast(qp, gid, lid, true);
}

int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (qp == nullptr || gid == nullptr) return EINVAL;
  return driver::attach_mcast(qp, gid, lid, false);
}

// The ibv_qp_ex of a QP created through ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
// else NULL (as rdma-core; verbs-abi.md §2.3).
ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  if (qp == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return driver::qp_to_qp_ex(qp);
}

// ---- asynchronous events ------------------------------------------------------------------------

// Blocks on the context's async_fd until an event arrives (docs/events.md); with O_NONBLOCK set
// on it by the application, returns -1 with errno EAGAIN, and a signal ends the wait with EINTR.
// 0, or -1 with errno.
int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  if (context == nullptr || event == nullptr) {
    errno = EINVAL;
    return -1;
  }
  return driver::get_async_event(context, event);
}

// Counts the event as completed for its QP, CQ or SRQ, whose destroy waits for it.
void ibv_ack_async_event(ibv_async_event* event) {
  if (event != nullptr) driver::ack_async_event(event);
}

}  // extern "C"
