// What softhca's librdmacm asks of libibverbs about addresses (softhca_ext.h, docs/addresses.md):
// this host's IPv4 address, whether a LID names a host of the fabric, and which host an InfiniBand
// host's recorded address names. The answers come from the
// same modules the runtime uses (runtime/link_config, runtime/fabric_registry), so the connection
// manager, the carrier and the device view agree.
#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/fabric_registry.h"
#include "runtime/host_segment.h"
#include "runtime/link_config.h"
#include "verbs/glue.h"

namespace softhca::verbs {

int host_ipv4(ibv_context* ctx, uint32_t* ipv4_be) {
  if (ctx == nullptr || ipv4_be == nullptr) return EINVAL;
  ibv_port_attr port{};
  if (ibv_query_port(ctx, 1, &port) != 0) return errno != 0 ? errno : EIO;
  if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
    // GID 0 is ::ffff:a.b.c.d of the host's address (docs/addresses.md).
    ibv_gid gid{};
    if (ibv_query_gid(ctx, 1, 0, &gid) != 0) return errno != 0 ? errno : EIO;
    std::memcpy(ipv4_be, &gid.raw[12], 4);
    return 0;
  }
  runtime::LinkOptions link;
  std::string error;
  if (runtime::link_options_from_env(link, error) && link.ipv4 != 0) {
    *ipv4_be = htonl(link.ipv4);
    return 0;
  }
  runtime::HostNames names;
  if (!runtime::host_names_from_env(names, error)) return EINVAL;
  // The address the host claimed in the registry (the machine's own for the fabric's first host on
  // it), else the IPoIB-style default.
  const runtime::FabricRegistry registry("/dev/shm", names.fabric);
  if (const auto h = registry.find_by_name(names.host); h && h->ipoib_be != 0) {
    *ipv4_be = h->ipoib_be;
    return 0;
  }
  *ipv4_be = htonl(runtime::loopback_host_ipv4(::geteuid(), names.fabric, port.lid));
  return 0;
}

int lid_of_ipv4(ibv_context* ctx, uint32_t ipv4_be, uint16_t* lid) {
  if (ctx == nullptr || lid == nullptr || ipv4_be == 0) return EINVAL;
  runtime::HostNames names;
  std::string error;
  if (!runtime::host_names_from_env(names, error)) return EINVAL;
  const runtime::FabricRegistry registry("/dev/shm", names.fabric);
  const auto h = registry.find_by_ipoib(ipv4_be);
  if (!h) return ENOENT;
  *lid = h->lid;
  return 0;
}

int fabric_has_lid(ibv_context* ctx, uint16_t lid) {
  if (ctx == nullptr || lid == 0) return EINVAL;
  runtime::HostNames names;
  std::string error;
  if (!runtime::host_names_from_env(names, error)) return EINVAL;
  const runtime::FabricRegistry registry("/dev/shm", names.fabric);
  return registry.find_by_lid(lid) ? 0 : ENOENT;
}

}  // namespace softhca::verbs
