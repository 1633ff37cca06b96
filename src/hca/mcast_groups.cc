#include "hca/mcast_groups.h"

#include <cerrno>

namespace softhca::hca {

int McastGroups::attach(const std::array<uint8_t, 16>& gid, uint16_t lid, uint32_t qpn) {
  McastGroup* free_group = nullptr;
  for (McastGroup& g : s_.groups) {
    if (g.attached == 0) {
      if (free_group == nullptr) free_group = &g;
      continue;
    }
    if (g.gid != gid || g.lid != lid) continue;
    for (uint16_t i = 0; i < g.attached; ++i) {
      if (g.qpns[i] == qpn) return 0;  // attached again: rdma-core's mlx5 takes it, once
    }
    if (g.attached == kMaxMcastQpAttach) return ENOMEM;
    g.qpns[g.attached++] = qpn;
    return 0;
  }
  if (free_group == nullptr) return ENOMEM;
  *free_group = McastGroup{gid, lid, 1, {}};
  free_group->qpns[0] = qpn;
  return 0;
}

int McastGroups::detach(const std::array<uint8_t, 16>& gid, uint16_t lid, uint32_t qpn) {
  for (McastGroup& g : s_.groups) {
    if (g.attached == 0 || g.gid != gid || g.lid != lid) continue;
    for (uint16_t i = 0; i < g.attached; ++i) {
      if (g.qpns[i] != qpn) continue;
      g.qpns[i] = g.qpns[--g.attached];
      if (g.attached == 0) g = McastGroup{};
      return 0;
    }
  }
  return EINVAL;
}

void McastGroups::detach_all(uint32_t qpn) {
  for (McastGroup& g : s_.groups) {
    for (uint16_t i = 0; i < g.attached;) {
      if (g.qpns[i] == qpn) {
        g.qpns[i] = g.qpns[--g.attached];
      } else {
        ++i;
      }
    }
    if (g.attached == 0) g = McastGroup{};
  }
}

const McastGroup* McastGroups::find(const std::array<uint8_t, 16>* gid, uint16_t lid) const {
  for (const McastGroup& g : s_.groups) {
    if (g.attached == 0) continue;
    if (gid != nullptr ? g.gid == *gid : g.lid == lid) return &g;
  }
  return nullptr;
}

}  // namespace softhca::hca
