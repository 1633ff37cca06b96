// Every public libibverbs export that softhca does not implement, in one place. Each answers
// EOPNOTSUPP by the calling convention of its return type (verbs/unsupported.h), so pyverbs and
// perftest skip what they cannot use (verbs-abi.md §5.3). The extended verbs reached through the
// verbs_context op table are answered by the NULL ops of context_ops.cc instead.
#include "verbs/unsupported.h"

#include <cstddef>
#include <cstdint>

#include "verbs/glue.h"

using softhca::verbs::unsupported;

extern "C" {

// ---- MR -----------------------------------------------------------------------------------------

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* /*pd*/, uint64_t /*offset*/, size_t /*length*/, uint64_t /*iova*/,
                          int /*fd*/, int /*access*/) {
  return unsupported<ibv_mr*>();
}

// ---- RoCE address resolution --------------------------------------------------------------------

int ibv_resolve_eth_l2_from_gid(ibv_context* /*context*/, ibv_ah_attr* /*attr*/,
                                uint8_t /*eth_mac*/[6], uint16_t* /*vid*/) {
  return unsupported<int>();
}

// ---- enhanced connection establishment ----------------------------------------------------------

int ibv_set_ece(ibv_qp* /*qp*/, ibv_ece* /*ece*/) { return unsupported<int>(); }

int ibv_query_ece(ibv_qp* /*qp*/, ibv_ece* /*ece*/) { return unsupported<int>(); }

// ---- sharing objects between processes through the kernel (shared PD) --------------------------

ibv_context* ibv_import_device(int /*cmd_fd*/) { return unsupported<ibv_context*>(); }

ibv_pd* ibv_import_pd(ibv_context* /*context*/, uint32_t /*pd_handle*/) {
  return unsupported<ibv_pd*>();
}

void ibv_unimport_pd(ibv_pd* /*pd*/) { unsupported<void>(); }

ibv_mr* ibv_import_mr(ibv_pd* /*pd*/, uint32_t /*mr_handle*/) { return unsupported<ibv_mr*>(); }

void ibv_unimport_mr(ibv_mr* /*mr*/) { unsupported<void>(); }

ibv_dm* ibv_import_dm(ibv_context* /*context*/, uint32_t /*dm_handle*/) {
  return unsupported<ibv_dm*>();
}

void ibv_unimport_dm(ibv_dm* /*dm*/) { unsupported<void>(); }

}  // extern "C"
