// The send WQE size computation (mlx5 verbs.c sq_overhead / calc_send_wqe, verbs-abi.md §6.1).
#include "driver/qp_caps.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>

#include "driver/objects.h"
#include "hwif/wqe.h"

namespace softhca::driver {
namespace {

constexpr uint32_t kCtrlBytes = sizeof(hwif::CtrlSeg);                             // 16
constexpr uint32_t kRdmaBytes = kCtrlBytes + sizeof(hwif::RaddrSeg);               // 32
constexpr uint32_t kAtomicBytes = kRdmaBytes + sizeof(hwif::AtomicSeg);            // 48
constexpr uint32_t kDatagramBytes = sizeof(hwif::DatagramSeg);                     // 48
constexpr uint32_t kXrcBytes = sizeof(hwif::XrcSeg);                               // 16
constexpr uint32_t kMaxWqeBytes = hwif::kMaxWqeBbs * hwif::kSendWqeBbBytes;        // 1024
constexpr uint32_t kMaxDsBytes = hwif::kMaxDs * hwif::kDsBytes;                    // 1008: ds is 6 bits
constexpr uint32_t kMaxRingBbs = 1u << 16;  // the WQE index in the ctrl segment is 16 bits
constexpr uint32_t kMinSendRingBytes = kMaxWqeBytes;  // the device requires room for its largest WQE

uint32_t align_to(uint32_t v, uint32_t a) { return (v + a - 1) / a * a; }

uint32_t overhead_of(hwif::QpType type, uint64_t send_ops) {
  uint32_t size = 0;
  if (send_ops == 0) {
    // Legacy: every op of the type the device executes. mlx5 also keeps room for a bind or
    // local-invalidate WQE (192 bytes of UMR segments) on connected QPs; softhca executes neither
    // (IBV_WR_BIND_MW and IBV_WR_LOCAL_INV are EINVAL), so an RC WQE with one SGE is one basic
    // block and max_qp_wr of them fit the 2^15 blocks a ring may have (docs/decisions.md D19).
    size = type == hwif::QpType::kUd ? kCtrlBytes : kAtomicBytes;
  } else {
    if (send_ops & (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM)) size = std::max(size, kCtrlBytes);
    if (send_ops & (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ))
      size = std::max(size, kRdmaBytes);
    if (send_ops & (IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD))
      size = std::max(size, kAtomicBytes);
    size = std::max(size, kCtrlBytes);
  }
  if (type == hwif::QpType::kUd) size += kDatagramBytes;
  if (type == hwif::QpType::kXrcIni) size += kXrcBytes;
  return size;
}

}  // namespace

uint64_t send_ops_of_type(hwif::QpType type) {
  switch (type) {
    case hwif::QpType::kRc:
    case hwif::QpType::kXrcIni:
      return kSupportedSendOps;
    case hwif::QpType::kXrcTgt:
      return 0;
    case hwif::QpType::kUc:
      return IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
             IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
    case hwif::QpType::kUd:
      return IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
  }
  return 0;
}

int compute_send_layout(hwif::QpType type, uint64_t send_ops, uint32_t max_send_wr, uint32_t max_send_sge,
                        uint32_t max_inline_data, SendLayout& out) {
  const uint32_t overhead = overhead_of(type, send_ops);
  const uint64_t with_sges = overhead + static_cast<uint64_t>(hwif::kDsBytes) * max_send_sge;
  const uint64_t with_inline = overhead + align_to(static_cast<uint32_t>(sizeof(hwif::InlineHdr)) + max_inline_data, hwif::kDsBytes);
  const uint64_t need = std::max(with_sges, with_inline);
  if (max_inline_data > kMaxWqeBytes || need > kMaxDsBytes) return EINVAL;
  const uint32_t wqe_size = align_to(static_cast<uint32_t>(need), hwif::kSendWqeBbBytes);
  if (wqe_size > kMaxWqeBytes) return EINVAL;

  const uint64_t wr_bytes = static_cast<uint64_t>(std::max<uint32_t>(max_send_wr, 1)) * wqe_size;
  if (wr_bytes > uint64_t{kMaxRingBbs} * hwif::kSendWqeBbBytes) return EINVAL;
  // The device refuses a send ring that cannot hold its largest WQE (16 basic blocks, the
  // 1008-byte limit of 63 DS rounded up): small queues (max_send_wr 1, as the pingpong programs
  // ask) get that many blocks, and the caps report the extra room as max_send_wr.
  const uint32_t wq_bytes = std::max(roundup_pow2(static_cast<uint32_t>(wr_bytes)), kMinSendRingBytes);
  out.overhead = overhead;
  out.wqe_size = wqe_size;
  // An inline segment must also keep the WQE within 63 DS, hence the min with kMaxDsBytes.
  out.max_inline = std::min(wqe_size, kMaxDsBytes) - overhead - static_cast<uint32_t>(sizeof(hwif::InlineHdr));
  out.wqe_cnt = static_cast<uint32_t>(wq_bytes / hwif::kSendWqeBbBytes);
  out.max_post = static_cast<uint32_t>(wq_bytes / wqe_size);
  return 0;
}

}  // namespace softhca::driver
