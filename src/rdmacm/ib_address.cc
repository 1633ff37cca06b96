// AF_IB addresses (docs/rdma-cm.md, "Addresses"): a sockaddr_ib names a port by GID and a service by
// its 64-bit service ID, with no IP address in between — libfabric's verbs provider listens that
// way on InfiniBand. The helpers shared by binding, resolution and the passive side.
#include <endian.h>
#include <infiniband/ib.h>

#include <cstring>

#include "rdmacm/library.h"
#include "verbs/softhca_ext.h"

namespace softhca::rdmacm {

namespace {

const sockaddr_ib& ib_of(const sockaddr_storage& ss) { return reinterpret_cast<const sockaddr_ib&>(ss); }

constexpr uint64_t kPsMask = RDMA_IB_IP_PS_MASK;
constexpr uint64_t sid_base(uint16_t ps) { return uint64_t{ps} << 16; }

}  // namespace

bool is_af_ib(const sockaddr_storage& ss) { return ss.ss_family == AF_IB; }

uint64_t ib_sid_of(const sockaddr_storage& ss) {
  const sockaddr_ib& s = ib_of(ss);
  return be64toh(s.sib_sid) & be64toh(s.sib_sid_mask);
}

void set_ib_address(sockaddr_storage& ss, const ibv_gid& gid, uint64_t sid) {
  std::memset(&ss, 0, sizeof ss);
  auto& s = reinterpret_cast<sockaddr_ib&>(ss);
  s.sib_family = AF_IB;
  s.sib_pkey = htobe16(0xffff);
  std::memcpy(&s.sib_addr, gid.raw, 16);
  s.sib_sid = htobe64(sid);
  s.sib_sid_mask = htobe64(~uint64_t{0});
}

uint16_t ib_port_space(uint16_t id_ps, uint64_t sid, uint64_t mask) {
  const uint64_t named = sid & mask & kPsMask;
  const auto names = [&](uint16_t ps) { return named == (sid_base(ps) & mask & kPsMask); };
  if (id_ps == RDMA_PS_IB && names(RDMA_PS_IB)) return RDMA_PS_IB;
  if ((id_ps == RDMA_PS_IB || id_ps == RDMA_PS_TCP) && names(RDMA_PS_TCP)) return RDMA_PS_TCP;
  if ((id_ps == RDMA_PS_IB || id_ps == RDMA_PS_UDP) && names(RDMA_PS_UDP)) return RDMA_PS_UDP;
  return 0;
}

int find_gid_peer(Library& lib, Device& from, const ibv_gid& gid, Device** local, uint16_t* lid) {
  *local = nullptr;
  *lid = 0;
  for (auto& d : lib.devices) {
    if (std::memcmp(d->gid.raw, gid.raw, 16) == 0) {
      *local = d.get();
      *lid = d->ethernet ? 0 : d->port.lid;
      return 0;
    }
  }
  if (from.ethernet) {
    // RoCE: a GID is an IP address (::ffff:a.b.c.d for IPv4), reached by routing.
    return 0;
  }
  // InfiniBand: GID fe80:: + port GUID; a softhca host's GUID is its fabric's prefix with the LID in
  // the low 16 bits (docs/addresses.md), as this host's own GUID shows.
  static constexpr uint8_t kLinkLocal[8] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0};
  if (std::memcmp(gid.raw, kLinkLocal, 8) != 0) return EHOSTUNREACH;
  uint64_t guid_be = 0;
  std::memcpy(&guid_be, gid.raw + 8, 8);
  const uint64_t guid = be64toh(guid_be);
  const uint64_t own = be64toh(from.attr.node_guid);
  if ((guid & ~uint64_t{0xffff}) != (own & ~uint64_t{0xffff}) || (guid & 0xffff) == 0) return EHOSTUNREACH;
  *lid = static_cast<uint16_t>(guid & 0xffff);
  const softhca_ext_ops* ext = softhca_ext_of(from.ctx);
  return ext != nullptr && ext->fabric_has_lid(from.ctx, *lid) == 0 ? 0 : EHOSTUNREACH;
}

}  // namespace softhca::rdmacm
