// Stub libefa.so.1: every public symbol of rdma-core 44's libefa, with its exact prototype from
// <infiniband/efadv.h> and its symbol version (libefa.map), answering "not supported".
// perftest and the pyverbs efa module link libefa.so.1 and resolve every import at load time;
// softhca is not an EFA device (vendor id is not 0x1d0f), so only SRD runs would reach these
// (verbs-abi.md §1.3, §1.5). Conventions: see src/verbs/unsupported.h.
#include <infiniband/efadv.h>

#include <cstdint>

#include "verbs/unsupported.h"

using softhca::verbs::unsupported;

extern "C" {

// ---- EFA_1.0 --------------------------------------------------------------------------
ibv_qp* efadv_create_driver_qp(ibv_pd*, ibv_qp_init_attr*, uint32_t) {
  return unsupported<ibv_qp*>();
}

// ---- EFA_1.1 --------------------------------------------------------------------------
ibv_qp* efadv_create_qp_ex(ibv_context*, ibv_qp_init_attr_ex*, efadv_qp_init_attr*, uint32_t) {
  return unsupported<ibv_qp*>();
}
int efadv_query_ah(ibv_ah*, efadv_ah_attr*, uint32_t) { return unsupported<int>(); }
int efadv_query_device(ibv_context*, efadv_device_attr*, uint32_t) { return unsupported<int>(); }

// ---- EFA_1.2 --------------------------------------------------------------------------
efadv_cq* efadv_cq_from_ibv_cq_ex(ibv_cq_ex*) { return unsupported<efadv_cq*>(); }
ibv_cq_ex* efadv_create_cq(ibv_context*, ibv_cq_init_attr_ex*, efadv_cq_init_attr*, uint32_t) {
  return unsupported<ibv_cq_ex*>();
}

}  // extern "C"
