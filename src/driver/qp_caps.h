// How big a QP's send WQEs may get and what that means for the caps reported back: the mlx5
// computation of verbs-abi.md §6.1 "Max inline". Sizes in bytes; a pure function of the request.
#pragma once
#include <infiniband/verbs.h>

#include <cstdint>

#include "hwif/cmd.h"

namespace softhca::driver {

// The send ops a QP created through ibv_create_qp_ex may ask for (all but TSO and atomic write).
inline constexpr uint64_t kSupportedSendOps =
    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_BIND_MW |
    IBV_QP_EX_WITH_LOCAL_INV;

// The send ops a QP type can carry (UC: no READ, atomics or SEND with invalidate; UD: sends only).
uint64_t send_ops_of_type(hwif::QpType type);

struct SendLayout {
  uint32_t overhead = 0;    // largest fixed part of a WQE (ctrl + raddr/atomic/datagram ...)
  uint32_t wqe_size = 0;    // bytes per WQE slot, a multiple of 64
  uint32_t max_inline = 0;  // reported cap.max_inline_data
  uint32_t wqe_cnt = 0;     // 64-byte blocks in the ring, a power of two
  uint32_t max_post = 0;    // reported cap.max_send_wr
};

// send_ops == 0: the legacy interface (all ops of the type, including the 192-byte bind/local
// invalidate WQEs mlx5 reserves room for). Returns 0 or EINVAL when the WQE cannot be that big.
int compute_send_layout(hwif::QpType type, uint64_t send_ops, uint32_t max_send_wr, uint32_t max_send_sge,
                        uint32_t max_inline_data, SendLayout& out);

}  // namespace softhca::driver
