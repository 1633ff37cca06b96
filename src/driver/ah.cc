// Control path: address handles. As mlx5 on InfiniBand, an AH is a user-space object only: the
// datagram segment (verbs-abi.md §6.1 "Datagram segment") is precomputed here and copied into
// every UD send WQE, completed with the WR's remote QPN and Q_Key. No command reaches the device.
// stat_rate_sl carries the ibv_rate value (low 4 bits) and the SL; the device only reports it.
#include <cerrno>
#include <cstring>
#include <new>

#include "driver/objects.h"
#include "driver/provider.h"

namespace softhca::driver {

ibv_ah* create_ah(ibv_pd* ibpd, ibv_ah_attr* attr) {
  Context* ctx = to_ctx(ibpd->context);
  if (attr->port_num == 0 || attr->port_num > ctx->caps.phys_port_cnt) return fail_errno<ibv_ah>(EINVAL);
  if (attr->is_global && attr->grh.sgid_index >= hwif::kGidTableLen) return fail_errno<ibv_ah>(EINVAL);
  if (!attr->is_global) {
    // A RoCE port addresses by GID only: an AH without a GRH has no destination there (Linux
    // rdma_check_ah_attr answers EINVAL).
    ibv_port_attr port{};
    if (query_port(ibpd->context, attr->port_num, &port, sizeof(port)) == 0 &&
        port.link_layer == IBV_LINK_LAYER_ETHERNET)
      return fail_errno<ibv_ah>(EINVAL);
  }
  auto* ah = new (std::nothrow) Ah{};
  if (ah == nullptr) return fail_errno<ibv_ah>(ENOMEM);
  hwif::DatagramSeg& av = ah->av;
  av.stat_rate_sl = static_cast<uint8_t>(((attr->static_rate & 0xf) << 4) | (attr->sl & 0xf));
  av.fl_mlid = attr->src_path_bits & 0x7f;
  av.rlid = attr->dlid;
  if (attr->is_global) {
    av.grh_gid_fl = (1u << 30) | (static_cast<uint32_t>(attr->grh.sgid_index) << 20) | (attr->grh.flow_label & 0xfffff);
    av.tclass = attr->grh.traffic_class;
    av.hop_limit = attr->grh.hop_limit;
    std::memcpy(av.rgid, attr->grh.dgid.raw, sizeof(av.rgid));
  }
  ah->ah.context = ibpd->context;
  ah->ah.pd = ibpd;
  to_pd(ibpd)->users.fetch_add(1, std::memory_order_relaxed);
  return &ah->ah;
}

int destroy_ah(ibv_ah* ibah) {
  to_pd(ibah->pd)->users.fetch_sub(1, std::memory_order_relaxed);
  delete to_ah(ibah);
  return 0;
}

}  // namespace softhca::driver
