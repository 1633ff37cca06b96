// The driver's side of an event queue (event_ring.h): creation, taking EQEs in order, publishing
// the consumer index, and keeping the vector's fd readable exactly while an EQE waits.
#include "driver/event_ring.h"

#include <atomic>
#include <cerrno>
#include <new>

#include "driver/objects.h"
#include "hwif/uar.h"

namespace softhca::driver {
namespace {

constexpr uint8_t kEqeInitOwner = 1;  // invalid for pass 0 (mlx5 MLX5_EQE_OWNER_INIT_VAL)

hwif::Eqe* eqe_at(const EventRing& r, uint32_t index) {
  return reinterpret_cast<hwif::Eqe*>(r.ring.data()) + (index & ((1u << r.log_nent) - 1));
}

// The EQ doorbell: {consumer index, eqn}, two big-endian words, into the context's UAR page.
void publish_ci(Context& ctx, EventRing& r) {
  struct {
    Be32 hi;
    Be32 lo;
  } db{Be32(r.ci), Be32(r.eqn)};
  static_assert(sizeof(db) == hwif::kDoorbellBytes);
  r.published_ci = r.ci;
  ctx.link.host_port->write_doorbell(hwif::uar_page_offset(ctx.link.uar_index) + hwif::kEqDoorbellOffset, &db,
                                     pcie::TlpCause::kEqDoorbell);
}

}  // namespace

int event_ring_create(Context& ctx, EventRing& r, uint32_t log_nent, bool async) {
  pcie::HostKernel& kernel = *ctx.link.kernel;
  const uint32_t nent = 1u << log_nent;
  if (!r.ring.allocate(kernel, static_cast<size_t>(nent) * hwif::kEqeBytes)) return errno;
  for (uint32_t i = 0; i < nent; ++i) {
    auto* e = new (r.ring.data() + static_cast<size_t>(i) * hwif::kEqeBytes) hwif::Eqe{};
    e->owner = kEqeInitOwner;
  }
  r.log_nent = log_nent;
  const int fd = kernel.alloc_vector(&r.msi_vector);
  if (fd < 0) {
    const int err = errno;
    r.ring = HostBuffer{};
    return err;
  }
  hwif::CreateEqIn in;
  in.ring_addr = r.ring.dma_addr();
  in.log_nent = log_nent;
  in.msi_vector = r.msi_vector;
  in.async_events = async;
  hwif::CreateEqOut out;
  if (int err = hwif::exec_cmd(*ctx.link.cmd, in, out); err != 0) {
    kernel.free_vector(r.msi_vector, fd);
    r.ring = HostBuffer{};
    return err;
  }
  r.eqn = out.eqn;
  r.fd = fd;
  return 0;
}

int event_ring_destroy(Context& ctx, EventRing& r) {
  hwif::DestroyEqIn in;
  in.eqn = r.eqn;
  if (int err = hwif::exec_cmd(*ctx.link.cmd, in); err != 0) return err;
  // After DestroyEq: the device raises the vector no more.
  ctx.link.kernel->free_vector(r.msi_vector, r.fd);
  r.fd = -1;
  r.ring = HostBuffer{};
  return 0;
}

const hwif::Eqe* event_ring_peek(const EventRing& r) {
  hwif::Eqe* eqe = eqe_at(r, r.ci);
  const uint8_t owner = std::atomic_ref<uint8_t>(eqe->owner).load(std::memory_order_acquire);
  return (owner & 1) == ((r.ci >> r.log_nent) & 1) ? eqe : nullptr;
}

void event_ring_pop(Context& ctx, EventRing& r) {
  ++r.ci;
  // Half a ring taken since the device last heard: tell it, so a busy consumer that never finds
  // the ring empty does not make it hold events.
  if (r.ci - r.published_ci >= (1u << r.log_nent) / 2) publish_ci(ctx, r);
  // Firings of EQEs already taken (this one's, or several a wait consumed at once) go; one is
  // raised again if an EQE still waits. A firing the device sends after the clear belongs to an
  // EQE written after it, which peek may or may not see: either way the fd stays readable for it.
  pcie::HostKernel& kernel = *ctx.link.kernel;
  kernel.clear_vector(r.fd);
  if (event_ring_peek(r) != nullptr) kernel.raise_vector(r.msi_vector, r.fd);
}

void event_ring_idle(Context& ctx, EventRing& r) {
  if (r.ci != r.published_ci) publish_ci(ctx, r);
}

}  // namespace softhca::driver
