// Glue shared by the libibverbs entry points (src/verbs/*.cc): the library-private part of a
// context, the device table, the context ops installer, and the prototypes of exports that the
// installed <infiniband/verbs.h> does not declare (they live in rdma-core's uninstalled driver.h,
// sysfs.h and marshall.h; prototypes from verbs-abi.md §1.4 and the installed kernel ABI headers).
// Nothing here is visible outside libibverbs.so.1: the version script keeps it local.
#pragma once
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

#include <cstddef>
#include <cstdint>

#include "runtime/runtime.h"
#include "verbs/softhca_ext.h"

namespace softhca::verbs {
extern const softhca_ext_ops kExtOps;  // device.cc
int host_ipv4(ibv_context* ctx, uint32_t* ipv4_be);  // cm_support.cc
int fabric_has_lid(ibv_context* ctx, uint16_t lid);
int lid_of_ipv4(ibv_context* ctx, uint32_t ipv4_be, uint16_t* lid);
}  // namespace softhca::verbs

// The library-private part of every context, hung on verbs_context::priv. rdma-core reserves that
// member for libibverbs itself (verbs.h only forward-declares the type): providers and the inline
// wrappers never read it. Owned by the context: created by ibv_open_device, deleted by
// ibv_close_device after the driver has released the context.
struct verbs_ex_private {
  // First, where the libraries built beside this one look for it (softhca_ext.h).
  const softhca_ext_ops* ext = &softhca::verbs::kExtOps;
  softhca::runtime::DeviceSlot* slot = nullptr;
  uint32_t uar_index = 0;  // the UAR page acquired for this context, released on close
};

// enum ibv_gid_type_sysfs of rdma-core's driver.h: the GID type as sysfs spells it.
enum ibv_gid_type_sysfs {
  IBV_GID_TYPE_SYSFS_IB_ROCE_V1 = 0,  // "IB/RoCE v1"
  IBV_GID_TYPE_SYSFS_ROCE_V2 = 1,     // "RoCE v2"
};

extern "C" {
// IBVERBS_PRIVATE_34; imported by ibv_devinfo and the pyverbs device module. 0 or -1 with errno.
int ibv_query_gid_type(struct ibv_context* context, uint8_t port_num, unsigned int index,
                       enum ibv_gid_type_sysfs* type);
// IBVERBS_1.0 (sysfs.h): the sysfs mount point, and a file read with the trailing newline removed
// (returns the length read or -1 with errno).
const char* ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);
// IBVERBS_1.1 (driver.h): madvise(DONTFORK/DOFORK) of a range once ibv_fork_init was called.
int ibv_dontfork_range(void* base, size_t size);
int ibv_dofork_range(void* base, size_t size);
// IBVERBS_1.0/1.1 (marshall.h): conversions from the kernel's uverbs/SA structs, used by librdmacm.
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr* dst, struct ib_uverbs_qp_attr* src);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr* dst, struct ib_uverbs_ah_attr* src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec* dst, struct ib_user_path_rec* src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec* dst, struct ibv_sa_path_rec* src);
}

namespace softhca::verbs {

// The verbs_context that holds ctx, or nullptr if ctx is not an extended context.
inline verbs_context* extended(ibv_context* ctx) {
  return ctx != nullptr ? verbs_get_ctx(ctx) : nullptr;
}

// The runtime slot behind a device handle this library handed out, or nullptr for anything else.
runtime::DeviceSlot* slot_of(const ibv_device* device);

// Writes the whole verbs_context op table and the ibv_context_ops entries the library owns
// (context_ops.cc). Called once by ibv_open_device after the driver has built the context.
void install_context_ops(verbs_context* vctx);

// The consumer-visible fields of a new QP (context, qp_context, pd, CQs, SRQ, type), as libibverbs
// sets them after the provider call (objects.cc).
void init_qp_fields(ibv_qp* qp, ibv_pd* pd, const ibv_qp_init_attr& attr);

// The GID table entry (port, index) as _ibv_query_gid_ex reports it: 0, ENODATA for an empty
// slot, or the errno of the failing query (query.cc).
int query_gid_entry(ibv_context* ctx, uint32_t port_num, uint32_t index, ibv_gid_entry* entry);

}  // namespace softhca::verbs
