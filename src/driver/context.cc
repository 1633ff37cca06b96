// Control path: opening and closing a context, and the queries (device, port, GID, P_Key, the
// device clock), each answered by a QueryDevice/QueryPort/QueryClock command and converted to the
// verbs structures.
// Who may touch what: a context is created here and freed by close_context, which the verbs layer
// calls only after every object of the context was destroyed. The cached caps are read-only after
// open_context; queries hold no lock (the command interface serialises itself).
#include <endian.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>

#include "driver/objects.h"
#include "driver/provider.h"

namespace softhca::driver {
namespace {

int query_port_caps(Context* ctx, uint8_t port, hwif::PortCaps& out) {
  if (port == 0 || port > ctx->caps.phys_port_cnt) return EINVAL;
  hwif::QueryPortIn in;
  in.port = port;
  hwif::QueryPortOut res;
  int err = hwif::exec_cmd(*ctx->link.cmd, in, res);
  if (err == 0) out = res.port;
  return err;
}

// fw_ver packs major.minor.subminor as mlx5 does (16.35.2000): major in bits 32..47, minor in
// bits 16..31, subminor in bits 0..15.
void format_fw_ver(uint64_t fw_ver, char (&out)[64]) {
  std::snprintf(out, sizeof(out), "%u.%u.%04u", static_cast<unsigned>((fw_ver >> 32) & 0xffff),
                static_cast<unsigned>((fw_ver >> 16) & 0xffff), static_cast<unsigned>(fw_ver & 0xffff));
}

void fill_device_attr(const hwif::DeviceCaps& c, ibv_device_attr& a) {
  std::memset(&a, 0, sizeof(a));
  format_fw_ver(c.fw_ver, a.fw_ver);
  a.node_guid = htobe64(c.node_guid);  // hwif keeps the EUI-64 as a number; verbs wants __be64
  a.sys_image_guid = htobe64(c.sys_image_guid);
  a.max_mr_size = c.max_mr_size;
  a.page_size_cap = c.page_size_cap;
  a.vendor_id = c.vendor_id;
  a.vendor_part_id = c.vendor_part_id;
  a.hw_ver = c.hw_ver;
  a.max_qp = static_cast<int>(c.max_qp);
  a.max_qp_wr = static_cast<int>(c.max_qp_wr);
  // XRC: domains, XRC SRQs, INI and TGT QPs (xrc.cc), as the device executes them; memory
  // windows of both types (mw.cc), which share the key table with MRs (max_mw = max_mr, as mlx5).
  a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID |
                       IBV_DEVICE_XRC | IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  a.max_sge = static_cast<int>(c.max_sge);
  a.max_sge_rd = static_cast<int>(c.max_sge_rd);
  a.max_cq = static_cast<int>(c.max_cq);
  a.max_cqe = static_cast<int>(c.max_cqe);
  a.max_mr = static_cast<int>(c.max_mr);
  a.max_mw = static_cast<int>(c.max_mr);
  a.max_pd = static_cast<int>(c.max_pd);
  a.max_qp_rd_atom = static_cast<int>(c.max_qp_rd_atom);
  a.max_qp_init_rd_atom = static_cast<int>(c.max_qp_init_rd_atom);
  const uint64_t res_rd = static_cast<uint64_t>(c.max_qp) * c.max_qp_rd_atom;  // as mlx5
  a.max_res_rd_atom = static_cast<int>(std::min<uint64_t>(res_rd, std::numeric_limits<int>::max()));
  a.atomic_cap = c.atomic_hca ? IBV_ATOMIC_HCA : IBV_ATOMIC_NONE;
  a.max_ah = static_cast<int>(c.max_ah);
  a.max_mcast_grp = static_cast<int>(c.max_mcast_grp);
  a.max_mcast_qp_attach = static_cast<int>(c.max_mcast_qp_attach);
  a.max_total_mcast_qp_attach = static_cast<int>(c.max_mcast_grp * c.max_mcast_qp_attach);
  a.max_srq = static_cast<int>(c.max_srq);
  a.max_srq_wr = static_cast<int>(c.max_srq_wr);
  a.max_srq_sge = static_cast<int>(c.max_srq_sge);
  a.max_pkeys = c.max_pkeys;
  a.local_ca_ack_delay = c.local_ca_ack_delay;
  a.phys_port_cnt = c.phys_port_cnt;
}

}  // namespace

verbs_context* open_context(ibv_device* device, const DeviceLink& link, int cmd_fd) {
  if (link.host_port == nullptr || link.cmd == nullptr || link.kernel == nullptr) return fail_errno<verbs_context>(EINVAL);
  hwif::QueryDeviceOut dev;
  if (int err = hwif::exec_cmd(*link.cmd, hwif::QueryDeviceIn{}, dev); err != 0) return fail_errno<verbs_context>(err);

  auto* ctx = new (std::nothrow) Context{};
  if (ctx == nullptr) return fail_errno<verbs_context>(ENOMEM);
  ctx->link = link;
  ctx->caps = dev.caps;
  if (int err = open_async_events(*ctx); err != 0) {
    delete ctx;
    return fail_errno<verbs_context>(err);
  }

  verbs_context& v = ctx->vctx;
  v.sz = sizeof(verbs_context);
  v.query_port = query_port;
  v.query_device_ex = query_device_ex;
  ibv_context& c = v.context;
  c.device = device;
  c.cmd_fd = cmd_fd;
  c.async_fd = ctx->async_eq.fd;
  c.num_comp_vectors = static_cast<int>(std::max<uint32_t>(dev.caps.num_comp_vectors, 1));
  c.abi_compat = reinterpret_cast<void*>(std::numeric_limits<uintptr_t>::max());  // __VERBS_ABI_IS_EXTENDED
  pthread_mutex_init(&c.mutex, nullptr);
  // Called by the verbs inline functions without NULL checks (verbs-abi.md §2.2).
  c.ops.poll_cq = poll_cq;
  c.ops.req_notify_cq = req_notify_cq;
  c.ops.post_send = post_send;
  c.ops.post_recv = post_recv;
  c.ops.post_srq_recv = post_srq_recv;
  c.ops.alloc_mw = alloc_mw;
  c.ops.dealloc_mw = dealloc_mw;
  c.ops.bind_mw = bind_mw;
  return &v;
}

int close_context(ibv_context* ibctx_ptr) {
  Context* ctx = to_ctx(ibctx_ptr);
  ibv_context& c = ctx->vctx.context;
  // Every object of the context is gone (libibverbs' contract): the async EQ has no users.
  if (int err = close_async_events(*ctx); err != 0) return err;
  if (c.cmd_fd >= 0) ::close(c.cmd_fd);
  pthread_mutex_destroy(&c.mutex);
  delete ctx;
  return 0;
}

int query_device(ibv_context* ibctx_ptr, ibv_device_attr* attr) {
  Context* ctx = to_ctx(ibctx_ptr);
  hwif::QueryDeviceOut dev;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, hwif::QueryDeviceIn{}, dev); err != 0) return err;
  fill_device_attr(dev.caps, *attr);
  return 0;
}

