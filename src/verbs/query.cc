// Queries: device, port, GID and P_Key tables, over the driver's query calls. The GID helpers
// follow rdma-core 44: _ibv_query_gid_ex / _ibv_query_gid_table take the caller's entry size (32
// from the inline wrappers), an all-zero GID is an empty slot (ENODATA), and on an InfiniBand
// port every GID has type IB (sysfs: "IB/RoCE v1"). Return conventions differ per verb and are
// those of the real library: noted at each function.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "driver/provider.h"
#include "verbs/glue.h"

// verbs.h turns ibv_query_port into a macro over an inline wrapper; the exported function is the
// fallback that wrapper calls, so define it under its own name.
#undef ibv_query_port

namespace softhca::verbs {
namespace {

// Bytes of the pre-1.1 struct _compat_ibv_port_attr (incomplete in verbs.h): ibv_port_attr up to
// and including flags (verbs-abi.md §2.3: 48 of today's 52 bytes).
constexpr size_t kCompatPortAttrBytes = offsetof(ibv_port_attr, port_cap_flags2);
static_assert(kCompatPortAttrBytes == 48);

bool is_empty_gid(const ibv_gid& gid) {
  for (uint8_t byte : gid.raw) {
    if (byte != 0) return false;
  }
  return true;
}

int query_port_attr(ibv_context* ctx, uint32_t port_num, ibv_port_attr* attr) {
  if (port_num == 0 || port_num > UINT8_MAX) return EINVAL;
  *attr = {};
  return driver::query_port(ctx, static_cast<uint8_t>(port_num), attr, sizeof(*attr));
}

// The first entry_size bytes of entry n of a caller's array of GID entries.
ibv_gid_entry* entry_at(ibv_gid_entry* entries, size_t n, size_t entry_size) {
  return reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<uint8_t*>(entries) + n * entry_size);
}

}  // namespace

int query_gid_entry(ibv_context* ctx, uint32_t port_num, uint32_t index, ibv_gid_entry* entry) {
  ibv_port_attr port{};
  int ret = query_port_attr(ctx, port_num, &port);
  if (ret != 0) return ret;
  if (index >= static_cast<uint32_t>(port.gid_tbl_len)) return EINVAL;
  ibv_gid gid{};
  ret = driver::query_gid(ctx, static_cast<uint8_t>(port_num), static_cast<int>(index), &gid);
  if (ret != 0) return ret;
  if (is_empty_gid(gid)) return ENODATA;
  *entry = {};
  entry->gid = gid;
  entry->gid_index = index;
  entry->port_num = port_num;
  entry->gid_type =
      port.link_layer == IBV_LINK_LAYER_ETHERNET ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_IB;
  entry->ndev_ifindex = 0;  // no network device behind an InfiniBand port
  return 0;
}

}  // namespace softhca::verbs

using namespace softhca;

extern "C" {

// 0 or a positive errno.
int ibv_query_device(ibv_context* context, ibv_device_attr* device_attr) {
  if (context == nullptr || device_attr == nullptr) return EINVAL;
  return driver::query_device(context, device_attr);
}

// The IBVERBS_1.1 fallback of the ibv_query_port inline wrapper: the pre-1.1 48-byte struct
// (up to flags). 0 or a positive errno.
int ibv_query_port(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* port_attr) {
  if (context == nullptr || port_attr == nullptr) return EINVAL;
  return driver::query_port(context, port_num, reinterpret_cast<ibv_port_attr*>(port_attr),
                            verbs::kCompatPortAttrBytes);
}

// 0, or -1 with errno. An empty slot reads as the zero GID, as from sysfs.
int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  if (context == nullptr || gid == nullptr || index < 0) {
    errno = EINVAL;
    return -1;
  }
  ibv_gid_entry entry{};
  const int ret = verbs::query_gid_entry(context, port_num, static_cast<uint32_t>(index), &entry);
  if (ret == ENODATA) {
    *gid = {};
    return 0;
  }
  if (ret != 0) {
    errno = ret;
    return -1;
  }
  *gid = entry.gid;
  return 0;
}

// 0, or -1 with errno. The P_Key is in network byte order.
int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  if (context == nullptr || pkey == nullptr || index < 0) {
    errno = EINVAL;
    return -1;
  }
  const int ret = driver::query_pkey(context, port_num, index, pkey);
  if (ret != 0) {
    errno = ret;
    return -1;
  }
  return 0;
}

// The index of pkey (network byte order) in the port's P_Key table, or -1 with errno.
int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  if (context == nullptr) {
    errno = EINVAL;
    return -1;
  }
  ibv_port_attr port{};
  const int ret = verbs::query_port_attr(context, port_num, &port);
  if (ret != 0) {
    errno = ret;
    return -1;
  }
  for (int index = 0; index < static_cast<int>(port.pkey_tbl_len); ++index) {
    __be16 entry = 0;
    if (ibv_query_pkey(context, port_num, index, &entry) != 0) return -1;
    if (entry == pkey) return index;
  }
  errno = ENOENT;
  return -1;
}

// 0 or a positive errno (ENODATA: empty slot). flags must be 0.
int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                      ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  if (context == nullptr || entry == nullptr || flags != 0 || entry_size < sizeof(ibv_gid_entry)) {
    return EINVAL;
  }
  return verbs::query_gid_entry(context, port_num, gid_index, entry);
}

// The number of valid entries written, or a negative errno (-EINVAL when they do not fit).
ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                             uint32_t flags, size_t entry_size) {
  if (context == nullptr || flags != 0 || entry_size < sizeof(ibv_gid_entry) ||
      (entries == nullptr && max_entries != 0)) {
    return -EINVAL;
  }
  ibv_device_attr device{};
  int ret = driver::query_device(context, &device);
  if (ret != 0) return -ret;
  size_t found = 0;
  for (uint32_t port_num = 1; port_num <= device.phys_port_cnt; ++port_num) {
    ibv_port_attr port{};
    ret = verbs::query_port_attr(context, port_num, &port);
    if (ret != 0) return -ret;
    for (uint32_t index = 0; index < static_cast<uint32_t>(port.gid_tbl_len); ++index) {
      ibv_gid_entry entry{};
      ret = verbs::query_gid_entry(context, port_num, index, &entry);
      if (ret == ENODATA) continue;
      if (ret != 0) return -ret;
      if (found == max_entries) return -EINVAL;
      *verbs::entry_at(entries, found++, entry_size) = entry;
    }
  }
  return static_cast<ssize_t>(found);
}

// IBVERBS_PRIVATE_34. 0, or -1 with errno. An empty slot reports IB/RoCE v1, as rdma-core does.
int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                       ibv_gid_type_sysfs* type) {
  if (context == nullptr || type == nullptr) {
    errno = EINVAL;
    return -1;
  }
  ibv_gid_entry entry{};
  const int ret = verbs::query_gid_entry(context, port_num, index, &entry);
  if (ret == ENODATA) {
    *type = IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
    return 0;
  }
  if (ret != 0) {
    errno = ret;
    return -1;
  }
  *type = entry.gid_type == IBV_GID_TYPE_ROCE_V2 ? IBV_GID_TYPE_SYSFS_ROCE_V2
                                                 : IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
  return 0;
}

// 1 if the device guarantees that data lands in memory in order, else 0. softhca promises
// nothing beyond the IBA ordering rules, so: 0 (what real libibverbs answers without the op).
int ibv_query_qp_data_in_order(ibv_qp* /*qp*/, ibv_wr_opcode /*op*/, uint32_t /*flags*/) {
  return 0;
}

}  // extern "C"
