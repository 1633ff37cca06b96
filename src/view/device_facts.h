// What the device view shows about each device (docs/device-view.md): the attributes the verbs API
// reports, gathered through that API in a child process of the launcher, so that the files of the
// view hold the very values ibv_query_device/port/gid/pkey give, and the launcher itself never
// attaches to the host. Leaves out counters and anything that changes while a program runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace softhca::view {

struct PortFacts {
  int state = 0;       // ibv_port_state
  int phys_state = 0;  // IBA 14.2.5.6 PortPhysicalState
  uint16_t lid = 0;
  uint16_t sm_lid = 0;
  uint8_t lmc = 0;
  uint8_t sm_sl = 0;
  uint32_t cap_flags = 0;
  uint8_t active_width = 0;  // ibv_width bits
  uint32_t active_speed = 0;  // ibv_speed values
  bool ethernet = false;
  std::vector<std::string> gids;  // "xxxx:xxxx:...:xxxx", one per table entry
  std::vector<uint16_t> pkeys;
  std::string netdev;  // Ethernet: the interface holding GID 0's address
  int netdev_ifindex = 0;
};

struct DeviceFacts {
  std::string name;       // softhca_0
  std::string node_guid;  // "xxxx:xxxx:xxxx:xxxx", as sysfs writes it
  std::string sys_image_guid;
  std::string fw_ver;
  uint32_t hw_ver = 0;
  std::vector<PortFacts> ports;  // port 1 first
};

// The devices this environment (SOFTHCA_HOST, SOFTHCA_FABRIC, SOFTHCA_LINK, SOFTHCA_IP, ...) gives a
// program, read in a forked child that exits when done. False with `error` set when the child
// fails or no device can be read.
[[nodiscard]] bool gather_device_facts(std::vector<DeviceFacts>& out, std::string& error);

// Rendering helpers shared by the tree writer and its tests.
[[nodiscard]] std::string guid_text(uint64_t guid_be);               // 0250:56ff:fe00:0002
[[nodiscard]] std::string gid_text(const uint8_t (&raw)[16]);       // fe80:0000:...:0002
[[nodiscard]] std::string rate_text(uint8_t width, uint32_t speed);  // 100 Gb/sec (4X EDR)

}  // namespace softhca::view
