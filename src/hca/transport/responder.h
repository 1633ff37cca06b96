// The responder side of a QP's transport: executes incoming requests into host memory.
// RC: PSN checking (duplicate / in order / ahead), RQ/SRQ consumption for SENDs with RNR NAK when
// nothing is posted, rkey/bounds/access checks for WRITE, READ and atomics with NAKs, READ responses,
// atomic ACKs, ACKs when the requester asks (AckReq); XRC TGT as RC, through the XRC SRQ each
// request names (its receive WQE, CQ and PD). UC: the same placement with no ACK/NAK,
// dropping broken messages. UD: Q_Key check, GRH placement in the first 40 bytes of the buffer.
// DMA faults: on WRITE/READ/atomic target memory a NAK remote access error; on a receive buffer
// or the receive queue itself a local protection error (RC: NAK remote operational error); the
// QP goes to error.
#pragma once
#include <optional>
#include <span>

#include "hca/device.h"
#include "hca/transport/wire.h"

namespace softhca::hca {

class Responder {
 public:
  Responder(Device& dev, QueuePair& qp) : dev_(dev), qp_(qp) {}

  void on_request(const fabric::PacketFields& f, std::span<const uint8_t> payload);

  // Whether this QP takes an RDMA WRITE (no immediate) or SEND, whose first packet has opcode
  // `first` and P_Key `pkey`, looped back from a QP of this device (express.cc): accept()'s rule.
  [[nodiscard]] bool takes_express(fabric::BthOpcode first, uint16_t pkey) const;
  // Such a WRITE of `len` bytes at `va`/`rkey` whose first packet has PSN `psn`: where its bytes
  // go — host memory in one mapping — when every check on_rc() and place_write() make would pass;
  // nullopt otherwise, with nothing changed (the packets then take the ordinary path). `key`: the
  // key the last one went through, used when it is the same, replaced by this one's otherwise.
  struct ExpressTarget {
    uint64_t host_addr = 0;  // the DMA address the bytes go to
    uint8_t* memory = nullptr;  // that memory, mapped (null for a zero-length WRITE)
  };
  [[nodiscard]] std::optional<ExpressTarget> express_target(uint32_t psn, uint64_t va, uint32_t rkey, uint64_t len,
                                                            MappedKey& key) const {
    // on_rc(): the expected PSN. place_write(): the target, through the key the last WRITE went
    // through when it is the same (its PD and access were checked then).
    if (psn != qp_.resp.epsn || !whole_message_next()) return std::nullopt;
    return write_target(va, rkey, len, key);
  }
  // express_target() but for the PSN: a run of WRITEs (Requester::execute_write_run()) checked
  // that the first one's is the expected PSN, and each one after it has the next.
  [[nodiscard]] std::optional<ExpressTarget> write_target(uint64_t va, uint32_t rkey, uint64_t len, MappedKey& key) const {
    if (uint8_t* memory = key.at(rkey, va, len); memory != nullptr && takes_write_of(len))
      return ExpressTarget{key.key().host_at(va), memory};
    return express_target_new_key(va, rkey, len, key);
  }
  // Packet `psn` of such a WRITE was placed: the state on_rc() leaves, and the ACK it asked for.
  void express_placed(uint32_t psn, bool last, bool ack_req) {
    ResponderState& st = qp_.resp;
    st.nak_sent = false;
    st.epsn = psn_add(st.epsn, 1);
    if (last) {
      st.write_active = false;
      st.msn = psn_add(st.msn, 1);
    }
    if (ack_req) send_ack(psn, ack_syndrome());
  }
  // A looped-back SEND of `len` bytes whose first packet has PSN `psn` (express.cc): where its
  // bytes go — the first SGE of the receive WQE it would consume, in one mapping — when every check
  // on_rc() and place_send() make would pass; nullopt otherwise (the packets then take the ordinary
  // path). The receive WQE may have been taken meanwhile (held in resp.recv, nothing placed), as
  // the packet path would have taken it: its doorbell record and WQE reads are counted once either
  // way. `key`: the local key the last one was placed through.
  [[nodiscard]] std::optional<ExpressTarget> express_recv_target(uint32_t psn, uint64_t len, MappedKey& key);
  // Such a SEND was placed whole: its receive WQE completes (the CQE the last packet writes).
  void express_received(const SendWqe& w, uint32_t slid, uint8_t sl);
  // `n` WRITEs of one packet each, from the expected PSN on, were placed: the state n calls of
  // express_placed(psn, true, false) leave.
  void express_run_placed(uint32_t n) {
    ResponderState& st = qp_.resp;
    st.nak_sent = false;
    st.write_active = false;
    st.epsn = psn_add(st.epsn, n);
    st.msn = psn_add(st.msn, n);
  }
  // Whether the next message may be placed whole: always on RC (PSN order is checked apart); on UC
  // only when none is half received or being dropped (on_uc() would treat it otherwise).
  [[nodiscard]] bool whole_message_next() const {
    return qp_.type != hwif::QpType::kUc || (!qp_.resp.uc_drop_message && !qp_.resp.write_active);
  }
  // QP in error: posted receive WQEs complete with flush errors (not those of an SRQ).
  void flush();

