// One CM communication (IBA 12.9, the connection states rdma_cm uses), sans-I/O: each call takes the
// caller's time and returns Actions (MADs to send, events, the next deadline); no sockets, threads or
// clocks. Retransmission, duplicates, MRA, REJ, DREQ/DREP and timewait follow the Linux ib_cm
// (rdmacm.md 4.8), timers in its millisecond approximation (timers.h). Not modelled: LAP/APR path
// migration, the alternate path, peer-to-peer REQs, RD/EEC.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "base/status.h"
#include "base/units.h"
#include "cm/actions.h"
#include "cm/mad_codec.h"

namespace softhca::cm {

struct ConnectionConfig {
  uint64_t local_ca_guid = 0;  // written into REQ / REP
  uint32_t tid_high = 0;       // a REQ or DREQ gets TransactionID tid_high << 32 | local comm id
  // false: a DREQ is answered with DREP at once (then timewait). true: the connection waits in
  // kDreqRcvd for disconnect() to send the DREP, as the kernel CM does for rdma_disconnect().
  bool defer_drep = false;
};

// How send_mra() sends its MRA: at once, or (rdma_cm's "delayed" MRA) only when the peer's request
// arrives again, i.e. when the peer is about to give up.
enum class MraMode : uint8_t { kNow, kOnDuplicate };

class Connection {
 public:
  enum class State : uint8_t {
    kIdle,
    kReqSent,
    kReqRcvd,
    kMraReqSent,  // passive: MRA(REQ) sent
    kMraReqRcvd,  // active: MRA(REQ) received
    kRepSent,
    kRepRcvd,
    kMraRepSent,  // active: MRA(REP) sent
    kMraRepRcvd,  // passive: MRA(REP) received
    kEstablished,
    kDreqSent,
    kDreqRcvd,    // only with ConnectionConfig::defer_drep
    kTimewait,
  };

  Connection(CommId local_id, const ConnectionConfig& config) : local_id_(local_id), config_(config) {}

  // ---- active side --------------------------------------------------------------------------
  // Idle -> REQ sent. req's local comm id and CA GUID are replaced by this connection's; its
  // Max CM Retries, Remote CM Response Timeout and packet_life_time [exponent] of the path set the
  // retransmission (timers.h req_retransmit_timeout). attribute_modifier: ECE options, usually 0.
  Actions connect(Picoseconds now, const Req& req, uint8_t packet_life_time, uint32_t attribute_modifier = 0);
  // REP received / MRA(REP) sent -> established: sends RTU.
  Actions establish(Picoseconds now, std::span<const uint8_t> private_data = {});

  // ---- passive side (the REQ arrives through receive() on an idle, unused connection) --------
  // REQ received / MRA(REQ) sent -> REP sent. rep's comm ids and CA GUID are filled in here.
  Actions accept(Picoseconds now, const Rep& rep, uint32_t attribute_modifier = 0);
  // REP sent / MRA(REP) received -> established without an RTU (data arrived first: COMM_EST).
  Actions notify_established(Picoseconds now);

  // ---- either side --------------------------------------------------------------------------
  // MRA for the REQ (passive, REQ received) or the REP (active, REP received).
  Actions send_mra(Picoseconds now, uint8_t service_timeout, MraMode mode = MraMode::kNow);
  // REJ of the REQ (passive: REQ received / MRA(REQ) sent) or of the REP (active: REP received /
  // MRA(REP) sent) -> idle. Private data beyond 148 bytes and ARI beyond 72 are cut.
  Actions reject(Picoseconds now, RejReason reason, std::span<const uint8_t> private_data = {},
                 std::span<const uint8_t> ari = {});
  // Established -> DREQ sent; DREQ received (defer_drep) -> DREP sent, timewait.
  Actions disconnect(Picoseconds now, std::span<const uint8_t> private_data = {});
  // The user is going away (rdma_destroy_id; cm.c cm_destroy_id): tells the peer in the one message
  // the state calls for and sends nothing more. REQ sent / MRA(REQ) received: REJ 4 (timeout, ARI =
  // our CA GUID) -> idle; REQ or REP received, MRA sent: REJ 28 -> idle; REP sent / MRA(REP)
  // received: REJ 28 -> timewait; established: one DREQ -> timewait; DREQ sent -> timewait; DREQ
  // received: DREP -> timewait; timewait stays; idle ends. No events, except kTimewaitExit later.
  Actions close(Picoseconds now);

