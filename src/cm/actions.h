// What a sans-I/O CM call asks its caller to do: MADs to send (encoded, with where to), events for the
// user, and when to call back (the next timer deadline). Fixed capacity, no allocation: one call
// produces at most kMaxMads MADs and kMaxEvents events. Time is integer picoseconds, caller's clock.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <variant>

#include "base/status.h"
#include "base/units.h"
#include "cm/mad_codec.h"

namespace softhca::cm {

// A list of at most N values held in place.
template <class T, size_t N>
class BoundedList {
 public:
  // Appends v; a full list keeps its values and drops v (callers never need more than N).
  void push_back(const T& v) {
    if (n_ < N) items_[n_++] = v;
  }
  [[nodiscard]] size_t size() const { return n_; }
  [[nodiscard]] bool empty() const { return n_ == 0; }
  const T& operator[](size_t i) const { return items_[i]; }
  // Checked access, as std::vector::at: throws std::out_of_range past size().
  const T& at(size_t i) const {
    if (i >= n_) throw std::out_of_range("BoundedList::at");
    return items_[i];
  }
  const T* begin() const { return items_.data(); }
  const T* end() const { return items_.data() + n_; }

 private:
  std::array<T, N> items_{};
  size_t n_ = 0;
};

// Where a MAD goes. kPeer: the peer of connection `comm_id` (the caller keeps each connection's
// address: for a passive one, the address its REQ came from). kSender: back to the sender of the MAD
// being handled (a REJ or SIDR_REP for a request no connection holds).
enum class Destination : uint8_t { kPeer, kSender };

struct MadToSend {
  Destination to = Destination::kPeer;
  CommId comm_id;   // the connection whose peer gets it (kPeer); the local id if any (kSender)
  MadBytes mad{};
};

enum class EventType : uint8_t {
  kReqReceived,          // passive: a REQ for a listener made connection comm_id (payload Req)
  kRepReceived,          // active: REP arrived (payload Rep); call establish() (RTU) or reject()
  kEstablished,          // RTU sent (active) or received / implied (passive)
  kRejected,             // REJ received (payload Rej: reason, ARI, private data)
  kMraReceived,          // peer needs more time (payload Mra); the wait was extended
  kUnreachable,          // REQ or REP retries exhausted: status ETIMEDOUT (rdma_cm UNREACHABLE)
  kDisconnectRequested,  // the peer's DREQ arrived (payload Dreq); DREP sent unless deferred
  kDisconnected,         // our DREQ was answered (status 0) or its retries ran out (ETIMEDOUT)
  kTimewaitExit,         // timewait is over; the connection is idle and may be forgotten
  kSidrReqReceived,      // passive UD: a SIDR_REQ for a listener (payload SidrReq); answer it
  kSidrRepReceived,      // active UD: SIDR_REP arrived (payload SidrRep; its status says success)
};
std::string_view to_string(EventType t);

struct Event {
  EventType type = EventType::kEstablished;
  CommId comm_id;                  // the local connection (SIDR: the request id)
  int status = 0;                  // errno: 0, or ETIMEDOUT
  uint32_t attribute_modifier = 0; // of the received MAD (ECE options of REQ / REP / SIDR_REP)
  std::variant<std::monostate, Req, Rep, Rej, Mra, Dreq, SidrReq, SidrRep> payload;
};

struct Actions {
  // EINVAL when the call does not fit the state (then nothing else is set); ok otherwise. A
  // received MAD that does not fit is dropped, not an error: ok and empty.
  Status status;
  static constexpr size_t kMaxMads = 2;
  static constexpr size_t kMaxEvents = 2;
  BoundedList<MadToSend, kMaxMads> mads;
  BoundedList<Event, kMaxEvents> events;
  // When to call on_timer() next: the connection's deadline after this call (none: no timer runs).
  std::optional<Picoseconds> next_deadline;
};

}  // namespace softhca::cm
