// The fixture of the bad-input tests (bad_input_test.cc, protection_test.cc): VerbsPair plus a
// snapshot of both buffers, to prove that nothing was written, and the "bad WR, next WR, later WR"
// sequence whose outcome is one row of docs/bad-input.md. Offsets in bytes into the 4 MiB buffers.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "verbs_pair.h"

namespace softhca::conformance {

inline constexpr size_t kSrcOff = 4096;
inline constexpr size_t kDstOff = 2 * kMiB;
inline constexpr size_t kSmallMrOff = 3 * kMiB;  // a 4 KiB MR registered separately for bounds and rights
inline constexpr size_t kSmallMrBytes = 4096;
inline constexpr size_t kNextWrOff = 3 * kMiB + 65536;  // where the valid "next WR" would write on B

class BadInput : public VerbsPair {
 protected:
  // Snapshots both buffers (to prove later that nothing was written).
  void snapshot() {
    before_a_.assign(a_.bytes().begin(), a_.bytes().end());
    before_b_.assign(b_.bytes().begin(), b_.bytes().end());
  }
  [[nodiscard]] std::string buffers_state() const {
    const bool same = std::equal(before_a_.begin(), before_a_.end(), a_.buf) &&
                      std::equal(before_b_.begin(), before_b_.end(), b_.buf);
    return same ? "buffers untouched" : "buffers CHANGED";
  }
  // A valid 8-byte RDMA WRITE from A to B (its bytes land only if it is executed).
  ibv_send_wr valid_write(uint64_t wr_id) {
    next_sge_ = a_.sge(kSrcOff, 8);
    SendArgs args;
    args.opcode = IBV_WR_RDMA_WRITE;
    args.wr_id = wr_id;
    args.remote_addr = b_.addr(kNextWrOff);
    args.rkey = b_.mr->rkey;
    return make_wr(args, std::span(&next_sge_, 1));
  }
  // Posts bad followed by a valid WR in one list, then (after polling both) one more valid WR.
  // Returns "requester S; QP STATE; next WR S; later WR S; buffers ...".
  std::string error_then_flush(ibv_qp* qp, ibv_send_wr bad) {
    snapshot();
    bad.wr_id = 1;
    bad.send_flags |= IBV_SEND_SIGNALED;
    ibv_send_wr next = valid_write(2);
    bad.next = &next;
    ibv_send_wr* bad_wr = nullptr;
    EXPECT_EQ(ibv_post_send(qp, &bad, &bad_wr), 0);
    std::vector<ibv_wc> wcs;
    EXPECT_TRUE(poll_completions(a_.cq, 2, wcs));
    if (wcs.size() != 2) return "fewer than 2 completions";
    EXPECT_EQ(wcs[0].wr_id, 1u);
    EXPECT_EQ(wcs[1].wr_id, 2u);
    const ibv_qp_state state = query_state(qp);
    ibv_send_wr later = valid_write(3);
    EXPECT_EQ(ibv_post_send(qp, &later, &bad_wr), 0);
    const ibv_wc last = poll_one(a_.cq);
    EXPECT_EQ(last.wr_id, 3u);
    return "requester " + wc_status_name(wcs[0].status) + "; QP " + qp_state_name(state) + "; next WR " +
           wc_status_name(wcs[1].status) + "; later WR " + wc_status_name(last.status) + "; " + buffers_state();
  }

  std::vector<uint8_t> before_a_;
  std::vector<uint8_t> before_b_;
  ibv_sge next_sge_{};
  ibv_sge bad_sge_{};
};

inline const std::string kFlushed = "; next WR IBV_WC_WR_FLUSH_ERR; later WR IBV_WC_WR_FLUSH_ERR; buffers untouched";

}  // namespace softhca::conformance