  // A CM MAD addressed to this connection (ConnectionTable routes them). Anything that does not
  // fit the state (wrong ids, unexpected message) is dropped: empty Actions.
  Actions receive(Picoseconds now, const CmMad& mad);
  // Retransmits, gives up, or leaves timewait when the deadline has passed; otherwise nothing.
  Actions on_timer(Picoseconds now);

  [[nodiscard]] State state() const { return state_; }
  [[nodiscard]] CommId local_id() const { return local_id_; }
  [[nodiscard]] CommId remote_id() const { return remote_id_; }
  [[nodiscard]] uint64_t remote_ca_guid() const { return remote_ca_guid_; }
  [[nodiscard]] Qpn remote_qpn() const { return remote_qpn_; }
  [[nodiscard]] Qpn local_qpn() const { return local_qpn_; }
  [[nodiscard]] ServiceId service_id() const { return service_id_; }
  [[nodiscard]] bool is_active() const { return active_; }
  [[nodiscard]] std::optional<Picoseconds> deadline() const { return deadline_; }
  // True once the connection has left idle and come back to it (rejected, unreachable, timewait
  // over): it will do nothing more and may be destroyed.
  [[nodiscard]] bool ended() const { return used_ && state_ == State::kIdle; }
  // The REQ's retransmission: sends [count] still allowed after the current one.
  [[nodiscard]] uint8_t retries_left() const { return retries_left_; }

 private:
  Actions done(Actions a, Status s = Status::ok()) const;
  Actions invalid() const;
  uint64_t own_tid() const { return (static_cast<uint64_t>(config_.tid_high) << 32) | local_id_.value(); }
  void send(Actions& a, const MadBytes& mad) const;
  MadBytes encode_msg(uint64_t tid, CmMessage m, uint32_t attr_mod = 0) const;
  void start_retransmit(Picoseconds now, const MadBytes& mad);
  void enter_timewait(Picoseconds now);
  void end();
  bool from_peer(CommId their_local, CommId their_remote) const;
  MadBytes make_mra(MraedMessage which, uint8_t service_timeout) const;

  Actions on_req(Picoseconds now, const CmMad& mad, const Req& m);
  Actions on_mra(Picoseconds now, const Mra& m);
  Actions on_rej(Picoseconds now, const CmMad& mad, const Rej& m);
  Actions on_rep(Picoseconds now, const CmMad& mad, const Rep& m);
  Actions on_rtu(const Rtu& m);
  Actions on_dreq(Picoseconds now, const CmMad& mad, const Dreq& m);
  Actions on_drep(Picoseconds now, const Drep& m);

  CommId local_id_;
  ConnectionConfig config_;
  State state_ = State::kIdle;
  bool used_ = false;
  bool active_ = false;

  CommId remote_id_;
  uint64_t remote_ca_guid_ = 0;
  Qpn remote_qpn_;
  Qpn local_qpn_;
  ServiceId service_id_;
  uint64_t req_tid_ = 0;      // TransactionID of the REQ exchange: REP, MRA, REJ, RTU reuse it
  uint64_t dreq_tid_ = 0;     // of the peer's DREQ: our DREP reuses it
  uint8_t max_cm_retries_ = 0;
  uint8_t packet_life_time_ = 0;  // exponent: MRA waits and timewait
  Picoseconds timeout_{0};        // retransmission interval of REQ / REP / DREQ

  std::optional<Picoseconds> deadline_;
  uint8_t retries_left_ = 0;
  MadBytes retransmit_mad_{};  // REQ, REP or DREQ while waiting for the answer
  MadBytes reply_mad_{};       // MRA, RTU or DREP, resent when the peer repeats itself
  bool have_reply_ = false;
  bool mra_armed_ = false;     // MraMode::kOnDuplicate: reply_mad_ is the MRA still to send
};

std::string_view to_string(Connection::State s);

}  // namespace softhca::cm
