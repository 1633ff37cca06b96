// Control path: protection domains (AllocPd/DeallocPd) and memory regions (CreateMkey/DestroyMkey,
// ModifyMkey for ibv_rereg_mr).
// Registration pins the pages through the host kernel (pin_user) and tells the device their DMA
// address (CreateMkeyIn.host_addr); the MR's iova stays the application's address.
// Who may touch what: Pd::users counts the objects created on the PD (MRs, AHs, QPs, SRQs); it is
// changed only on the control path and read by dealloc_pd (EBUSY while non-zero). Relaxed
// atomics suffice: the count guards lifetime, it does not publish data.
#include <cerrno>
#include <new>

#include "driver/objects.h"
#include "driver/provider.h"

namespace softhca::driver {
namespace {

constexpr unsigned int kKnownAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                      IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                                      IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB;
constexpr unsigned int kDeviceAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                       IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;
constexpr bool same_bit(unsigned int verbs_bit, uint32_t mkey_bit) { return verbs_bit == mkey_bit; }
static_assert(same_bit(IBV_ACCESS_LOCAL_WRITE, hwif::kAccessLocalWrite) &&
              same_bit(IBV_ACCESS_REMOTE_WRITE, hwif::kAccessRemoteWrite) &&
              same_bit(IBV_ACCESS_REMOTE_READ, hwif::kAccessRemoteRead) &&
              same_bit(IBV_ACCESS_REMOTE_ATOMIC, hwif::kAccessRemoteAtomic) &&
              same_bit(IBV_ACCESS_MW_BIND, hwif::kAccessMwBind));

// The access a registration pins its pages with: write for every right that lets the device (or a
// memory window bound through it) store into them, as the kernel's ib_umem_get asks FOLL_WRITE.
constexpr unsigned int kWritingAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;
constexpr pcie::PinAccess pin_access(unsigned int access) {
  return (access & kWritingAccess) != 0 ? pcie::PinAccess::kWrite : pcie::PinAccess::kRead;
}

// Pins [addr, addr + len) and gives its DMA address. 0 or the errno of the failure. A DMA address
// of 0 is a failure only when the kernel set errno: with the identity mapping, a zero-length
// registration at address 0 is legitimately 0.
int pin(pcie::HostKernel& kernel, const void* addr, size_t len, pcie::PinAccess access, uint64_t& dma) {
  errno = 0;
  dma = kernel.pin_user(addr, len, access);
  if (dma == 0 && errno != 0) return errno;
  return 0;
}

}  // namespace

ibv_pd* alloc_pd(ibv_context* ibctx_ptr) {
  Context* ctx = to_ctx(ibctx_ptr);
  hwif::AllocPdOut out;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, hwif::AllocPdIn{}, out); err != 0) return fail_errno<ibv_pd>(err);
  auto* pd = new (std::nothrow) Pd{};
  if (pd == nullptr) {
    hwif::DeallocPdIn d;
    d.pdn = out.pdn;
    (void)hwif::exec_cmd(*ctx->link.cmd, d);
    return fail_errno<ibv_pd>(ENOMEM);
  }
  pd->pd.context = ibctx_ptr;
  pd->pd.handle = out.pdn;
  pd->pdn = out.pdn;
  return &pd->pd;
}

int dealloc_pd(ibv_pd* ibpd) {
  Pd* pd = to_pd(ibpd);
  if (pd->users.load(std::memory_order_relaxed) != 0) return EBUSY;
  if (pd->protection != nullptr) {  // a parent domain: no device object of its own
    pd->protection->users.fetch_sub(1, std::memory_order_relaxed);
    if (pd->td != nullptr) pd->td->users.fetch_sub(1, std::memory_order_relaxed);
    delete pd;
    return 0;
  }
  hwif::DeallocPdIn in;
  in.pdn = pd->pdn;
  if (int err = hwif::exec_cmd(*to_ctx(ibpd->context)->link.cmd, in); err != 0) return err;
  delete pd;
  return 0;
}

// access: enum ibv_access_flags. Bits of the optional range (IBV_ACCESS_OPTIONAL_RANGE, e.g.
// RELAXED_ORDERING) are accepted and ignored as libibverbs does for devices without optional
// access support; MW_BIND lets memory windows be bound to the MR (the device checks it at each
// bind); ZERO_BASED and HUGETLB are accepted and ignored; ON_DEMAND (ODP) is not
// supported. Remote write or atomic access needs local write (IBA 10.6.3.1; test_reg_mr_bad_flags).
ibv_mr* reg_mr(ibv_pd* ibpd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  Pd* pd = to_pd(ibpd);
  Context* ctx = to_ctx(ibpd->context);
  access &= ~static_cast<unsigned int>(IBV_ACCESS_OPTIONAL_RANGE);
  if (access & ~kKnownAccess) return fail_errno<ibv_mr>(EINVAL);
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
    return fail_errno<ibv_mr>(EINVAL);
  if (access & IBV_ACCESS_ON_DEMAND) return fail_errno<ibv_mr>(EOPNOTSUPP);
  if (ctx->caps.max_mr_size != 0 && length > ctx->caps.max_mr_size) return fail_errno<ibv_mr>(EINVAL);

  // Pinned first: the device learns the DMA address the kernel gives, and may use it as soon as
  // CreateMkey returns. Every failure after this point unpins. Write access on pages the
  // application cannot write fails here with EFAULT, as rdma-core's registration does.
  pcie::HostKernel& kernel = *ctx->link.kernel;
  uint64_t dma = 0;
  if (int err = pin(kernel, addr, length, pin_access(access), dma); err != 0) return fail_errno<ibv_mr>(err);
  hwif::CreateMkeyIn in;
  in.pdn = pd->pdn;
  in.access = access & kDeviceAccess;
  in.host_addr = dma;
  in.iova = iova;
  in.length = length;
  hwif::CreateMkeyOut out;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in, out); err != 0) {
    kernel.unpin_user(dma, length);
    return fail_errno<ibv_mr>(err);
  }
  auto* mr = new (std::nothrow) Mr{};
  if (mr == nullptr) {
    hwif::DestroyMkeyIn d;
    d.lkey = out.lkey;
    (void)hwif::exec_cmd(*ctx->link.cmd, d);
    kernel.unpin_user(dma, length);
    return fail_errno<ibv_mr>(ENOMEM);
  }
  mr->pinned_dma = dma;
  mr->pinned_len = length;
  mr->access = access;
  mr->iova = iova;
  mr->mr.context = ibpd->context;
  mr->mr.pd = ibpd;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->mr.handle = out.lkey;
  mr->mr.lkey = out.lkey;
  mr->mr.rkey = out.rkey;
  pd->users.fetch_add(1, std::memory_order_relaxed);
  return &mr->mr;
}

