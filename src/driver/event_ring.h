// An event queue as the driver keeps it: a ring of hwif::Eqe in host memory that the device fills
// (owner = pass number & 1, the other bytes first), the MSI-X vector it raises, whose fd is what
// applications poll, and the consumer index the driver publishes through the EQ doorbell (one
// 8-byte MWr, cause eq_doorbell) so the device never writes over an EQE not yet taken.
// Used for completion channels (comp_channel.cc) and a context's async events (async_events.cc).
//
// The fd is readable exactly while an EQE waits, as the kernel's event file is: taking an EQE
// consumes the vector's pending firings and raises it again when more EQEs remain, so a firing is
// never left over for an event already taken (a poll() that lies) and a second waiter is woken
// for a second event. Who may touch what: everything but the fd under `lock`.
#pragma once
#include <cstdint>
#include <mutex>

#include "driver/host_buffer.h"
#include "hwif/cqe.h"

namespace softhca::driver {

struct Context;

struct EventRing {
  uint32_t eqn = 0;
  uint64_t msi_vector = 0;
  int fd = -1;
  HostBuffer ring;
  uint32_t log_nent = 0;
  uint32_t ci = 0;            // consumer index, free-running
  uint32_t published_ci = 0;  // what the last EQ doorbell told the device
  std::mutex lock;
};

// 2^log_nent EQEs, a vector and CreateEq (async: the context's async EQ). 0 or an errno; on an
// error nothing is left allocated.
int event_ring_create(Context& ctx, EventRing& r, uint32_t log_nent, bool async);
// DestroyEq, then the vector goes back to the host kernel. 0 or the device's errno.
int event_ring_destroy(Context& ctx, EventRing& r);

// Caller holds r.lock. The next EQE if the device has written it, else nullptr; the caller reads
// it and then calls event_ring_pop(). Acquire: the EQE's bytes are read after its owner bit.
const hwif::Eqe* event_ring_peek(const EventRing& r);
// Caller holds r.lock: the EQE seen by peek is consumed; publishes the consumer index when half
// the ring was taken since the last doorbell, and makes the fd readable iff another EQE waits.
void event_ring_pop(Context& ctx, EventRing& r);
// Caller holds r.lock and found the ring empty: publishes the consumer index if the device has
// not seen it yet (events it holds because the ring looked full can then be written), before the
// caller waits.
void event_ring_idle(Context& ctx, EventRing& r);

}  // namespace softhca::driver