 private:
  void on_rc(const fabric::PacketFields& f, std::span<const uint8_t> payload);
  void on_uc(const fabric::PacketFields& f, std::span<const uint8_t> payload);
  void on_ud(const fabric::PacketFields& f, std::span<const uint8_t> payload);
  void on_xrc(const fabric::PacketFields& f, std::span<const uint8_t> payload);
  [[nodiscard]] uint32_t protection_pdn() const;
  void rc_duplicate(const fabric::PacketFields& f);

  // Outcome of placing one packet; kOk or the error to report.
  enum class Placed : uint8_t { kOk, kNoRecv, kAccess, kLength, kInvalid, kLocalProt };
  Placed place_send(const fabric::PacketFields& f, std::span<const uint8_t> payload);
  Placed place_write(const fabric::PacketFields& f, std::span<const uint8_t> payload);
  // A WRITE's first packet: access, length and key of its whole target; kOk with `t` set.
  Placed check_write_target(uint64_t va, uint32_t rkey, uint64_t len, Translation& t) const;
  // express_target() through another key than `key`: check_write_target(), and `key` replaced.
  std::optional<ExpressTarget> express_target_new_key(uint64_t va, uint32_t rkey, uint64_t len, MappedKey& key) const;
  // The part of it that is not the key: the QP's remote-write access and the message length.
  [[nodiscard]] bool takes_write_of(uint64_t len) const {
    return (qp_.attr.access_flags & hwif::kAccessRemoteWrite) && len <= dev_.config_.caps.max_msg_sz;
  }
  Placed execute_read(const fabric::PacketFields& f);
  Placed execute_atomic(const fabric::PacketFields& f);
  // false: nothing posted, or (ring_fault_ set) the receive queue could not be read.
  bool take_recv_wqe(RecvBuffer& rb);
  bool ring_fault() {
    ring_fault_ = true;
    return false;
  }
  bool take_rq_wqe(RecvBuffer& rb);
  // Whether a receive WQE is posted (RQ or SRQ), asking the doorbell record when the cached count
  // says none; that read is counted only when it finds one (the packet path then reads nothing).
  bool express_recv_posted();
  bool take_srq_wqe(RecvBuffer& rb, uint32_t srqn);
  void check_srq_limit(SharedReceiveQueue& srq, uint32_t srqn);  // after a WQE was taken from an armed SRQ
  bool scatter_recv(RecvBuffer& rb, std::span<const uint8_t> data);
  // imm: what the CQE carries in its immediate field (raw, network order) when it is not the
  // packet's immediate (the invalidated key of a SEND with invalidate).
  void complete_recv(const fabric::PacketFields& f, hwif::CqeOpcode op, uint32_t byte_len,
                     std::optional<uint32_t> imm = std::nullopt);
  void report_rc_error(const fabric::PacketFields& f, Placed p);

  void send_ack(uint32_t psn, uint8_t syndrome);
  void fill_reply_route(fabric::PacketFields& reply, const fabric::PacketFields& req) const;
  [[nodiscard]] uint32_t mtu() const;
  [[nodiscard]] uint32_t pdn_for_recv() const;
  // Slots of the atomic replay ring in use: max_dest_rd_atomic (at least 1).
  [[nodiscard]] uint32_t replay_slots() const;

  Device& dev_;
  QueuePair& qp_;
  bool ring_fault_ = false;
};

}  // namespace softhca::hca
