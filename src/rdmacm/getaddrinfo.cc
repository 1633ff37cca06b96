// rdma_getaddrinfo and rdma_freeaddrinfo (rdmacm.md §3.15): names and services through the
// system's getaddrinfo into one rdma_addrinfo, as librdmacm builds it — the first result, IPv4
// before IPv6 when no family is asked for (softhca's addresses are IPv4); with neither a node nor
// a service, the result is the hints' own addresses; an AF_IB request turns an IPv6 literal into a
// sockaddr_ib (GID, P_Key 0xffff, service ID from the port space and the port).
#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/ib.h>
#include <netdb.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "rdmacm/library.h"

using namespace softhca::rdmacm;

namespace {

sockaddr* copy_addr(const sockaddr* sa, socklen_t len) {
  if (sa == nullptr || len == 0) return nullptr;
  auto* out = static_cast<sockaddr*>(std::malloc(len));
  if (out != nullptr) std::memcpy(out, sa, len);
  return out;
}

// The hints' source and destination where the result has none (rdma-core copies them too).
bool take_hint_addresses(rdma_addrinfo& r, const rdma_addrinfo* hints) {
  if (hints == nullptr) return true;
  if (r.ai_src_addr == nullptr && hints->ai_src_len > 0 && hints->ai_src_addr != nullptr) {
    r.ai_src_addr = copy_addr(hints->ai_src_addr, hints->ai_src_len);
    if (r.ai_src_addr == nullptr) return false;
    r.ai_src_len = hints->ai_src_len;
  }
  if (r.ai_dst_addr == nullptr && hints->ai_dst_len > 0 && hints->ai_dst_addr != nullptr) {
    r.ai_dst_addr = copy_addr(hints->ai_dst_addr, hints->ai_dst_len);
    if (r.ai_dst_addr == nullptr) return false;
    r.ai_dst_len = hints->ai_dst_len;
  }
  return true;
}

// An IPv6 result as the sockaddr_ib an AF_IB request asks for: the address is the GID.
sockaddr* to_ib(const addrinfo& a, int ps, socklen_t* len) {
  if (a.ai_family != AF_INET6) return nullptr;
  const auto* s6 = reinterpret_cast<const sockaddr_in6*>(a.ai_addr);
  auto* sib = static_cast<sockaddr_ib*>(std::calloc(1, sizeof(sockaddr_ib)));
  if (sib == nullptr) return nullptr;
  sib->sib_family = AF_IB;
  sib->sib_pkey = htobe16(0xffff);
  std::memcpy(&sib->sib_addr, &s6->sin6_addr, 16);
  sib->sib_sid = htobe64((static_cast<uint64_t>(static_cast<uint16_t>(ps)) << 16) + ntohs(s6->sin6_port));
  sib->sib_sid_mask = htobe64(~uint64_t{0});
  *len = sizeof(sockaddr_ib);
  return reinterpret_cast<sockaddr*>(sib);
}

}  // namespace

extern "C" {

int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints, rdma_addrinfo** res) {
  if (res == nullptr || (node == nullptr && service == nullptr && hints == nullptr)) return fail(EINVAL);
  if (Library::get() == nullptr) return -1;
  const int flags = hints ? hints->ai_flags : 0;
  const bool af_ib = hints != nullptr && hints->ai_family == AF_IB;
  const int qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : 0;
  const int ps = hints && hints->ai_port_space ? hints->ai_port_space : 0;
  auto* r = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (r == nullptr) return fail(ENOMEM);
  if (node == nullptr && service == nullptr) {
    // Nothing to look up: the hints' own addresses (libfabric asks this way for a bound source).
    r->ai_flags = flags;
    r->ai_family = hints->ai_family;
    r->ai_qp_type = qp_type ? qp_type : IBV_QPT_RC;
    r->ai_port_space = ps ? ps : RDMA_PS_TCP;
    if (!take_hint_addresses(*r, hints)) {
      rdma_freeaddrinfo(r);
      return fail(ENOMEM);
    }
    *res = r;
    return 0;
  }
  addrinfo h{};
  if (flags & RAI_PASSIVE) h.ai_flags |= AI_PASSIVE;
  if (flags & RAI_NUMERICHOST) h.ai_flags |= AI_NUMERICHOST;
  h.ai_family = af_ib ? AF_INET6 : hints ? hints->ai_family : AF_UNSPEC;
  h.ai_socktype = qp_type == IBV_QPT_UD || ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? SOCK_DGRAM : SOCK_STREAM;
  addrinfo* list = nullptr;
  if (const int rc = ::getaddrinfo(node, service, &h, &list); rc != 0) {
    std::free(r);
    return rc;
  }
  const addrinfo* pick = list;
  for (const addrinfo* a = list; a != nullptr && h.ai_family == AF_UNSPEC; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  if (pick == nullptr) {
    std::free(r);
    ::freeaddrinfo(list);
    return EAI_NONAME;
  }
  r->ai_qp_type = qp_type ? qp_type : (pick->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : IBV_QPT_RC);
  r->ai_port_space = ps ? ps : (pick->ai_socktype == SOCK_DGRAM ? RDMA_PS_UDP : RDMA_PS_TCP);
  socklen_t len = pick->ai_addrlen;
  sockaddr* sa = af_ib ? to_ib(*pick, r->ai_port_space, &len) : copy_addr(pick->ai_addr, pick->ai_addrlen);
  r->ai_family = af_ib ? AF_IB : pick->ai_family;
  ::freeaddrinfo(list);
  if (sa == nullptr) {
    std::free(r);
    if (af_ib) return EAI_FAMILY;
    return fail(ENOMEM);
  }
  if (flags & RAI_PASSIVE) {
    r->ai_flags = RAI_PASSIVE;
    r->ai_src_addr = sa;
    r->ai_src_len = len;
  } else {
    r->ai_dst_addr = sa;
    r->ai_dst_len = len;
  }
  if (!take_hint_addresses(*r, hints)) {
    rdma_freeaddrinfo(r);
    return fail(ENOMEM);
  }
  *res = r;
  return 0;
}

void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res != nullptr) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_route);
    std::free(res->ai_connect);
    std::free(res);
    res = next;
  }
}

}  // extern "C"
