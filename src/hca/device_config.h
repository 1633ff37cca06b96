// What a device is: its identity, limits and port, chosen when it is created. Defaults describe a
// ConnectX-class EDR HCA as perftest and pyverbs expect to see it (docs/device.md gives each value
// and its reason).
#pragma once
#include <cstdint>

#include "hwif/caps.h"
#include "pcie/pcie_config.h"

namespace softhca::hca {

struct DeviceConfig {
  hwif::DeviceCaps caps;
  hwif::PortCaps port;
  pcie::PcieConfig pcie;
  // Ethernet ports only (port.link_layer kEthernet, see use_ethernet_link): the host's IPv4
  // address (host order; GID 0 is its IPv4-mapped form) and the UDP destination port of RoCEv2.
  uint32_t ipv4 = 0;
  uint16_t roce_udp_port = 4791;  // IANA "roce", IBA Annex A17 (fabric::kRoceV2UdpPort)
  // The randomness of a freshly formatted device: the variants and indexes of its memory keys and
  // its first QPN. The same seed gives the same keys and QPNs (sim mode, tests); live runtimes
  // pass one from getrandom(2). Unused when attaching to a device already formatted.
  uint64_t seed = 0;
};

// The default configuration of device number `index` on a fabric: LID index+1, GUID derived from
// the fabric id and index, so two devices never share either.
DeviceConfig default_device_config(uint32_t index, uint32_t fabric_id = 0);

// The active MTU of a RoCE port over a network interface whose MTU is netdev_mtu_bytes: the largest
// IB MTU that leaves room for the largest headers (GRH/IPv4 room 40, UDP 8, BTH 12, XRCETH 4,
// AtomicETH 28, ICRC 4: 96 bytes), as Linux iboe_get_mtu() (include/rdma/ib_addr.h) computes it:
// 1500 -> 1024, 9000 or loopback's 65536 -> 4096. Below 256 + 96: 256.
hwif::Mtu roce_active_mtu(uint32_t netdev_mtu_bytes);

// Makes the port an Ethernet (RoCEv2) port of a host at ipv4 (host order): link layer Ethernet,
// LID 0 and no SM (Ethernet has no subnet manager), GID 0 = ::ffff:ipv4 (RFC 4291 2.5.5.2, the GID
// Linux gives a RoCEv2 port for an IPv4 address), the rest of the GID table empty, the active MTU
// from the interface's MTU (roce_active_mtu), speed reported as 100 Gb/s Ethernet (4x EDR).
void use_ethernet_link(DeviceConfig& config, uint32_t ipv4, uint32_t netdev_mtu_bytes, uint16_t roce_udp_port);

}  // namespace softhca::hca
