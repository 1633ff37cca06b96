// The requester side of a QP's transport: turns executed WQEs into request packets (RC, UC, UD),
// and for RC tracks PSNs, handles ACK/NAK/RNR NAK, READ responses and atomic ACKs, completes WQEs
// in order, and retransmits (go-back-N from the first unacknowledged PSN) on NAK or timeout.
// Data path under the device lock; the payload is gathered by DMA per packet. A DMA fault on the
// WQE's local buffers completes it with a local protection error (IBV_WC_LOC_PROT_ERR).
#pragma once
#include <span>

#include "hca/device.h"
#include "hca/transport/wire.h"

namespace softhca::hca {

class Responder;

// At most 128 unacknowledged PSNs per QP (as Linux rxe, figures.md R1); an ACK is requested at
// least every 64 packets (R1).
inline constexpr uint32_t kMaxUnackedPsns = 128;
inline constexpr uint32_t kAckRequestInterval = 64;

// Whether RC packet `index` of a message of `npkts` asks for an ACK: the last one, and one every
// kAckRequestInterval packets, so a message longer than the window keeps flowing.
constexpr bool rc_asks_ack(uint32_t index, uint32_t npkts) {
  return index + 1 == npkts || (index + 1) % kAckRequestInterval == 0;
}

class Requester {
 public:
  Requester(Device& dev, QueuePair& qp) : dev_(dev), qp_(qp) {}

  // Starts a prepared WQE: assigns PSNs and sends its packets.
  void execute(SendRecord& rec);
  // Express WRITEs' ACKs (express.cc) wait for take_express_ack() instead of being taken by each
  // pump(): a post list then costs one acknowledgement, as merged ACKs do on the packet path.
  void defer_express_acks() { defer_express_acks_ = true; }
  // Takes the ACK of the express WRITEs sent so far, if any (and of those it lets out).
  void take_express_ack();
  // Runs of small WRITEs (express.cc; the send pipeline prepares them). How many new WRITEs may go
  // express one after the other now, as execute() would send each: RC, acknowledgements deferred
  // and coming straight back, nothing older waiting to go out, the target expecting our next PSN,
  // and the room left in the window; and TLP counts held (no sink looks at single TLPs), so a run's
  // are added up. 0: none may.
  [[nodiscard]] uint32_t write_run_room();
  // Executes up to `n` prepared one-packet WRITEs from exec on (at most write_run_room()), each as
  // execute() and express_write() would, their packets, ACKs and TLPs counted once for the run. Stops at
  // the first that cannot go express (its key, its target, its source), which is left unexecuted.
  // Returns how many went; exec has moved past them.
  uint32_t execute_write_run(uint32_t n);
  // A response-class packet for this QP (ACK, NAK, READ response, atomic ACK).
  void on_response(const fabric::PacketFields& f, std::span<const uint8_t> payload);
  // The QP's timer expired: an RNR wait ended, or the ACK timeout fired.
  void on_timer(bool rnr_wait);

