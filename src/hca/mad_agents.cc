#include "hca/mad_agents.h"

#include <cerrno>

#include "hwif/cmd.h"

namespace softhca::hca {

uint32_t MadAgents::attach(uint32_t qpn) {
  uint32_t free_agent = 0;
  for (uint32_t a = 1; a < kMaxMadAgents; ++a) {
    if (s_.agent_qpn[a] == qpn) return a;
    if (free_agent == 0 && s_.agent_qpn[a] == 0) free_agent = a;
  }
  if (free_agent != 0) s_.agent_qpn[free_agent] = qpn;
  return free_agent;
}

void MadAgents::detach(uint32_t qpn) {
  for (uint32_t a = 1; a < kMaxMadAgents; ++a) {
    if (s_.agent_qpn[a] == qpn) s_.agent_qpn[a] = 0;
  }
  for (uint32_t i = 0; i < s_.services_used; ++i) {
    if (s_.services[i].agent_qpn == qpn) s_.services[i] = BoundService{};
  }
  while (s_.services_used > 0 && s_.services[s_.services_used - 1].agent_qpn == 0) --s_.services_used;
}

uint32_t MadAgents::qpn_of_id(uint32_t cm_id) const { return qpn_of_agent(cm_id >> hwif::kMadAgentIdShift); }

BoundService* MadAgents::find(uint64_t service_id) {
  for (uint32_t i = 0; i < s_.services_used; ++i) {
    if (s_.services[i].agent_qpn != 0 && s_.services[i].service_id == service_id) return &s_.services[i];
  }
  return nullptr;
}

const BoundService* MadAgents::find(uint64_t service_id) const {
  return const_cast<MadAgents*>(this)->find(service_id);
}

uint32_t MadAgents::qpn_of_service(uint64_t service_id) const {
  const BoundService* b = find(service_id);
  return b ? b->agent_qpn : 0;
}

int MadAgents::add(uint32_t qpn, uint64_t service_id) {
  for (uint32_t i = 0; i < kMaxBoundServices; ++i) {
    BoundService& b = s_.services[i];
    if (b.agent_qpn != 0) continue;
    b = BoundService{service_id, qpn, 1};
    if (i >= s_.services_used) s_.services_used = i + 1;
    return 0;
  }
  return ENOMEM;
}

int MadAgents::bind(uint32_t qpn, uint64_t* service_id, bool pick_port) {
  if (!pick_port) {
    if (BoundService* b = find(*service_id)) {
      if (b->agent_qpn != qpn) return EADDRINUSE;
      ++b->binds;
      return 0;
    }
    return add(qpn, *service_id);
  }
  // The next free port of the range after the last one picked, as Linux walks its ephemeral ports.
  const uint64_t space = *service_id & ~uint64_t{0xffff};
  constexpr uint32_t kRange = kLastPickedPort - kFirstPickedPort + 1;
  for (uint32_t n = 0; n < kRange; ++n) {
    const uint16_t port = s_.next_port;
    s_.next_port = port == kLastPickedPort ? kFirstPickedPort : static_cast<uint16_t>(port + 1);
    if (find(space | port) != nullptr) continue;
    *service_id = space | port;
    return add(qpn, *service_id);
  }
  return EADDRINUSE;
}

int MadAgents::unbind(uint32_t qpn, uint64_t service_id) {
  BoundService* b = find(service_id);
  if (b == nullptr || b->agent_qpn != qpn) return EINVAL;
  if (--b->binds == 0) {
    *b = BoundService{};
    while (s_.services_used > 0 && s_.services[s_.services_used - 1].agent_qpn == 0) --s_.services_used;
  }
  return 0;
}

int MadAgents::track(const TrackedConnection& c) {
  untrack(c.agent_qpn, c.local_comm_id);  // tracked again: the newer peer wins
  for (uint32_t i = 0; i < kMaxTrackedConnections; ++i) {
    if (s_.connections[i].agent_qpn != 0) continue;
    s_.connections[i] = c;
    if (i >= s_.connections_used) s_.connections_used = i + 1;
    return 0;
  }
  return ENOMEM;
}

void MadAgents::untrack(uint32_t qpn, uint32_t local_comm_id) {
  for (uint32_t i = 0; i < s_.connections_used; ++i) {
    TrackedConnection& c = s_.connections[i];
    if (c.agent_qpn == qpn && c.local_comm_id == local_comm_id) c = TrackedConnection{};
  }
  while (s_.connections_used > 0 && s_.connections[s_.connections_used - 1].agent_qpn == 0) --s_.connections_used;
}

std::vector<TrackedConnection> MadAgents::take_connections(uint32_t qpn) {
  std::vector<TrackedConnection> out;
  for (uint32_t i = 0; i < s_.connections_used; ++i) {
    TrackedConnection& c = s_.connections[i];
    if (c.agent_qpn != qpn) continue;
    out.push_back(c);
    c = TrackedConnection{};
  }
  while (s_.connections_used > 0 && s_.connections[s_.connections_used - 1].agent_qpn == 0) --s_.connections_used;
  return out;
}

}  // namespace softhca::hca
