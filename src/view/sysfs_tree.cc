#include "view/sysfs_tree.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <system_error>

namespace softhca::view {

namespace fs = std::filesystem;

namespace {

// The identity of the PCI function behind each device: a virtio-range vendor, so no vendor-specific
// code path (mlx5, efa) of a stack matches it; class 0x0207 (InfiniBand controller).
constexpr const char* kPciVendor = "0x1af4";
constexpr const char* kPciDevice = "0x10ff";
constexpr const char* kPciSubsystemDevice = "0x0001";
constexpr const char* kPciClass = "0x020700";
constexpr const char* kModalias = "pci:v00001AF4d000010FFsv00001AF4sd00000001bc02sc07i00";
constexpr const char* kLinkSpeed = "8.0 GT/s PCIe";  // Gen3, as the device's default PCIe config
constexpr const char* kLinkWidth = "16";
constexpr int kUverbsMajor = 231;                    // the kernel's IB_UVERBS_MAJOR
constexpr int kUverbsBaseMinor = 192;
constexpr int kUmadBaseMinor = 0;
constexpr int kIssmBaseMinor = 64;

const char* port_state_name(int state) {
  switch (state) {
    case 1: return "DOWN";
    case 2: return "INIT";
    case 3: return "ARMED";
    case 4: return "ACTIVE";
    case 5: return "ACTIVE_DEFER";
    default: return "NOP";
  }
}

const char* phys_state_name(int state) {
  switch (state) {
    case 1: return "Sleep";
    case 2: return "Polling";
    case 3: return "Disabled";
    case 4: return "PortConfigurationTraining";
    case 5: return "LinkUp";
    case 6: return "LinkErrorRecovery";
    case 7: return "Phy Test";
    default: return "<unknown>";
  }
}

class Writer {
 public:
  explicit Writer(fs::path root) : root_(std::move(root)) {}
  void file(const fs::path& rel, const std::string& text) {
    if (!error_.empty()) return;
    const fs::path p = root_ / rel;
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
    std::ofstream out(p);
    out << text << "\n";
    if (!out) error_ = "cannot write " + p.string();
  }
  void dir(const fs::path& rel) {
    std::error_code ec;
    fs::create_directories(root_ / rel, ec);
    if (ec && error_.empty()) error_ = "cannot make " + (root_ / rel).string() + ": " + ec.message();
  }
  void link(const fs::path& rel, const std::string& target) {
    if (!error_.empty()) return;
    const fs::path p = root_ / rel;
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
    if (::symlink(target.c_str(), p.c_str()) != 0) error_ = "cannot link " + p.string();
  }
  [[nodiscard]] const std::string& error() const { return error_; }