// The device's ModifyMkey changes the key in place, so lkey and rkey stay what they were (as rxe
// keeps them; mlx5's kernel may hand out new ones, which rdma-core then writes into the ibv_mr:
// a consumer must read them again either way). A new translation is pinned before the device
// switches to it and the old one unpinned after, as dereg_mr unpins after DestroyMkey; an access
// change that needs the pages writable pins the same range again for writing.
int rereg_mr(ibv_mr* ibmr, int flags, ibv_pd* new_pd, void* addr, size_t length, int access) {
  Mr* mr = to_mr(ibmr);
  Context* ctx = to_ctx(ibmr->context);
  pcie::HostKernel& kernel = *ctx->link.kernel;
  const bool change_translation = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0;
  const bool change_pd = (flags & IBV_REREG_MR_CHANGE_PD) != 0;
  const bool change_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) != 0;
  if (!change_translation && !change_pd && !change_access) return EINVAL;  // the kernel's answer
  if (mr->dm != nullptr) return EINVAL;  // an MR in device memory is not registered again, as the kernel's
  if (change_pd && (new_pd == nullptr || new_pd->context != ibmr->context)) return EINVAL;
  unsigned int new_access = mr->access;
  if (change_access) {
    new_access = static_cast<unsigned int>(access) & ~static_cast<unsigned int>(IBV_ACCESS_OPTIONAL_RANGE);
    if (new_access & ~kKnownAccess) return EINVAL;
    if ((new_access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(new_access & IBV_ACCESS_LOCAL_WRITE))
      return EINVAL;
    if (new_access & IBV_ACCESS_ON_DEMAND) return EOPNOTSUPP;
  }
  void* new_addr = change_translation ? addr : ibmr->addr;
  const size_t new_len = change_translation ? length : ibmr->length;
  if (change_translation && ctx->caps.max_mr_size != 0 && length > ctx->caps.max_mr_size) return EINVAL;
  const bool repin = change_translation || pin_access(new_access) != pin_access(mr->access);

  uint64_t dma = mr->pinned_dma;
  if (repin) {
    if (int err = pin(kernel, new_addr, new_len, pin_access(new_access), dma); err != 0) return err;
  }
  hwif::ModifyMkeyIn in;
  in.lkey = ibmr->lkey;
  in.what = (change_translation || repin ? hwif::kMkeyTranslation : 0u) | (change_pd ? hwif::kMkeyPd : 0u) |
            (change_access ? hwif::kMkeyAccess : 0u);
  in.pdn = change_pd ? to_pd(new_pd)->pdn : 0;
  in.access = new_access & kDeviceAccess;
  in.host_addr = dma;
  in.iova = change_translation ? reinterpret_cast<uintptr_t>(addr) : mr->iova;
  in.length = new_len;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, in); err != 0) {
    if (repin) kernel.unpin_user(dma, new_len);
    return err;  // the device changed nothing: the old registration still holds
  }
  if (repin) kernel.unpin_user(mr->pinned_dma, mr->pinned_len);
  mr->pinned_dma = dma;
  mr->pinned_len = new_len;
  mr->access = new_access;
  mr->iova = in.iova;
  if (change_pd) {
    to_pd(ibmr->pd)->users.fetch_sub(1, std::memory_order_relaxed);
    to_pd(new_pd)->users.fetch_add(1, std::memory_order_relaxed);
  }
  return 0;
}

int dereg_mr(ibv_mr* ibmr) {
  Mr* mr = to_mr(ibmr);
  hwif::DestroyMkeyIn in;
  in.lkey = ibmr->lkey;
  const DeviceLink& link = to_ctx(ibmr->context)->link;
  if (int err = hwif::exec_cmd(*link.cmd, in); err != 0) return err;
  // After DestroyMkey: the key is revoked, so the device no longer reaches the pages.
  if (mr->dm != nullptr) {
    mr->dm->users.fetch_sub(1, std::memory_order_relaxed);
  } else {
    link.kernel->unpin_user(mr->pinned_dma, mr->pinned_len);
  }
  to_pd(ibmr->pd)->users.fetch_sub(1, std::memory_order_relaxed);
  delete mr;
  return 0;
}

}  // namespace softhca::driver
