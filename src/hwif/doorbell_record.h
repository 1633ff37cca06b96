// Doorbell records: small counters in host memory that the driver updates and the device reads
// by DMA when it needs them (../shared/reference/verbs-abi.md §6.1 "Doorbell records", §6.3).
#pragma once
#include <cstddef>
#include <cstdint>

#include "base/endian.h"

namespace softhca::hwif {

inline constexpr uint32_t kDbRecBytes = 64;  // one record per cache line

struct QpDbRec {
  Be32 rq_counter;  // [MLX5_RCV_DBR=0]: receive WQEs posted, & 0xffff
  Be32 sq_counter;  // [MLX5_SND_DBR=1]: send WQEBBs posted, & 0xffff
};
static_assert(sizeof(QpDbRec) == 8);
static_assert(offsetof(QpDbRec, sq_counter) == 4);

struct SrqDbRec {
  Be32 counter;  // receive WQEs posted, & 0xffff
  Be32 rsvd4;
};
static_assert(sizeof(SrqDbRec) == 8);

struct CqDbRec {
  Be32 set_ci;  // consumer index & 0xffffff, updated after polling
  Be32 arm;     // sn<<28 | cmd | ci, written before the arm doorbell
};
static_assert(sizeof(CqDbRec) == 8);
static_assert(offsetof(CqDbRec, arm) == 4);

}  // namespace softhca::hwif
