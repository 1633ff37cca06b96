#include "runtime/link_config.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace softhca::runtime {

namespace {
constexpr uint32_t kLoopbackNet = 0x7f000000;   // 127.0.0.0/8 (RFC 1122 3.2.1.3)
constexpr uint32_t kLoopbackMask = 0xff000000;
constexpr uint32_t kLoopbackMtu = 65536;        // Linux lo's default MTU (drivers/net/loopback.c)
constexpr uint32_t kEthernetMtu = 1500;         // IEEE 802.3 payload

bool is_loopback(uint32_t ipv4) { return (ipv4 & kLoopbackMask) == kLoopbackNet; }

uint32_t ipv4_of(const sockaddr* a) {
  return ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr);
}

// The MTU of the interface named name, or 0.
uint32_t mtu_of_interface(const char* name) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  ifreq req{};
  std::strncpy(req.ifr_name, name, IFNAMSIZ - 1);
  const int rc = ::ioctl(fd, SIOCGIFMTU, &req);
  ::close(fd);
  return rc == 0 && req.ifr_mtu > 0 ? static_cast<uint32_t>(req.ifr_mtu) : 0;
}
}  // namespace

std::string ipv4_to_string(uint32_t ipv4) {
  in_addr a{htonl(ipv4)};
  char buf[INET_ADDRSTRLEN] = {};
  return ::inet_ntop(AF_INET, &a, buf, sizeof buf) != nullptr ? buf : "?";
}

uint32_t default_host_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return INADDR_LOOPBACK;
  uint32_t found = INADDR_LOOPBACK;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    const uint32_t ip = ipv4_of(i->ifa_addr);
    if (is_loopback(ip)) continue;
    found = ip;
    break;
  }
  ::freeifaddrs(list);
  return found;
}

uint32_t interface_mtu_of(uint32_t ipv4) {
  ifaddrs* list = nullptr;
  uint32_t mtu = 0;
  if (::getifaddrs(&list) == 0) {
    for (const ifaddrs* i = list; i != nullptr && mtu == 0; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || ipv4_of(i->ifa_addr) != ipv4) continue;
      mtu = mtu_of_interface(i->ifa_name);
    }
    ::freeifaddrs(list);
  }
  if (mtu != 0) return mtu;
  return is_loopback(ipv4) ? kLoopbackMtu : kEthernetMtu;
}

bool link_options_from_env(LinkOptions& out, std::string& error) {
  out = LinkOptions{};
  const char* link = std::getenv("SOFTHCA_LINK");
  const std::string l = link != nullptr ? link : "";
  if (!l.empty() && l != "ib" && l != "roce") {
    error = "SOFTHCA_LINK=" + l + ": expected ib or roce";
    return false;
  }
  // The host's address on either link (docs/addresses.md): on InfiniBand the one rdma_cm resolves.
  if (const char* ip = std::getenv("SOFTHCA_IP"); ip != nullptr && *ip != '\0') {
    in_addr a{};
    if (::inet_pton(AF_INET, ip, &a) != 1 || a.s_addr == 0) {
      error = std::string("SOFTHCA_IP=") + ip + ": expected an IPv4 address a.b.c.d";
      return false;
    }
    out.ipv4 = ntohl(a.s_addr);
  }
  if (l != "roce") return true;
  out.layer = hwif::LinkLayer::kEthernet;
  if (const char* port = std::getenv("SOFTHCA_ROCE_PORT"); port != nullptr && *port != '\0') {
    char* end = nullptr;
    const unsigned long p = std::strtoul(port, &end, 10);
    if (end == port || *end != '\0' || p == 0 || p > 65535) {
      error = std::string("SOFTHCA_ROCE_PORT=") + port + ": expected a UDP port 1..65535";
      return false;
    }
    out.roce_port = static_cast<uint16_t>(p);
  }
  if (out.ipv4 != 0) out.netdev_mtu = interface_mtu_of(out.ipv4);
  return true;
}

uint32_t loopback_host_ipv4(uid_t uid, const std::string& fabric, uint16_t host_number) {
  // FNV-1a over the uid and the name: a spread, not a secret.
  uint32_t h = 2166136261u;
  auto mix = [&h](uint8_t b) { h = (h ^ b) * 16777619u; };
  for (int i = 0; i < 4; ++i) mix(static_cast<uint8_t>(uid >> (8 * i)));
  for (const char c : fabric) mix(static_cast<uint8_t>(c));
  const uint32_t f = 1 + h % 254;
  return (127u << 24) | (f << 16) | (uint32_t{host_number} & 0xffff);
}

bool fault_spec_from_env(fabric::FaultSpec& out, std::string& error) {
  out = fabric::FaultSpec{};
  const char* v = std::getenv("SOFTHCA_FAULTS");
  if (v == nullptr || *v == '\0') return true;
  std::string why;
  if (fabric::parse_fault_spec(v, out, why)) return true;
  error = std::string("SOFTHCA_FAULTS=") + v + ": " + why;
  return false;
}

}  // namespace softhca::runtime
