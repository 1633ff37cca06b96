// Which wire a host's port is on (docs/live-mode.md, "Between hosts"; docs/environment.md):
// InfiniBand (native packets in UDP between the hosts' carriers) or Ethernet (RoCEv2 to UDP port
// 4791 of the peer's IPv4 address). Read from SOFTHCA_LINK, SOFTHCA_IP and SOFTHCA_ROCE_PORT;
// the host's address defaults to the first UP non-loopback IPv4 interface of this network
// namespace. Addresses are host-order integers (a.b.c.d = a << 24 | ...), MTUs in bytes.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "fabric/fault_spec.h"
#include "hwif/caps.h"

namespace softhca::runtime {

struct LinkOptions {
  hwif::LinkLayer layer = hwif::LinkLayer::kInfiniBand;
  uint32_t ipv4 = 0;              // Ethernet: the host's address (GID 0, the carrier's bind address)
  uint16_t roce_port = 4791;      // Ethernet: UDP port of RoCEv2 (IANA "roce", IBA Annex A17)
  uint32_t netdev_mtu = 1500;     // Ethernet: MTU of the interface holding ipv4 (sets the active MTU)
};

// SOFTHCA_LINK: unset, "" or "ib" -> InfiniBand; "roce" -> Ethernet. SOFTHCA_IP: dotted quad;
// unset -> 0, the host's default, which the runtime picks when it attaches (docs/addresses.md). SOFTHCA_ROCE_PORT: 1..65535. False with error naming the variable
// and its value on anything else.
bool link_options_from_env(LinkOptions& out, std::string& error);

// SOFTHCA_FAULTS (docs/environment.md, docs/reliability.md): what the host's links do to packets,
// as fabric::parse_fault_spec() reads it; unset or empty: nothing. False with error naming the
// variable and its value when it does not parse.
bool fault_spec_from_env(fabric::FaultSpec& out, std::string& error);

// The first IPv4 address of an interface that is UP and not loopback in this network namespace
// (getifaddrs order), else 127.0.0.1: what the first RoCE host of a fabric on this machine takes
// when SOFTHCA_IP is unset (docs/addresses.md).
uint32_t default_host_ipv4();
// The address a host takes when the machine's is another host's already: 127.F.(n >> 8).(n & 0xff),
// n the host's number (LID) in its fabric, F in 1..254 from the user and the fabric name (Linux
// routes all of 127/8 to lo: any of it can be bound with no set-up).
uint32_t loopback_host_ipv4(uid_t uid, const std::string& fabric, uint16_t host_number);

// The MTU of the interface that holds ipv4 (SIOCGIFMTU); 65536 for 127/8 on no interface (Linux
// routes all of 127/8 to lo, whose MTU is 65536); 1500 (Ethernet's) when it cannot be found.
uint32_t interface_mtu_of(uint32_t ipv4);

// "a.b.c.d"
std::string ipv4_to_string(uint32_t ipv4);

}  // namespace softhca::runtime