// attr_size is the caller's sizeof(struct ibv_device_attr_ex). As rdma-core, it must at least
// hold orig_attr; a smaller (older) struct gets the leading part, a larger (newer) one gets its
// unknown tail zeroed.
int query_device_ex(ibv_context* ibctx_ptr, const ibv_query_device_ex_input* /*input*/,
                    ibv_device_attr_ex* attr, size_t attr_size) {
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  Context* ctx = to_ctx(ibctx_ptr);
  hwif::QueryDeviceOut dev;
  if (int err = hwif::exec_cmd(*ctx->link.cmd, hwif::QueryDeviceIn{}, dev); err != 0) return err;
  ibv_device_attr_ex full;
  std::memset(&full, 0, sizeof(full));
  fill_device_attr(dev.caps, full.orig_attr);
  full.device_cap_flags_ex = static_cast<uint64_t>(full.orig_attr.device_cap_flags);
  full.phys_port_cnt_ex = dev.caps.phys_port_cnt;
  // The clock of CQE timestamps (ibv_create_cq_ex) and CQ moderation (ibv_modify_cq).
  full.completion_timestamp_mask = dev.caps.timestamp_mask;
  full.hca_core_clock = dev.caps.hca_core_clock_khz;
  full.cq_mod_caps.max_cq_count = dev.caps.max_cq_moderation_count;
  full.cq_mod_caps.max_cq_period = dev.caps.max_cq_moderation_period_us;
  full.max_dm_size = dev.caps.max_dm_size;  // device memory (dm.cc)
  // Everything else (ODP, TSO, RSS, tag matching, PCI atomics) is not supported: 0.
  std::memset(attr, 0, attr_size);
  std::memcpy(attr, &full, std::min(attr_size, sizeof(full)));
  return 0;
}

