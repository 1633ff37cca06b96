// Small helpers for the driver tests: WR builders and WQE/doorbell decoding.
#pragma once
#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "base/endian.h"
#include "hwif/uar.h"
#include "hwif/wqe.h"

namespace softhca::driver::testing {

inline constexpr uint64_t kBfreg1 = hwif::uar_page_offset(0) + hwif::bfreg_offset(1);  // 0x1A00

template <class T>
T seg_at(const uint8_t* p) {
  return load_as<T>(p);
}
inline hwif::CtrlSeg ctrl_at(const uint8_t* p) { return load_as<hwif::CtrlSeg>(p); }

inline uint64_t addr_of(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

inline ibv_send_wr send_wr(uint64_t id, ibv_sge* sge, int num_sge, ibv_wr_opcode op = IBV_WR_SEND,
                           unsigned int flags = 0) {
  ibv_send_wr wr{};
  wr.wr_id = id;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  wr.opcode = op;
  wr.send_flags = flags;
  return wr;
}

inline ibv_send_wr write_wr(uint64_t id, ibv_sge* sge, uint64_t raddr, uint32_t rkey, unsigned int flags = 0) {
  ibv_send_wr wr = send_wr(id, sge, 1, IBV_WR_RDMA_WRITE, flags);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return wr;
}

// Links wrs[0] -> wrs[1] -> ... and returns the head.
inline ibv_send_wr* link(std::vector<ibv_send_wr>& wrs) {
  for (size_t i = 0; i + 1 < wrs.size(); ++i) wrs[i].next = &wrs[i + 1];
  if (!wrs.empty()) wrs.back().next = nullptr;
  return wrs.data();
}

inline uint32_t be32_at(const uint8_t* p) { return load_as<Be32>(p).get(); }

}  // namespace softhca::driver::testing
