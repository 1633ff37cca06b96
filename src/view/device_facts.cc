#include "view/device_facts.h"

#include <arpa/inet.h>
#include <endian.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

namespace softhca::view {

namespace {

constexpr int kChildWaitMs = 30'000;

std::string hex16(const uint8_t* p, int groups) {
  std::string s;
  char buf[8];
  for (int i = 0; i < groups; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x%02x", p[2 * i], p[2 * i + 1]);
    if (i != 0) s += ':';
    s += buf;
  }
  return s;
}

// The interface holding an IPv4-mapped GID's address: lo for 127/8 (Linux routes all of it to lo).
void find_netdev(const uint8_t (&gid)[16], PortFacts& port) {
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(gid, kMapped, sizeof(kMapped)) != 0) return;
  in_addr_t addr = 0;
  std::memcpy(&addr, gid + 12, 4);
  if (gid[12] == 127) port.netdev = "lo";
  ifaddrs* list = nullptr;
  if (port.netdev.empty() && ::getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
      if (reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr == addr) {
        port.netdev = a->ifa_name;
        break;
      }
    }
    ::freeifaddrs(list);
  }
  if (!port.netdev.empty()) port.netdev_ifindex = static_cast<int>(::if_nametoindex(port.netdev.c_str()));
}

nlohmann::json read_devices() {
  nlohmann::json out = nlohmann::json::array();
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return out;
  for (int i = 0; i < n; ++i) {
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) continue;
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) != 0) {
      ibv_close_device(ctx);
      continue;
    }
    nlohmann::json dev = {{"name", ibv_get_device_name(list[i])},
                          {"node_guid", guid_text(attr.node_guid)},
                          {"sys_image_guid", guid_text(attr.sys_image_guid)},
                          {"fw_ver", attr.fw_ver},
                          {"hw_ver", attr.hw_ver},
                          {"ports", nlohmann::json::array()}};
    for (uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
      ibv_port_attr pa{};
      if (ibv_query_port(ctx, p, &pa) != 0) continue;
      PortFacts port;
      nlohmann::json gids = nlohmann::json::array();
      for (int g = 0; g < pa.gid_tbl_len; ++g) {
        ibv_gid gid{};
        if (ibv_query_gid(ctx, p, g, &gid) != 0) break;
        gids.push_back(gid_text(gid.raw));
        if (g == 0 && pa.link_layer == IBV_LINK_LAYER_ETHERNET) find_netdev(gid.raw, port);
      }
      nlohmann::json pkeys = nlohmann::json::array();
      for (int k = 0; k < pa.pkey_tbl_len; ++k) {
        uint16_t pkey = 0;
        if (ibv_query_pkey(ctx, p, k, &pkey) != 0) break;
        pkeys.push_back(be16toh(pkey));
      }
      dev["ports"].push_back({{"state", pa.state},
                              {"phys_state", pa.phys_state},
                              {"lid", pa.lid},
                              {"sm_lid", pa.sm_lid},
                              {"lmc", pa.lmc},
                              {"sm_sl", pa.sm_sl},
                              {"cap_flags", pa.port_cap_flags},
                              {"width", pa.active_width},
                              {"speed", pa.active_speed},
                              {"ethernet", pa.link_layer == IBV_LINK_LAYER_ETHERNET},
                              {"gids", gids},
                              {"pkeys", pkeys},
                              {"netdev", port.netdev},
                              {"ifindex", port.netdev_ifindex}});
    }
    ibv_close_device(ctx);
    out.push_back(dev);
  }
  ibv_free_device_list(list);
  return out;
}

bool read_all(int fd, std::string& text) {
  char buf[4096];
  for (;;) {
    pollfd pf{fd, POLLIN, 0};
    if (::poll(&pf, 1, kChildWaitMs) != 1) return false;
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) return false;
    if (n == 0) return true;
    text.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

std::string guid_text(uint64_t guid_be) {
  uint8_t b[8];
  std::memcpy(b, &guid_be, sizeof(b));  // network order, as ibv_device_attr holds it
  return hex16(b, 4);
}

std::string gid_text(const uint8_t (&raw)[16]) { return hex16(raw, 8); }

std::string rate_text(uint8_t width, uint32_t speed) {
  // Lanes per ibv_width bit and Gb/s per lane for each ibv_speed (IBA 14.2.5.6, rdma-core's
  // ibv_rate names; the kernel's sysfs spells them the same way).
  int lanes = 0;
  switch (width) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: break;
  }
  double per_lane = 0;
  const char* name = "";
  switch (speed) {
    case 1: per_lane = 2.5, name = " SDR"; break;
    case 2: per_lane = 5, name = " DDR"; break;
    case 4: per_lane = 10, name = " QDR"; break;
    case 8: per_lane = 10, name = " FDR10"; break;
    case 16: per_lane = 14, name = " FDR"; break;
    case 32: per_lane = 25, name = " EDR"; break;
    case 64: per_lane = 50, name = " HDR"; break;
    case 128: per_lane = 100, name = " NDR"; break;
    default: break;
  }
  char buf[64];
  const double total = per_lane * lanes;
  if (total == static_cast<int>(total)) {
    std::snprintf(buf, sizeof(buf), "%d Gb/sec (%dX%s)", static_cast<int>(total), lanes, name);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f Gb/sec (%dX%s)", total, lanes, name);
  }
  return buf;
}

bool gather_device_facts(std::vector<DeviceFacts>& out, std::string& error) {
  int fds[2];
  if (::pipe(fds) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) {
    error = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  if (child == 0) {
    ::close(fds[0]);
    // Only the program's own run captures, traces, dumps counters and injects faults.
    for (const char* var : {"SOFTHCA_PCAP", "SOFTHCA_TRACE", "SOFTHCA_STATS", "SOFTHCA_FAULTS"}) ::unsetenv(var);
    const std::string text = read_devices().dump();
    const bool ok = ::write(fds[1], text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fds[1]);
    std::exit(ok ? 0 : 1);  // exit, not _exit: the runtime detaches from the host at exit
  }
  ::close(fds[1]);
  std::string text;
  const bool read = read_all(fds[0], text);
  ::close(fds[0]);
  int status = 0;
  if (!read) ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);
  if (!read || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    error = "the device could not be read (see the messages above)";
    return false;
  }
  const nlohmann::json devices = nlohmann::json::parse(text, nullptr, false);
  if (!devices.is_array() || devices.empty()) {
    error = "no device";
    return false;
  }
  for (const nlohmann::json& d : devices) {
    DeviceFacts dev;
    dev.name = d.at("name");
    dev.node_guid = d.at("node_guid");
    dev.sys_image_guid = d.at("sys_image_guid");
    dev.fw_ver = d.at("fw_ver");
    dev.hw_ver = d.at("hw_ver");
    for (const nlohmann::json& p : d.at("ports")) {
      PortFacts port;
      port.state = p.at("state");
      port.phys_state = p.at("phys_state");
      port.lid = p.at("lid");
      port.sm_lid = p.at("sm_lid");
      port.lmc = p.at("lmc");
      port.sm_sl = p.at("sm_sl");
      port.cap_flags = p.at("cap_flags");
      port.active_width = p.at("width");
      port.active_speed = p.at("speed");
      port.ethernet = p.at("ethernet");
      port.gids = p.at("gids").get<std::vector<std::string>>();
      port.pkeys = p.at("pkeys").get<std::vector<uint16_t>>();
      port.netdev = p.at("netdev");
      port.netdev_ifindex = p.at("ifindex");
      dev.ports.push_back(std::move(port));
    }
    out.push_back(std::move(dev));
  }
  return true;
}

}  // namespace softhca::view
