// Device memory (ibv_alloc_dm(3), ibv_reg_dm_mr(3)): allocations of the device's own memory, the
// CPU's copies into and out of it — MMIO through the BAR, counted by the host port as MWr
// (dm_write) and MRd/CplD (dm_read) TLPs — and MRs in it, which the device reads and writes with
// no PCIe traffic. Control path; the copies take no lock of the driver's (the device's BAR takes
// stores and loads from any thread, as a real BAR does).
#include <cerrno>
#include <new>

#include "driver/objects.h"
#include "driver/provider.h"
#include "hwif/uar.h"

namespace softhca::driver {
namespace {

// What an MR in device memory may be registered with, as mlx5's MLX5_DM_ALLOWED_ACCESS.
constexpr unsigned int kDmAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                   IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED;
constexpr unsigned int kDeviceAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                       IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint64_t kDmAccessAlign = 4;  // mlx5: device memory is stored into by 4-byte words

bool inside(const Dm& dm, uint64_t offset, size_t length) {
  return offset <= dm.length && length <= dm.length - offset;
}

int memcpy_to_dm(ibv_dm* ibdm, uint64_t dm_offset, const void* host_addr, size_t length) {
  Dm* dm = to_dm(ibdm);
  if (!inside(*dm, dm_offset, length)) return EFAULT;
  if (dm_offset % kDmAccessAlign != 0 || length % kDmAccessAlign != 0) return EINVAL;
  dm->ctx->link.host_port->write_memory(dm->bar_offset + dm_offset, host_addr, length, pcie::TlpCause::kDmWrite);
  return 0;
}

int memcpy_from_dm(void* host_addr, ibv_dm* ibdm, uint64_t dm_offset, size_t length) {
  Dm* dm = to_dm(ibdm);
  if (!inside(*dm, dm_offset, length)) return EFAULT;
  dm->ctx->link.host_port->read_memory(dm->bar_offset + dm_offset, host_addr, length, pcie::TlpCause::kDmRead);
  return 0;
}

}  // namespace

ibv_dm* alloc_dm(ibv_context* ibctx_ptr, ibv_alloc_dm_attr* attr) {
  Context* ctx = to_ctx(ibctx_ptr);
  if (attr == nullptr || attr->comp_mask != 0) return fail_errno<ibv_dm>(EINVAL);
  if (ctx->caps.max_dm_size == 0) return fail_errno<ibv_dm>(EOPNOTSUPP);
  hwif::AllocDmIn in;
  in.length = attr->length;
  in.log_align = attr->log_align_req;
  hwif::AllocDmOut out;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in, out); err != 0) return fail_errno<ibv_dm>(err);
  auto* dm = new (std::nothrow) Dm{};
  if (dm == nullptr) {
    hwif::FreeDmIn f;
    f.dmn = out.dmn;
    (void)hwif::exec_cmd(*ctx->link.cmd, f);
    return fail_errno<ibv_dm>(ENOMEM);
  }
  dm->dm.context = ibctx_ptr;
  dm->dm.memcpy_to_dm = memcpy_to_dm;
  dm->dm.memcpy_from_dm = memcpy_from_dm;
  dm->dm.comp_mask = 0;
  dm->dm.handle = out.dmn;
  dm->ctx = ctx;
  dm->dmn = out.dmn;
  dm->length = attr->length;
  dm->bar_offset = hwif::kDeviceMemoryBarOffset + out.bar_offset;
  dm->dma_addr = out.dma_addr;
  return &dm->dm;
}

int free_dm(ibv_dm* ibdm) {
  Dm* dm = to_dm(ibdm);
  if (dm->users.load(std::memory_order_relaxed) != 0) return EBUSY;
  hwif::FreeDmIn in;
  in.dmn = dm->dmn;
  if (int err = hwif::exec_cmd(*dm->ctx->link.cmd, in); err != 0) return err;
  delete dm;
  return 0;
}

ibv_mr* reg_dm_mr(ibv_pd* ibpd, ibv_dm* ibdm, uint64_t dm_offset, size_t length, unsigned int access) {
  Pd* pd = to_pd(ibpd);
  Dm* dm = to_dm(ibdm);
  access &= ~static_cast<unsigned int>(IBV_ACCESS_OPTIONAL_RANGE);
  // As the kernel's reg_dm_mr: zero-based only, inside the allocation; as any MR: remote write or
  // atomic access needs local write (IBA 10.6.3.1).
  if ((access & ~kDmAccess) != 0 || (access & IBV_ACCESS_ZERO_BASED) == 0) return fail_errno<ibv_mr>(EINVAL);
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
    return fail_errno<ibv_mr>(EINVAL);
  if (ibdm->context != ibpd->context || !inside(*dm, dm_offset, length)) return fail_errno<ibv_mr>(EINVAL);
  Context* ctx = to_ctx(ibpd->context);
  hwif::CreateMkeyIn in;
  in.pdn = pd->pdn;
  in.access = access & kDeviceAccess;
  in.host_addr = dm->dma_addr + dm_offset;
  in.iova = 0;  // zero-based
  in.length = length;
  in.dmn = dm->dmn;
  hwif::CreateMkeyOut out;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in, out); err != 0) return fail_errno<ibv_mr>(err);
  auto* mr = new (std::nothrow) Mr{};
  if (mr == nullptr) {
    hwif::DestroyMkeyIn d;
    d.lkey = out.lkey;
    (void)hwif::exec_cmd(*ctx->link.cmd, d);
    return fail_errno<ibv_mr>(ENOMEM);
  }
  mr->access = access;
  mr->dm = dm;
  mr->mr.context = ibpd->context;
  mr->mr.pd = ibpd;
  mr->mr.addr = nullptr;  // zero-based: the MR's first byte is address 0
  mr->mr.length = length;
  mr->mr.handle = out.lkey;
  mr->mr.lkey = out.lkey;
  mr->mr.rkey = out.rkey;
  pd->users.fetch_add(1, std::memory_order_relaxed);
  dm->users.fetch_add(1, std::memory_order_relaxed);
  return &mr->mr;
}

}  // namespace softhca::driver
