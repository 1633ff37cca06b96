// Who takes the MADs that reach a device's QP1 (docs/cm.md, "QP1 on a shared device"). The host's
// processes share one device, and each runs its own connection manager on a UD QP of its own (its
// MAD agent); the table here, in the device region, says which agent a CM MAD belongs to:
// - agents: agent number -> its QPN. An agent's number is the top bits of every communication ID
//   and SIDR request ID it hands out (hwif::kMadAgentIdShift), so a reply naming one of those IDs
//   finds its agent with no per-connection state in the device;
// - services: service ID -> the agent that bound it, where REQs and SIDR_REQs for it go (the
//   host-wide port binding of rdma_cm: one agent per port of a port space).
// Plain data (the region is mapped at other addresses by other processes); under the device lock.
#pragma once
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace softhca::hca {

inline constexpr uint32_t kGsiQpn = 1;              // QP1 (IBA 3.5.5)
inline constexpr uint32_t kGsiQkey = 0x80010000u;   // the GSI's well-known Q_Key (IBA 13.5.3.1)
inline constexpr uint8_t kMgmtClassCm = 0x07;       // communication management (IBA 13.4.4)
inline constexpr uint32_t kMaxMadAgents = 1024;     // agent numbers 1..1023 (10 bits above the shift)
inline constexpr uint32_t kMaxBoundServices = 4096;
// Ports the device picks for a service ID bound with port 0: Linux's default ephemeral range.
inline constexpr uint16_t kFirstPickedPort = 32768;
inline constexpr uint16_t kLastPickedPort = 60999;

struct BoundService {
  uint64_t service_id = 0;
  uint32_t agent_qpn = 0;  // 0: a free entry
  uint32_t binds = 0;      // times the agent bound it
};

// An agent's established connection (hwif::TrackConnectionIn), kept to be ended with a DREQ when
// the agent goes.
struct TrackedConnection {
  uint32_t agent_qpn = 0;  // 0: a free entry
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t remote_qpn = 0;
  uint16_t dlid = 0;
  bool global = false;
  std::array<uint8_t, 16> dgid{};
};
inline constexpr uint32_t kMaxTrackedConnections = 16384;

struct MadState {
  std::array<uint32_t, kMaxMadAgents> agent_qpn{};  // [agent] -> QPN; 0 = free (agent 0 is never used)
  std::array<BoundService, kMaxBoundServices> services{};
  uint32_t services_used = 0;  // entries [0, services_used) may be in use
  uint16_t next_port = kFirstPickedPort;
  std::array<TrackedConnection, kMaxTrackedConnections> connections{};
  uint32_t connections_used = 0;  // entries [0, connections_used) may be in use
};
static_assert(std::is_trivially_copyable_v<MadState> && std::is_standard_layout_v<MadState>);

// A view of the table with its rules. Errors are errno values, as the commands return them.
class MadAgents {
 public:
  explicit MadAgents(MadState& s) : s_(s) {}

  // The agent number of `qpn` (a new one if it has none); 0 when every number is taken.
  uint32_t attach(uint32_t qpn);
  // Forgets `qpn`'s agent number and every service it bound (its QP is being destroyed).
  void detach(uint32_t qpn);
  [[nodiscard]] uint32_t qpn_of_agent(uint32_t agent) const {
    return agent < kMaxMadAgents ? s_.agent_qpn[agent] : 0;
  }
  [[nodiscard]] uint32_t qpn_of_id(uint32_t cm_id) const;  // by the agent bits of a CM id

  // 0, EADDRINUSE (another agent has it; with pick: no free port), ENOMEM (table full). On success
  // *service_id is the bound one (the picked port filled in).
  int bind(uint32_t qpn, uint64_t* service_id, bool pick_port);
  int unbind(uint32_t qpn, uint64_t service_id);  // 0 or EINVAL (not bound by this agent)
  [[nodiscard]] uint32_t qpn_of_service(uint64_t service_id) const;

  // 0 or ENOMEM (table full).
  int track(const TrackedConnection& c);
  void untrack(uint32_t qpn, uint32_t local_comm_id);
  // Removes and returns the connections `qpn`'s agent still has (detach() keeps them for this).
  std::vector<TrackedConnection> take_connections(uint32_t qpn);

 private:
  BoundService* find(uint64_t service_id);
  [[nodiscard]] const BoundService* find(uint64_t service_id) const;
  int add(uint32_t qpn, uint64_t service_id);

  MadState& s_;
};

}  // namespace softhca::hca