 private:
  void send_request_packet(const SendRecord& rec, uint32_t index);
  // A whole RDMA WRITE (no immediate) to a QP of this device, carried out at once when nothing but
  // ACKs waits in the loopback queue (express.cc): the responder's checks first, then one copy, each
  // packet and DMA counted as on the wire. False, with nothing done, when it must take the packet
  // path (anything the responder would refuse, payload not in one mapping, other packets queued).
  bool express_write(const SendRecord& rec);
  // The same for a whole SEND or SEND with immediate into the receive WQE the target would
  // consume (RQ or SRQ), its CQE written as the last packet would write it.
  bool express_send(const SendRecord& rec);
  // What express_write() and express_send() share: whether this QP's messages may go express now
  // (the link open, only ACKs queued, the target's state unchanged), and the source bytes.
  bool express_open_now() {
    return open_link() && dev_.loop_holds_only_acks() && link_.target->state() == link_.target_state;
  }
  // The source of a message going express: inline bytes in the send queue (`source` left empty)
  // or its one SGE in one mapping; false when it is neither.
  bool express_source_of(const SendRecord& rec, std::span<const uint8_t>& source);
  // Moves its bytes to `memory`, from the ring or from `source`.
  void place_express(const SendWqe& w, std::span<const uint8_t> source, uint8_t* memory);
  // Counts each packet of a message placed express as the wire would (sent, taken, its payload DMAs)
  // and the responder's state and ACKs it leaves; `dest_addr` where the payload went.
  void count_express_packets(const SendRecord& rec, Responder& responder, uint64_t dest_addr);
  // Whether the ACKs `target` sends come straight back to this QP (its connected peer is us, on a
  // route that loops back and a P_Key we take): an express WRITE's ACK is then taken at once.
  [[nodiscard]] bool acks_come_back_from(const QueuePair& target) const;
  // What express_write() learns at its first WRITE and keeps for those that follow in this entry
  // point: the route and the target QP, checked once (none of it changes before the entry point
  // returns but the target's state, which is compared each time), and the keys last used.
  struct ExpressLink {
    enum class Status : uint8_t { kUnknown, kOpen, kClosed } status = Status::kUnknown;
    QueuePair* target = nullptr;
    hwif::QpState target_state{};  // the state refuses() passed
    bool ack_here = false;         // acks_come_back_from(target)
    MappedKey dest;                // the remote key last written through
    MappedKey source;              // the local key last read from
    MappedKey recv;                // the target's local key last received into
  };
  // The link for this QP's WRITEs, opened at the first call; false when they cannot go express
  // in this entry point (not looped back on InfiniBand, or a target that takes no WRITE).
  bool open_link() {
    return link_.status == ExpressLink::Status::kOpen || (link_.status == ExpressLink::Status::kUnknown && try_open_link());
  }
  bool try_open_link();
  // The host memory a WRITE's one SGE reads (rec.sge0_host_addr), mapped; empty when not in one
  // mapping. Through the local key the last one read from when it is the same.
  std::span<const uint8_t> express_source(const SendRecord& rec) {
    const SendWqe& w = rec.wqe;
    // prepare() translated the first SGE's key (rec.sge0_host_addr) in this same entry point.
    if (w.num_sge == 0 || w.sge[0].length < w.length || rec.sge0_host_addr == 0) return {};
    if (const uint8_t* memory = link_.source.at(w.sge[0].lkey, w.sge[0].addr, w.length)) return {memory, w.length};
    return express_source_new_key(w);
  }
  std::span<const uint8_t> express_source_new_key(const SendWqe& w);
  // Whether every packet of the message lies inside the window pump() keeps.
  [[nodiscard]] bool fits_window(const SendRecord& rec) const {
    return psn_cmp(psn_add(rec.first_psn, rec.npkts - 1), qp_.req.una_psn) < static_cast<int32_t>(kMaxUnackedPsns);
  }
  bool gather(const SendWqe& wqe, uint64_t offset, uint32_t len, uint8_t* dst);
  bool scatter(const SendWqe& wqe, uint64_t offset, std::span<const uint8_t> data);
  // The payload of a looped-back packet as host memory, counted as read, when it lies in one SGE
  // and one mapping; empty otherwise (gather() then copies it).
  std::span<const uint8_t> gather_in_place(const SendWqe& wqe, uint64_t offset, uint32_t len,
                                           const fabric::PacketFields& f);
  // Sends what the window allows, from tx_psn on (new packets and go-back-N alike). `hint`: a
  // record likely to hold tx_psn (the WQE just executed), which spares the search of the window.
  void pump(const SendRecord* hint = nullptr);
  // Sends all of `r`, whose first packet is at tx_psn, at once when it can go express (RC, not a
  // resend, inside the window, express_write()); false, with nothing done, otherwise.
  bool send_express(const SendRecord& r);
  // What follows sending: the express ACK taken (unless deferred), the ACK timer armed.
  void after_sending();
  // Everything up to and including psn arrived. settle false: only the window moves; completing
  // WQEs and sending more wait for the next acknowledge() (a later ACK already queued).
  void acknowledge(uint32_t psn, bool settle = true);
  [[nodiscard]] bool is_done(const SendRecord& r) const {
    const bool acked = r.npkts == 0 || psn_cmp(psn_add(r.first_psn, r.npkts), qp_.req.una_psn) <= 0;
    return acked && (!(r.wqe.is_read() || r.wqe.is_atomic()) || r.response_done);
  }
  // The oldest READ or atomic before psn whose response has not all arrived, or null.
  const SendRecord* unanswered_before(uint32_t psn);
  void complete_acked();
  void retransmit_from(uint32_t psn);
  void fail_at(uint32_t psn, hwif::CqeSyndrome syndrome);
  void arm_ack_timer();
  SendRecord* record_for_psn(uint32_t psn);
  // The record holding psn: hint, or the WQE right after hint, or else a search from the oldest.
  const SendRecord* record_near(const SendRecord* hint, uint32_t psn);
  [[nodiscard]] uint32_t mtu() const {
    return mtu_bytes(qp_.type == hwif::QpType::kUd ? dev_.config_.port.active_mtu : qp_.attr.path_mtu);
  }

  Device& dev_;
  QueuePair& qp_;
  // The PSN an express WRITE's ACK acknowledges, taken by pump() once it has sent what it could
  // (acknowledging inside its loop would send again from under it); kNoAck: none.
  static constexpr uint32_t kNoAck = 0xffffffff;
  uint32_t express_acked_ = kNoAck;
  uint32_t express_ack_packets_ = 0;  // the ACK packets it stands for (sent, not yet received)
  bool defer_express_acks_ = false;
  ExpressLink link_;
};

}  // namespace softhca::hca