int query_rt_values(ibv_context* ibctx_ptr, ibv_values_ex* values) {
  if ((values->comp_mask & ~static_cast<uint32_t>(IBV_VALUES_MASK_RAW_CLOCK)) != 0) return EINVAL;
  const uint32_t asked = values->comp_mask;
  values->comp_mask = 0;
  if ((asked & IBV_VALUES_MASK_RAW_CLOCK) == 0) return 0;
  hwif::QueryClockOut clock;
  if (int err = hwif::exec_cmd(*to_ctx(ibctx_ptr)->link.cmd, hwif::QueryClockIn{}, clock); err != 0) return err;
  values->raw_clock.tv_sec = 0;
  values->raw_clock.tv_nsec = static_cast<long>(clock.ticks);
  values->comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  return 0;
}

int query_port(ibv_context* ibctx_ptr, uint8_t port, ibv_port_attr* attr, size_t port_attr_len) {
  Context* ctx = to_ctx(ibctx_ptr);
  hwif::PortCaps p;
  if (int err = query_port_caps(ctx, port, p); err != 0) return err;
  ibv_port_attr a;
  std::memset(&a, 0, sizeof(a));
  a.state = static_cast<ibv_port_state>(p.state);
  a.max_mtu = static_cast<ibv_mtu>(p.max_mtu);
  a.active_mtu = static_cast<ibv_mtu>(p.active_mtu);
  a.gid_tbl_len = static_cast<int>(hwif::kGidTableLen);
  a.port_cap_flags = p.port_cap_flags;
  a.max_msg_sz = p.max_msg_sz;
  a.pkey_tbl_len = static_cast<uint16_t>(hwif::kPkeyTableLen);
  a.lid = p.lid;
  a.sm_lid = p.sm_lid;
  a.lmc = p.lmc;
  a.max_vl_num = 1;  // VL0 only
  a.active_width = p.active_width;
  a.active_speed = p.active_speed;
  a.phys_state = p.phys_state;
  a.link_layer = static_cast<uint8_t>(p.link_layer);
  // 48 bytes (the old ABI, up to `flags`) or 52 (with port_cap_flags2): never write past the
  // caller's struct.
  std::memcpy(attr, &a, std::min(port_attr_len, sizeof(a)));
  return 0;
}

int query_gid(ibv_context* ibctx_ptr, uint8_t port, int index, ibv_gid* gid) {
  if (index < 0 || static_cast<uint32_t>(index) >= hwif::kGidTableLen) return EINVAL;
  hwif::PortCaps p;
  if (int err = query_port_caps(to_ctx(ibctx_ptr), port, p); err != 0) return err;
  std::memcpy(gid->raw, p.gids[static_cast<size_t>(index)].raw.data(), sizeof(gid->raw));
  return 0;
}

// The P_Key is returned in network byte order, as libibverbs reads it from sysfs.
int query_pkey(ibv_context* ibctx_ptr, uint8_t port, int index, uint16_t* pkey) {
  if (index < 0 || static_cast<uint32_t>(index) >= hwif::kPkeyTableLen) return EINVAL;
  hwif::PortCaps p;
  if (int err = query_port_caps(to_ctx(ibctx_ptr), port, p); err != 0) return err;
  Be16 be(p.pkeys[static_cast<size_t>(index)]);
  std::memcpy(pkey, &be, sizeof(*pkey));
  return 0;
}

}  // namespace softhca::driver
