// Event queues on the device side: EQEs written by DMA with the owner bit of the pass, the EQ
// doorbell through which the driver publishes its consumer index, events held while an EQ is
// full, and the asynchronous events (IBA 11.6.3) raised to a context's async EQ: affiliated QP,
// CQ and SRQ events and the port's state changes (docs/events.md).
// Runs under the device lock like everything in Device. An EQE is one MWr (cause eqe_write), its
// interrupt one more (cause interrupt); the driver's doorbell one MWr (cause eq_doorbell).
#include <bit>
#include <cerrno>

#include "hca/device.h"
#include "hwif/uar.h"

namespace softhca::hca {

using namespace hwif;

namespace {
bool has_room(const EventQueue& eq) { return eq.pi - eq.ci < (1u << eq.log_nent); }

Eqe eqe_of(uint8_t type, uint32_t element) {
  Eqe e{};
  e.type = type;
  e.element = element & 0xffffff;
  return e;
}

Eqe port_eqe(uint8_t sub_type) {
  Eqe e{};
  e.type = kEqeTypePortChange;
  e.sub_type = sub_type;
  e.port = 1;
  return e;
}

uint16_t qp_event_bit(uint8_t type) {
  for (size_t i = 0; i < kQpEventTypes.size(); ++i)
    if (kQpEventTypes[i] == type) return static_cast<uint16_t>(1u << i);
  return 0;
}
}  // namespace

void Device::write_eqe(EventQueue& eq, Eqe e) {
  const uint32_t nent = 1u << eq.log_nent;
  e.owner = static_cast<uint8_t>((eq.pi >> eq.log_nent) & 1);
  if (!dma_.dma_write_publish(eq.ring + static_cast<uint64_t>(eq.pi & (nent - 1)) * kEqeBytes, &e, sizeof e,
                              pcie::TlpCause::kEqeWrite)) {
    fault();
    eq.in_error = true;  // no interrupt for an event that was not written
    return;
  }
  ++eq.pi;
  dma_.raise_interrupt(eq.msi_vector);
}

bool Device::try_write_eqe(EventQueue& eq, Eqe e) {
  if (eq.in_error) return true;  // lost, as every later event of this EQ
  if (eq.held != 0 || !has_room(eq)) return false;
  write_eqe(eq, e);
  return true;
}

void Device::on_eq_doorbell(uint32_t, uint64_t, const uint8_t* data, size_t len) {
  if (len != kDoorbellBytes) return;
  const auto words = load_as<std::array<Be32, 2>>(data);
  const uint32_t eqn = words[1].get();
  EventQueue* eq = eqs_.find(eqn);
  if (eq == nullptr) return;
  // A consumer index ahead of what was written, or behind by more than the ring: not one this
  // EQ can have (a stale or hostile write), ignored.
  const uint32_t ci = words[0].get();
  if (eq->pi - ci > (1u << eq->log_nent)) return;
  eq->ci = ci;
  if (eq->held != 0) write_held_events(eqn, *eq);
}

void Device::write_held_events(uint32_t eqn, EventQueue& eq) {
  const auto room = [&] { return !eq.in_error && has_room(eq); };
  while (eq.held_port_count != 0 && room()) {
    write_eqe(eq, port_eqe(eq.held_port[0]));
    for (uint32_t i = 1; i < eq.held_port_count; ++i) eq.held_port[i - 1] = eq.held_port[i];
    --eq.held_port_count;
    --eq.held;
  }
  if (eq.held != 0) {
    cqs_.for_each([&](uint32_t cqn, CompletionQueue& cq) {
      if (cq.completion_held && cq.eqn == eqn && room()) {
        cq.completion_held = false;
        --eq.held;
        write_eqe(eq, eqe_of(kEqeTypeCompletion, cqn));
      }
      if (cq.error_held && cq.async_eqn == eqn && room()) {
        cq.error_held = false;
        --eq.held;
        write_eqe(eq, eqe_of(kEqeTypeCqError, cqn));
      }
    });
  }
  if (eq.held != 0) {
    qps_.for_each([&](uint32_t qpn, QueuePair& qp) {
      if (qp.async_eqn != eqn) return;
      while (qp.held_events != 0 && room()) {
        const auto i = static_cast<size_t>(std::countr_zero(qp.held_events));
        qp.held_events = static_cast<uint16_t>(qp.held_events & ~(1u << i));
        --eq.held;
        write_eqe(eq, eqe_of(kQpEventTypes[i], qpn));
      }
    });
  }
  if (eq.held != 0) {
    srqs_.for_each([&](uint32_t srqn, SharedReceiveQueue& srq) {
      if (srq.limit_held && srq.async_eqn == eqn && room()) {
        srq.limit_held = false;
        --eq.held;
        write_eqe(eq, eqe_of(kEqeTypeSrqLimit, srqn));
      }
    });
  }
}

void Device::raise_qp_event(QueuePair& qp, uint8_t type) {
  EventQueue* eq = eqs_.find(qp.async_eqn);
  const uint16_t bit = qp_event_bit(type);
  if (eq == nullptr || bit == 0 || (qp.held_events & bit) != 0) return;  // already waiting: one is enough
  if (try_write_eqe(*eq, eqe_of(type, qp.qpn))) return;
  qp.held_events = static_cast<uint16_t>(qp.held_events | bit);
  ++eq->held;
}

void Device::raise_cq_error(CompletionQueue& cq, uint32_t cqn) {
  EventQueue* eq = eqs_.find(cq.async_eqn);
  if (eq == nullptr || cq.error_held) return;
  if (try_write_eqe(*eq, eqe_of(kEqeTypeCqError, cqn))) return;
  cq.error_held = true;
  ++eq->held;
}

void Device::raise_srq_limit(SharedReceiveQueue& srq, uint32_t srqn) {
  EventQueue* eq = eqs_.find(srq.async_eqn);
  if (eq == nullptr || srq.limit_held) return;
  if (try_write_eqe(*eq, eqe_of(kEqeTypeSrqLimit, srqn))) return;
  srq.limit_held = true;
  ++eq->held;
}

void Device::drop_held_events(const QueuePair& qp) {
  if (qp.held_events == 0) return;
  if (EventQueue* eq = eqs_.find(qp.async_eqn)) eq->held -= static_cast<uint32_t>(std::popcount(qp.held_events));
}

void Device::drop_held_events(const CompletionQueue& cq) {
  if (cq.completion_held)
    if (EventQueue* eq = eqs_.find(cq.eqn)) --eq->held;
  if (cq.error_held)
    if (EventQueue* eq = eqs_.find(cq.async_eqn)) --eq->held;
}

void Device::drop_held_events(const SharedReceiveQueue& srq) {
  if (srq.limit_held)
    if (EventQueue* eq = eqs_.find(srq.async_eqn)) --eq->held;
}

void Device::fatal_error(QueuePair& qp) {
  raise_qp_event(qp, kEqeTypeWqCatastrophic);
  enter_error(qp);
}

void Device::defer_fatal(const QueuePair& qp) {
  if (qp.state() == QpState::kErr) return;
  for (const uint32_t qpn : fatal_qps_)
    if (qpn == qp.qpn) return;
  fatal_qps_.push_back(qp.qpn);
}

void Device::run_deferred_fatal() {
  // fatal_error() may find more CQs in error (its flush): the list grows while it is walked.
  for (size_t i = 0; i < fatal_qps_.size(); ++i) {
    QueuePair* qp = qps_.find(fatal_qps_[i]);
    if (qp != nullptr && qp->state() != QpState::kErr) fatal_error(*qp);
  }
  fatal_qps_.clear();
}

void Device::check_sq_drained(QueuePair& qp) {
  if (qp.state() != QpState::kSqd || !qp.attr.sq_draining || qp.req.complete != qp.req.exec) return;
  qp.attr.sq_draining = false;
  if (!qp.sqd_notify) return;
  qp.sqd_notify = false;
  raise_qp_event(qp, kEqeTypeSqDrained);
}

// ---- the port ---------------------------------------------------------------------------------

int Device::cmd_set_port_state(const SetPortStateIn& in, NoOut&) {
  if (in.port != 1) return EINVAL;
  const uint8_t down = in.active ? 0 : 1;
  if (state_.port_down == down) return 0;
  state_.port_down = down;
  // Every context hears of it (ib_dispatch_event to every client): each async EQ of the device.
  const uint8_t sub_type = in.active ? kEqePortActive : kEqePortDown;
  eqs_.for_each([&](uint32_t, EventQueue& eq) {
    if (!eq.async_events || try_write_eqe(eq, port_eqe(sub_type))) return;
    if (eq.held_port_count == EventQueue::kHeldPortEvents) {
      // Full of changes nobody has read: the two oldest (a down and an up, in either order)
      // cancel out; what is left still ends in the state the port has.
      for (uint32_t i = 2; i < eq.held_port_count; ++i) eq.held_port[i - 2] = eq.held_port[i];
      eq.held_port_count -= 2;
      eq.held -= 2;
    }
    eq.held_port[eq.held_port_count++] = sub_type;
    ++eq.held;
  });
  return 0;
}

}  // namespace softhca::hca
