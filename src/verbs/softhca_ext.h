// The private channel between softhca's libibverbs.so.1 and the libraries built beside it
// (librdmacm.so.1, src/rdmacm): what they need of the device that the verbs API does not give —
// today QP1's MAD agents (docs/cm.md, "QP1 on a shared device"). No symbol is exported for it, so
// libibverbs' export list stays exactly rdma-core's: a context of ours carries, as the first member
// of its library-private part (verbs_context::priv, glue.h), a pointer to this table.
// Plain C types only; a table with another magic or an older version is not ours to use.
#pragma once
#include <infiniband/verbs.h>

#include <cstdint>

struct softhca_ext_ops {
  static constexpr uint64_t kMagic = 0x31'54'58'45'41'43'48'53ull;  // "SHCAEXT1", little-endian
  static constexpr uint32_t kVersion = 2;
  uint64_t magic;
  uint32_t version;
  // 0 or a positive errno, as driver::set_mad_agent, bind_service and unbind_service.
  int (*set_mad_agent)(ibv_qp* qp, uint32_t* agent);
  int (*bind_service)(ibv_qp* qp, uint64_t* service_id, bool pick_port);
  int (*unbind_service)(ibv_qp* qp, uint64_t service_id);
  // docs/addresses.md: this context's host's IPv4 address, network byte order (Ethernet: GID 0's;
  // InfiniBand: SOFTHCA_IP, else 127.F.(lid >> 8).(lid & 0xff)), and whether the fabric registry
  // has a host of that LID (0 or ENOENT). 0 or a positive errno.
  int (*host_ipv4)(ibv_context* ctx, uint32_t* ipv4_be);
  int (*fabric_has_lid)(ibv_context* ctx, uint16_t lid);
  // driver::track_connection / untrack_connection: the DREQs a dying process's connections get.
  int (*track_connection)(ibv_qp* agent, uint32_t local_comm_id, uint32_t remote_comm_id, uint32_t remote_qpn,
                          uint16_t dlid, bool global, const uint8_t* dgid16);
  int (*untrack_connection)(ibv_qp* agent, uint32_t local_comm_id);
  // InfiniBand: the LID of the fabric's host whose recorded rdma_cm address is `ipv4_be` (network
  // byte order; docs/addresses.md). 0, ENOENT, or another positive errno.
  int (*lid_of_ipv4)(ibv_context* ctx, uint32_t ipv4_be, uint16_t* lid);
};

// The table of a context opened by softhca's libibverbs, or nullptr for any other context.
inline const softhca_ext_ops* softhca_ext_of(ibv_context* ctx) {
  verbs_context* v = ctx != nullptr ? verbs_get_ctx(ctx) : nullptr;
  if (v == nullptr || v->priv == nullptr) return nullptr;
  const softhca_ext_ops* ops = *reinterpret_cast<const softhca_ext_ops* const*>(v->priv);
  return ops != nullptr && ops->magic == softhca_ext_ops::kMagic && ops->version >= softhca_ext_ops::kVersion
             ? ops
             : nullptr;
}