 private:
  fs::path root_;
  std::string error_;
};

std::string hex(const char* fmt, unsigned v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string cpu_mask(long cpus) {
  if (cpus <= 0 || cpus > 32) cpus = 1;
  return hex("%08x", cpus == 32 ? 0xffffffffu : (1u << cpus) - 1u);
}

void write_port(Writer& w, const fs::path& dir, const PortFacts& p) {
  w.file(dir / "state", std::to_string(p.state) + ": " + port_state_name(p.state));
  w.file(dir / "phys_state", std::to_string(p.phys_state) + ": " + phys_state_name(p.phys_state));
  w.file(dir / "rate", rate_text(p.active_width, p.active_speed));
  w.file(dir / "cap_mask", hex("0x%08x", p.cap_flags));
  w.file(dir / "lid", hex("0x%x", p.lid));
  w.file(dir / "sm_lid", hex("0x%x", p.sm_lid));
  w.file(dir / "lid_mask_count", std::to_string(p.lmc));
  w.file(dir / "sm_sl", std::to_string(p.sm_sl));
  w.file(dir / "link_layer", p.ethernet ? "Ethernet" : "InfiniBand");
  for (size_t i = 0; i < p.gids.size(); ++i) {
    w.file(dir / "gids" / std::to_string(i), p.gids[i]);
    // Only entries that hold a GID have attributes (the kernel fails the read of the others).
    if (p.gids[i] == "0000:0000:0000:0000:0000:0000:0000:0000") continue;
    w.file(dir / "gid_attrs" / "types" / std::to_string(i), p.ethernet ? "RoCE v2" : "IB/RoCE v1");
    if (p.ethernet && !p.netdev.empty()) w.file(dir / "gid_attrs" / "ndevs" / std::to_string(i), p.netdev);
  }
  for (size_t i = 0; i < p.pkeys.size(); ++i) w.file(dir / "pkeys" / std::to_string(i), hex("0x%04x", p.pkeys[i]));
  for (const char* c : {"port_rcv_data", "port_rcv_packets", "port_xmit_data", "port_xmit_packets", "port_rcv_errors",
                        "symbol_error"})
    w.file(dir / "counters" / c, "0");
}

}  // namespace

std::string pci_address(size_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0000:ff:%02zx.0", index);
  return buf;
}

bool write_sysfs_tree(const fs::path& root, const std::vector<DeviceFacts>& devices, std::string& error) {
  Writer w(root);
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  const fs::path bus = "devices/pci0000:ff";
  w.file("class/infiniband_verbs/abi_version", "6");
  w.file("class/infiniband_mad/abi_version", "5");
  w.file(bus / "max_link_speed", kLinkSpeed);
  w.file(bus / "max_link_width", kLinkWidth);
  w.dir(bus / "pci_bus" / "0000:ff");
  w.link("class/pci_bus/0000:ff", "../../devices/pci0000:ff/pci_bus/0000:ff");
  for (size_t i = 0; i < devices.size(); ++i) {
    const DeviceFacts& d = devices[i];
    const std::string bdf = pci_address(i);
    const fs::path pci = bus / bdf;
    const std::string up_to_pci = "../../../" + bdf;  // from pci/<class>/<name>/ back to pci
    w.file(pci / "vendor", kPciVendor);
    w.file(pci / "device", kPciDevice);
    w.file(pci / "subsystem_vendor", kPciVendor);
    w.file(pci / "subsystem_device", kPciSubsystemDevice);
    w.file(pci / "class", kPciClass);
    w.file(pci / "numa_node", "-1");
    w.file(pci / "local_cpus", cpu_mask(cpus));
    w.file(pci / "local_cpulist", cpus > 1 ? "0-" + std::to_string(cpus - 1) : "0");
    w.file(pci / "current_link_speed", kLinkSpeed);
    w.file(pci / "current_link_width", kLinkWidth);
    w.file(pci / "max_link_speed", kLinkSpeed);
    w.file(pci / "max_link_width", kLinkWidth);
    w.file(pci / "modalias", kModalias);
    w.link("bus/pci/devices/" + bdf, "../../../devices/pci0000:ff/" + bdf);
    // The rdma core's device directory.
    const fs::path ib = pci / "infiniband" / d.name;
    w.file(ib / "node_type", "1: CA");
    w.file(ib / "node_guid", d.node_guid);
    w.file(ib / "sys_image_guid", d.sys_image_guid);
    w.file(ib / "node_desc", std::string(host) + " " + d.name);
    w.file(ib / "fw_ver", d.fw_ver);
    w.file(ib / "hw_rev", hex("0x%x", d.hw_ver));
    w.file(ib / "hca_type", "SOFTHCA");
    w.file(ib / "board_id", "SOFTHCA");
    w.file(ib / "uevent", "NAME=" + d.name);
    w.link(ib / "device", up_to_pci);
    w.link(ib / "subsystem", "../../../../../class/infiniband");
    w.link("class/infiniband/" + d.name, "../../devices/pci0000:ff/" + bdf + "/infiniband/" + d.name);
    for (size_t p = 0; p < d.ports.size(); ++p) write_port(w, ib / "ports" / std::to_string(p + 1), d.ports[p]);
    if (!d.ports.empty() && d.ports[0].ethernet && !d.ports[0].netdev.empty())
      w.file(pci / "net" / d.ports[0].netdev / "ifindex", std::to_string(d.ports[0].netdev_ifindex));
    // The verbs character device and the MAD ones.
    const std::string uverbs = "uverbs" + std::to_string(i);
    const fs::path uv = pci / "infiniband_verbs" / uverbs;
    const int minor = kUverbsBaseMinor + static_cast<int>(i);
    w.file(uv / "ibdev", d.name);
    w.file(uv / "abi_version", "1");
    w.file(uv / "dev", std::to_string(kUverbsMajor) + ":" + std::to_string(minor));
    w.file(uv / "uevent", "MAJOR=" + std::to_string(kUverbsMajor) + "\nMINOR=" + std::to_string(minor) +
                              "\nDEVNAME=infiniband/" + uverbs);
    w.link(uv / "device", up_to_pci);
    w.link("class/infiniband_verbs/" + uverbs, "../../devices/pci0000:ff/" + bdf + "/infiniband_verbs/" + uverbs);
    for (const auto& [kind, base] : {std::pair{"umad", kUmadBaseMinor}, std::pair{"issm", kIssmBaseMinor}}) {
      const std::string name = std::string(kind) + std::to_string(i);
      const fs::path m = pci / "infiniband_mad" / name;
      w.file(m / "ibdev", d.name);
      w.file(m / "port", "1");
      w.file(m / "dev", std::to_string(kUverbsMajor) + ":" + std::to_string(base + static_cast<int>(i)));
      w.link(m / "device", up_to_pci);
      w.link("class/infiniband_mad/" + name, "../../devices/pci0000:ff/" + bdf + "/infiniband_mad/" + name);
    }
  }
  error = w.error();
  return error.empty();
}

}  // namespace softhca::view
