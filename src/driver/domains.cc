// Control path: thread domains and parent domains (ibv_alloc_td(3), ibv_alloc_parent_domain(3)).
// Neither is a device object: a parent domain protects with its PD's pdn, and the device never
// learns of thread domains (softhca's queues keep their locks, and every context rings through its
// own UAR page, so a thread domain needs no doorbell of its own as on mlx5).
// Who may touch what: users counters change on the control path only (relaxed atomics, as Pd's);
// a parent domain holds one use of its PD and of its TD until ibv_dealloc_pd.
#include <cerrno>
#include <new>

#include "driver/objects.h"
#include "driver/provider.h"

namespace softhca::driver {

ibv_td* alloc_td(ibv_context* ibctx_ptr, const ibv_td_init_attr* attr) {
  if (attr->comp_mask != 0) return fail_errno<ibv_td>(EINVAL);
  auto* td = new (std::nothrow) Td{};
  if (td == nullptr) return fail_errno<ibv_td>(ENOMEM);
  td->td.context = ibctx_ptr;
  return &td->td;
}

int dealloc_td(ibv_td* ibtd) {
  Td* td = to_td(ibtd);
  if (td->users.load(std::memory_order_relaxed) != 0) return EBUSY;
  delete td;
  return 0;
}

ibv_pd* alloc_parent_domain(ibv_context* ibctx_ptr, const ibv_parent_domain_init_attr* attr) {
  constexpr uint32_t kKnown = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if ((attr->comp_mask & ~kKnown) != 0) return fail_errno<ibv_pd>(EINVAL);
  if (attr->pd == nullptr || attr->pd->context != ibctx_ptr) return fail_errno<ibv_pd>(EINVAL);
  Pd* protection = to_pd(attr->pd);
  if (protection->protection != nullptr) return fail_errno<ibv_pd>(EINVAL);  // a parent domain's parent
  if (attr->td != nullptr && attr->td->context != ibctx_ptr) return fail_errno<ibv_pd>(EINVAL);
  const bool allocators = (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) != 0;
  if (allocators && ((attr->alloc == nullptr) != (attr->free == nullptr))) return fail_errno<ibv_pd>(EINVAL);

  auto* pd = new (std::nothrow) Pd{};
  if (pd == nullptr) return fail_errno<ibv_pd>(ENOMEM);
  pd->pd.context = ibctx_ptr;
  pd->pd.handle = protection->pd.handle;
  pd->pdn = protection->pdn;
  pd->protection = protection;
  pd->td = attr->td != nullptr ? to_td(attr->td) : nullptr;
  if (allocators && attr->alloc != nullptr) {
    pd->allocator.pd = &pd->pd;
    pd->allocator.alloc = attr->alloc;
    pd->allocator.free = attr->free;
    pd->allocator.pd_context =
        (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) != 0 ? attr->pd_context : nullptr;
  }
  protection->users.fetch_add(1, std::memory_order_relaxed);
  if (pd->td != nullptr) pd->td->users.fetch_add(1, std::memory_order_relaxed);
  return &pd->pd;
}

}  // namespace softhca::driver
