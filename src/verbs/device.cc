// Devices and contexts: ibv_get_device_list over the runtime's devices, ibv_open_device and
// ibv_close_device over driver::open_context, and the device-level helpers (name, GUID, index,
// sysfs, fork). The ibv_device objects are built once and live until the process exits, because
// programs keep device pointers after ibv_free_device_list (pyverbs does; verbs-abi.md §2.3).
#include <endian.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <new>
#include <string>

#include "driver/provider.h"
#include "runtime/runtime.h"
#include "verbs/glue.h"

namespace softhca::verbs {

namespace {
int track_connection(ibv_qp* agent, uint32_t local_comm_id, uint32_t remote_comm_id, uint32_t remote_qpn,
                     uint16_t dlid, bool global, const uint8_t* dgid16) {
  hwif::TrackConnectionIn c;
  c.local_comm_id = local_comm_id;
  c.remote_comm_id = remote_comm_id;
  c.remote_qpn = remote_qpn;
  c.dlid = dlid;
  c.global = global;
  if (dgid16 != nullptr) std::memcpy(c.dgid.raw.data(), dgid16, 16);
  return driver::track_connection(agent, c);
}
}  // namespace

const softhca_ext_ops kExtOps = {softhca_ext_ops::kMagic,  softhca_ext_ops::kVersion, &driver::set_mad_agent,
                                 &driver::bind_service,    &driver::unbind_service,   &host_ipv4,
                                 &fabric_has_lid,          &track_connection,         &driver::untrack_connection,
                                 &lid_of_ipv4};

namespace {

// One device as applications see it: the handle is &entry.device. Entries never move (std::deque
// keeps them in place) and are never freed.
struct DeviceEntry {
  ibv_device device{};
  runtime::DeviceSlot* slot = nullptr;
  int index = 0;
};

struct DeviceTable {
  std::deque<DeviceEntry> entries;
  int error = 0;  // errno when the runtime could not start: the list is then unavailable
};

// Where the devices would sit in a kernel's sysfs. Nothing reads these paths except through
// ibv_read_sysfs_file below, which answers for them itself.
constexpr const char* kIbdevDir = "/sys/class/infiniband";
constexpr const char* kUverbsDir = "/sys/class/infiniband_verbs";

void fill_device(DeviceEntry& entry) {
  ibv_device& dev = entry.device;
  dev.node_type = IBV_NODE_CA;
  dev.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(dev.name, sizeof(dev.name), "%s", entry.slot->name().c_str());
  std::snprintf(dev.dev_name, sizeof(dev.dev_name), "uverbs%d", entry.index);
  std::snprintf(dev.dev_path, sizeof(dev.dev_path), "%s/uverbs%d", kUverbsDir, entry.index);
  std::snprintf(dev.ibdev_path, sizeof(dev.ibdev_path), "%s/%s", kIbdevDir, dev.name);
}

// Built on first use; the runtime lives until exit, and so does the table (never deleted).
const DeviceTable& device_table() {
  static const DeviceTable* const table = [] {
    auto* t = new DeviceTable();
    try {
      int index = 0;
      for (runtime::DeviceSlot* slot : runtime::Runtime::process().devices()) {
        DeviceEntry& entry = t->entries.emplace_back();
        entry.slot = slot;
        entry.index = index++;
        fill_device(entry);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "softhca: cannot start the runtime: %s\n", e.what());
      t->entries.clear();
      t->error = ENODEV;
    } catch (...) {
      t->entries.clear();
      t->error = ENODEV;
    }
    return t;
  }();
  return *table;
}

const DeviceEntry* entry_of(const ibv_device* device) {
  if (device == nullptr) return nullptr;
  for (const DeviceEntry& entry : device_table().entries) {
    if (&entry.device == device) return &entry;
  }
  return nullptr;
}

driver::BlueFlameMode blueflame_mode(uint8_t runtime_mode) {
  switch (runtime_mode) {
    case 1:
      return driver::BlueFlameMode::kOff;
    case 2:
      return driver::BlueFlameMode::kPrefer;
    default:
      return driver::BlueFlameMode::kAuto;
  }
}

// The context's command descriptor: it must be a real fd (pyverbs dup()s it for
// ibv_import_device); nothing is ever written to it. async_fd is the driver's: the vector of the
// context's async EQ (driver::open_context).
bool open_cmd_fd(int& cmd_fd) {
  cmd_fd = eventfd(0, EFD_CLOEXEC);
  return cmd_fd >= 0;
}

// Virtual sysfs attributes of our devices (ibv_devinfo prints board_id when it can read it).
// Returns the attribute's text, or an empty string if the file is not one we serve.
std::string virtual_sysfs_attribute(const char* dir, const char* file) {
  for (const DeviceEntry& entry : device_table().entries) {
    if (std::strcmp(dir, entry.device.ibdev_path) != 0) continue;
    if (std::strcmp(file, "board_id") == 0) return "SOFTHCA";
    if (std::strcmp(file, "node_type") == 0) return "1: CA";
    if (std::strcmp(file, "node_guid") == 0) {
      const uint64_t guid = be64toh(entry.slot->node_guid_be());
      char text[24];
      std::snprintf(text, sizeof(text), "%04x:%04x:%04x:%04x", unsigned(guid >> 48) & 0xffff,
                    unsigned(guid >> 32) & 0xffff, unsigned(guid >> 16) & 0xffff,
                    unsigned(guid) & 0xffff);
      return text;
    }
  }
  return {};
}

// Copies text into buf as ibv_read_sysfs_file returns it: NUL-terminated, truncated to fit.
int copy_attribute(const std::string& text, char* buf, size_t size) {
  if (size == 0) {
    errno = EINVAL;
    return -1;
  }
  const size_t len = text.size() < size - 1 ? text.size() : size - 1;
  std::memcpy(buf, text.data(), len);
  buf[len] = '\0';
  return static_cast<int>(len);
}

}  // namespace

// The device's slot now: in a fork child the runtime attaches the child anew on this look, so a
// context the child opens is its own (the slot the table was built with is the parent's).
runtime::DeviceSlot* slot_of(const ibv_device* device) {
  const DeviceEntry* entry = entry_of(device);
  if (entry == nullptr) return nullptr;
  const std::span<runtime::DeviceSlot* const> now = runtime::Runtime::process().devices();
  return static_cast<size_t>(entry->index) < now.size() ? now[static_cast<size_t>(entry->index)] : entry->slot;
}

}  // namespace softhca::verbs

