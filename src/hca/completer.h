// The "complete" stage: writes CQEs (requester, responder, error) into CQ rings by DMA with the
// ownership bit for the current pass, and raises completion events through the CQ's event queue
// when the CQ is armed, at once or as the CQ's moderation (count, period) allows (held in the
// device while the EQ is full). CQs created with timestamps get the device clock in their success
// CQEs. An overrun, or a DMA fault on a CQ's ring or doorbell record, puts the CQ in error: it
// writes nothing more, its consumer gets CQ_ERR and each QP with a CQE for it QP_FATAL. A DMA
// fault on an EQ's ring puts the EQ in error (counted in DeviceStats).
#pragma once
#include <cstdint>

#include "hca/device.h"

namespace softhca::hca {

class Completer {
 public:
  explicit Completer(Device& dev) : dev_(dev) {}

  // Requester success CQE for a signaled WQE.
  void send_done(QueuePair& qp, const SendWqe& wqe);
  // Error CQE for a send WQE (flush or a real error).
  void send_error(QueuePair& qp, const SendWqe& wqe, hwif::CqeSyndrome syndrome);
  // Error CQE for a send WQE known only by index and opcode (flushing WQEs never parsed).
  void send_flush(QueuePair& qp, uint16_t wqe_index, hwif::WqeOpcode opcode);

  struct RecvInfo {
    hwif::CqeOpcode opcode = hwif::CqeOpcode::kRespSend;
    uint16_t wqe_counter = 0;
    uint32_t byte_len = 0;
    uint32_t imm = 0;         // raw network-order immediate
    bool solicited = false;
    uint32_t src_qpn = 0;     // UD
    uint16_t slid = 0;
    uint8_t sl = 0;
    bool grh = false;
  };
  void recv_done(QueuePair& qp, const RecvInfo& info);
  void recv_error(QueuePair& qp, uint16_t wqe_counter, hwif::CqeSyndrome syndrome);

  // CQ arm doorbell, carrying the consumer index `ci` (mlx5_arm_cq): request an event for the
  // next (solicited) CQE. A next-completion arm fires at once for CQEs written while the CQ was not
  // armed and not yet polled (ci behind them), so that a consumer that polls until empty and then
  // arms never loses the event for a CQE that came in between (completer.cc).
  void arm(CompletionQueue& cq, uint32_t cqn, bool solicited_only, uint32_t ci);
  // The moderation period of an armed CQ ran out (Device::on_timer): its event goes now.
  void moderation_expired(CompletionQueue& cq, uint32_t cqn);

 private:
  // Where a QP's receive completions go: its SRQ (kNoSrq: none) and CQ; for an XRC TGT QP those
  // of the XRC SRQ its current request names.
  struct RecvTarget {
    uint32_t srqn;
    uint32_t cqn;
  };
  [[nodiscard]] RecvTarget recv_target(const QueuePair& qp) const;
  // qp: the QP whose CQE it is (its CQ's overrun or error fails it, Device::defer_fatal()).
  void write(const QueuePair& qp, uint32_t cqn, const hwif::Cqe64& cqe, bool solicited, bool is_error);
  // The CQ goes to error (overrun or DMA fault): CQ_ERR to its async EQ, QP_FATAL for qp.
  void fail_cq(const QueuePair& qp, CompletionQueue& cq, uint32_t cqn);
  // A CQE that qualifies for the armed CQ's event: raised now, or held back by moderation.
  void on_qualifying_cqe(CompletionQueue& cq, uint32_t cqn);
  void raise_event(CompletionQueue& cq, uint32_t cqn);

  Device& dev_;
};

}  // namespace softhca::hca
