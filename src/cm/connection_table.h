// The CM of one port, sans-I/O: listeners by service ID, the connections by local comm id, SIDR
// requests by request id, and the routing of every incoming CM MAD to one of them (IBA 12.9; the
// matching of Linux cm.c). Answers on its own what needs no connection: REJ 8 for a REQ nobody
// listens for, REJ 10 (and a DREQ to the old connection) for a stale REQ, REJ 6 for a REP and DREP for
// a DREQ naming no connection, SIDR_REP status 1 for a SIDR_REQ nobody listens for. Lookups scan the
// connections (control path; a few thousand at most). Time is integer picoseconds from the caller.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "cm/actions.h"
#include "cm/connection.h"
#include "cm/sidr.h"

namespace softhca::cm {

class ConnectionTable {
 public:
  // Comm ids (and SIDR request ids) are handed out from first_comm_id upwards, skipping 0 and ids
  // in use; pick it from the caller's random stream so restarts do not reuse ids.
  explicit ConnectionTable(const ConnectionConfig& config, uint32_t first_comm_id = 1)
      : config_(config), next_id_(first_comm_id) {}
  // Ids with `prefix` in their top bits above `shift` (a MAD agent's number, hwif::kMadAgentIdShift:
  // replies find their process by it), the low bits counting up from `start`, wrapping within them.
  ConnectionTable(const ConnectionConfig& config, uint32_t prefix, uint8_t shift, uint32_t start)
      : config_(config), next_id_(start), prefix_(prefix << shift), low_mask_((uint32_t{1} << shift) - 1) {}

  // REQs and SIDR_REQs for id reach the user (EADDRINUSE if already listening).
  Status listen(ServiceId id);
  Status unlisten(ServiceId id);  // ENOENT if not listening
  [[nodiscard]] bool listening(ServiceId id) const { return listeners_.contains(id); }

  // A new idle connection (to connect() from) with a fresh local comm id.
  Connection& create();
  // A new SIDR request with a fresh request id.
  SidrRequest& create_sidr();
  Connection* find(CommId id);
  SidrRequest* find_sidr(uint32_t request_id);
  void erase(CommId id);
  // Connection::close() of connection id (ENOENT if none), then forgets it if that ended it. A
  // connection a direct call ended (reject(), close()) is otherwise forgotten at the next receive()
  // or on_timer(), or by forget_ended().
  Actions close(Picoseconds now, CommId id);
  void forget_ended();
  void erase_sidr(uint32_t request_id);
  [[nodiscard]] size_t size() const { return connections_.size(); }

  // Routes one CM MAD. sender_key: an opaque value the caller derives from where the MAD came from
  // (e.g. its source GID and QPN); only SIDR_REQ duplicates are told apart by it. A MAD that does not
  // decode gives status EBADMSG and nothing else. Connections that end are erased afterwards. The
  // Actions' next_deadline is the table's (the earliest of all its connections and SIDR requests).
  Actions receive(Picoseconds now, std::span<const uint8_t> mad, uint64_t sender_key = 0);
  Actions receive(Picoseconds now, const CmMad& mad, uint64_t sender_key = 0);

  // Answers a SIDR_REQ reported by kSidrReqReceived (request id and sender_key of it): one SIDR_REP
  // MAD to kSender. EINVAL when no such request is pending.
  Actions sidr_reply(Picoseconds now, uint32_t request_id, uint64_t sender_key, const SidrRep& rep,
                     uint32_t attribute_modifier = 0);

  // Runs every connection's and SIDR request's timer; one Actions per one that did something.
  std::vector<Actions> on_timer(Picoseconds now);
  [[nodiscard]] std::optional<Picoseconds> next_deadline() const;

 private:
  uint32_t allocate_id();
  Actions on_req(Picoseconds now, const CmMad& mad, const Req& req);
  Actions on_sidr_req(const CmMad& mad, const SidrReq& req, uint64_t sender_key);
  Actions reply_to_sender(const CmMad& answer);
  Connection* timed_out_requester(const CmMessage& m);

  struct PendingSidr {
    uint64_t tid;
    SidrReq req;
  };

  ConnectionConfig config_;
  uint32_t next_id_;
  uint32_t prefix_ = 0;
  uint32_t low_mask_ = 0xffffffff;
  std::set<ServiceId> listeners_;
  std::map<CommId, Connection> connections_;
  std::map<uint32_t, SidrRequest> sidr_requests_;
  std::map<std::pair<uint32_t, uint64_t>, PendingSidr> pending_sidr_;  // (request id, sender_key)
};

}  // namespace softhca::cm