using namespace softhca;

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
  if (num_devices != nullptr) *num_devices = 0;
  const verbs::DeviceTable& table = verbs::device_table();
  if (table.error != 0) {
    errno = table.error;
    return nullptr;
  }
  const size_t n = table.entries.size();
  auto** list = static_cast<ibv_device**>(std::calloc(n + 1, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  size_t i = 0;
  for (const verbs::DeviceEntry& entry : table.entries) {
    list[i++] = const_cast<ibv_device*>(&entry.device);  // handles are mutable in the C API
  }
  if (num_devices != nullptr) *num_devices = static_cast<int>(n);
  return list;
}

void ibv_free_device_list(ibv_device** list) {
  std::free(list);  // the devices themselves stay: see the file comment
}

const char* ibv_get_device_name(ibv_device* device) {
  if (device == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return device->name;
}

__be64 ibv_get_device_guid(ibv_device* device) {
  runtime::DeviceSlot* slot = verbs::slot_of(device);
  if (slot == nullptr) {
    errno = EINVAL;
    return 0;
  }
  return slot->node_guid_be();
}

int ibv_get_device_index(ibv_device* device) {
  const verbs::DeviceEntry* entry = verbs::entry_of(device);
  return entry != nullptr ? entry->index : -1;
}

ibv_context* ibv_open_device(ibv_device* device) {
  runtime::DeviceSlot* slot = verbs::slot_of(device);
  if (slot == nullptr) {
    errno = ENODEV;
    return nullptr;
  }
  auto* priv = new (std::nothrow) verbs_ex_private{&verbs::kExtOps, slot, 0};
  if (priv == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  int cmd_fd = -1;
  if (!verbs::open_cmd_fd(cmd_fd)) {
    delete priv;
    return nullptr;
  }
  verbs_context* vctx = nullptr;
  bool uar_acquired = false;
  errno = 0;
  try {
    priv->uar_index = slot->acquire_uar();
    uar_acquired = true;
    const driver::DeviceLink link{&slot->host_port(), &slot->commands(), priv->uar_index,
                                  verbs::blueflame_mode(slot->blueflame_mode()), &slot->kernel()};
    vctx = driver::open_context(device, link, cmd_fd);
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
  } catch (...) {
    errno = EIO;
  }
  if (vctx == nullptr) {
    // The driver did not take the descriptors: undo everything, keeping its errno.
    const int err = errno != 0 ? errno : ENOMEM;
    if (uar_acquired) slot->release_uar(priv->uar_index);
    close(cmd_fd);
    delete priv;
    errno = err;
    return nullptr;
  }
  // The ABI header of the context (verbs-abi.md §2.2); the driver sets the same values.
  vctx->sz = sizeof(verbs_context);
  vctx->context.abi_compat = __VERBS_ABI_IS_EXTENDED;
  vctx->context.device = device;
  vctx->context.cmd_fd = cmd_fd;
  vctx->priv = priv;
  verbs::install_context_ops(vctx);
  return &vctx->context;
}

int ibv_close_device(ibv_context* context) {
  verbs_context* vctx = verbs::extended(context);
  if (vctx == nullptr) return EINVAL;
  verbs_ex_private* priv = vctx->priv;  // read before the driver frees the context
  const int ret = driver::close_context(context);
  if (ret != 0) return ret;
  if (priv != nullptr) {
    priv->slot->release_uar(priv->uar_index);
    delete priv;
  }
  return 0;
}

// As libibverbs: $SYSFS_PATH when it is set and the program is not set-user-ID (its first
// IBV_SYSFS_PATH_MAX bytes, trailing slashes dropped), else /sys; looked up once.
const char* ibv_get_sysfs_path(void) {
  static const std::string path = [] {
    constexpr size_t kSysfsPathMax = 256;  // IBV_SYSFS_PATH_MAX
    const char* env = getuid() == geteuid() ? getenv("SYSFS_PATH") : nullptr;
    if (env == nullptr) return std::string("/sys");
    std::string p(env, strnlen(env, kSysfsPathMax));
    while (!p.empty() && p.back() == '/') p.pop_back();
    return p;
  }();
  return path.c_str();
}

int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  if (dir == nullptr || file == nullptr || buf == nullptr) {
    errno = EINVAL;
    return -1;
  }
  const std::string served = verbs::virtual_sysfs_attribute(dir, file);
  if (!served.empty()) return verbs::copy_attribute(served, buf, size);

  const std::string path = std::string(dir) + "/" + file;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  std::string text(size, '\0');
  const ssize_t len = read(fd, text.data(), size);
  const int err = errno;
  close(fd);
  if (len < 0) {
    errno = err;
    return -1;
  }
  text.resize(static_cast<size_t>(len));
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return verbs::copy_attribute(text, buf, size);
}

// Fork: rdma-core needs ibv_fork_init where the kernel lacks copy-on-fork for pinned pages, since
// the HCA would keep writing to pages the parent no longer owns. How softhca's registered memory
// stays safe across fork is the driver's business (it decides how that memory is made reachable);
// applications never have to ask, so fork support is reported "unneeded", the answer pyverbs'
// test_fork accepts whether or not ibv_fork_init succeeded (verbs-abi.md §5.3).
int ibv_fork_init(void) { return 0; }

ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

int ibv_dontfork_range(void* /*base*/, size_t /*size*/) { return 0; }

int ibv_dofork_range(void* /*base*/, size_t /*size*/) { return 0; }

}  // extern "C"
