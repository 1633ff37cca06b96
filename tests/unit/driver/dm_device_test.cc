// Device memory with the real device model (device_rig.h): the CPU's copies are MMIO into the BAR
// (one MWr per 64-byte write-combining chunk, one MRd and its CplD per 8-byte load), the device
// reads and writes the memory with no PCIe traffic of its own, and RDMA to and from an MR in it
// moves the bytes; the errors are those of ibv_alloc_dm(3) and ibv_reg_dm_mr(3).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <numeric>
#include <vector>

#include "device_rig.h"
#include "driver/provider.h"
#include "pcie/counters.h"

namespace softhca::driver::testing {
namespace {


constexpr unsigned int kDmRights =
    IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// Two RC QPs of one device connected through its looped-back port, one CQ; a host buffer (first
// half sources, second half targets) and 8 KiB of device memory with an MR over all of it.
class DmDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = open_rig_context(r_);
    ASSERT_NE(ctx_, nullptr);
    pd_ = alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    cq_ = create_cq(ctx_, 15, nullptr, 0);
    ASSERT_NE(cq_, nullptr);
    a_ = rc_qp(pd_, cq_);
    b_ = rc_qp(pd_, cq_);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    ASSERT_EQ(to_rts(a_, b_->qp_num, r_.dev.lid()), 0);
    ASSERT_EQ(to_rts(b_, a_->qp_num, r_.dev.lid()), 0);
    std::iota(buf_.begin(), buf_.begin() + kHalf, uint8_t{1});
    mr_ = reg_mr(pd_, buf_.data(), buf_.size(), reinterpret_cast<uintptr_t>(buf_.data()),
                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(mr_, nullptr);
    ibv_alloc_dm_attr attr{};
    attr.length = kDmBytes;
    dm_ = alloc_dm(ctx_, &attr);
    ASSERT_NE(dm_, nullptr) << errno;
    dm_mr_ = reg_dm_mr(pd_, dm_, 0, kDmBytes, kDmRights);
    ASSERT_NE(dm_mr_, nullptr) << errno;
  }
  void TearDown() override {
    EXPECT_EQ(dereg_mr(dm_mr_), 0);
    EXPECT_EQ(free_dm(dm_), 0);
    EXPECT_EQ(dereg_mr(mr_), 0);
    EXPECT_EQ(destroy_qp(a_), 0);
    EXPECT_EQ(destroy_qp(b_), 0);
    EXPECT_EQ(destroy_cq(cq_), 0);
    EXPECT_EQ(dealloc_pd(pd_), 0);
    EXPECT_EQ(close_context(ctx_), 0);
    EXPECT_EQ(r_.dev.object_counts().dms, 0u);
    EXPECT_EQ(r_.bridge.faults, 0);
  }
  // One signaled RDMA op from (laddr, lkey) to (raddr, rkey), completed; its status.
  ibv_wc_status rdma(ibv_wr_opcode op, uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t len) {
    ibv_sge sge{laddr, len, lkey};
    ibv_send_wr wr{};
    wr.wr_id = 7;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    if (post_send(a_, &wr, &bad) != 0) return IBV_WC_GENERAL_ERR;
    r_.loop.pump(r_.dev);
    ibv_wc wc{};
    if (poll_cq(cq_, 1, &wc) != 1) return IBV_WC_GENERAL_ERR;
    return wc.status;
  }
  uint64_t host(size_t offset) const { return reinterpret_cast<uintptr_t>(buf_.data() + offset); }
  std::vector<uint8_t> dm_bytes(uint64_t offset, size_t len) {
    std::vector<uint8_t> out(len);
    EXPECT_EQ(dm_->memcpy_from_dm(out.data(), dm_, offset, len), 0);
    return out;
  }

  static constexpr size_t kDmBytes = 8192;
  static constexpr size_t kHalf = 4096;
  Rig r_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* a_ = nullptr;
  ibv_qp* b_ = nullptr;
  ibv_mr* mr_ = nullptr;
  ibv_dm* dm_ = nullptr;
  ibv_mr* dm_mr_ = nullptr;
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(2 * kHalf, 0);
};

TEST_F(DmDevice, CopiesAreMmioOneMWrPerChunkAndOneReadPerWord) {
  // Expect: a fresh allocation reads as zeros.
  EXPECT_EQ(dm_bytes(0, 64), std::vector<uint8_t>(64, 0));
  const pcie::CounterSnapshot t0 = r_.counters.snapshot();
  ASSERT_EQ(dm_->memcpy_to_dm(dm_, 0, buf_.data(), 256), 0);
  const pcie::CounterSnapshot w = r_.counters.snapshot() - t0;
  EXPECT_EQ(w.tlps(pcie::TlpType::kMWr, pcie::TlpCause::kDmWrite), 4u);  // 256 / 64
  EXPECT_EQ(w.total().tlps, 4u);
  // 64 bytes starting 4 bytes into a chunk touch two chunks: two stores.
  const pcie::CounterSnapshot t1 = r_.counters.snapshot();
  ASSERT_EQ(dm_->memcpy_to_dm(dm_, 1028, buf_.data() + 1000, 64), 0);
  EXPECT_EQ((r_.counters.snapshot() - t1).total().tlps, 2u);
  const pcie::CounterSnapshot t2 = r_.counters.snapshot();
  const std::vector<uint8_t> back = dm_bytes(0, 256);
  const pcie::CounterSnapshot rd = r_.counters.snapshot() - t2;
  EXPECT_EQ(rd.tlps(pcie::TlpType::kMRd, pcie::TlpCause::kDmRead), 32u);  // 256 / 8
  EXPECT_EQ(rd.tlps(pcie::TlpType::kCplD, pcie::TlpCause::kDmRead), 32u);
  EXPECT_EQ(rd.total().tlps, 64u);
  EXPECT_EQ(back, std::vector<uint8_t>(buf_.begin(), buf_.begin() + 256));
  EXPECT_EQ(dm_bytes(1028, 64), std::vector<uint8_t>(buf_.begin() + 1000, buf_.begin() + 1064));
  // A CPU read moves MRd downstream and its completion upstream, as any MMIO read.
  EXPECT_EQ(rd.wire_bytes(pcie::Direction::kDownstream) > 0, true);
  EXPECT_EQ(rd.wire_bytes(pcie::Direction::kUpstream) > rd.wire_bytes(pcie::Direction::kDownstream), true);
}

TEST_F(DmDevice, RdmaIntoAndOutOfDeviceMemoryMovesNoPayloadOverPcie) {
  // Host -> host first: the reference counts of one 1 KiB WRITE.
  pcie::CounterSnapshot t = r_.counters.snapshot();
  ASSERT_EQ(rdma(IBV_WR_RDMA_WRITE, host(0), mr_->lkey, host(kHalf), mr_->rkey, 1024), IBV_WC_SUCCESS);
  const pcie::CounterSnapshot ref = r_.counters.snapshot() - t;
  ASSERT_GT(ref.by_cause(pcie::TlpCause::kPayloadWrite).tlps, 0u);
  // Host -> device memory (zero-based: the rkey's address 512 is the allocation's byte 512).
  t = r_.counters.snapshot();
  ASSERT_EQ(rdma(IBV_WR_RDMA_WRITE, host(0), mr_->lkey, 512, dm_mr_->rkey, 1024), IBV_WC_SUCCESS);
  const pcie::CounterSnapshot into = r_.counters.snapshot() - t;
  EXPECT_EQ(into.by_cause(pcie::TlpCause::kPayloadWrite).tlps, 0u);
  EXPECT_EQ(into.by_cause(pcie::TlpCause::kPayloadRead).tlps, ref.by_cause(pcie::TlpCause::kPayloadRead).tlps);
  EXPECT_EQ(into.total().tlps, ref.total().tlps - ref.by_cause(pcie::TlpCause::kPayloadWrite).tlps);
  EXPECT_EQ(dm_bytes(512, 1024), std::vector<uint8_t>(buf_.begin(), buf_.begin() + 1024));
  // Device memory -> host by WRITE (the local SGE in device memory) and by READ (the remote).
  std::fill(buf_.begin() + kHalf, buf_.end(), uint8_t{0});
  t = r_.counters.snapshot();
  ASSERT_EQ(rdma(IBV_WR_RDMA_WRITE, 512, dm_mr_->lkey, host(kHalf), mr_->rkey, 1024), IBV_WC_SUCCESS);
  const pcie::CounterSnapshot from = r_.counters.snapshot() - t;
  EXPECT_EQ(from.by_cause(pcie::TlpCause::kPayloadRead).tlps, 0u);
  EXPECT_EQ(from.by_cause(pcie::TlpCause::kPayloadWrite).tlps, ref.by_cause(pcie::TlpCause::kPayloadWrite).tlps);
  EXPECT_TRUE(std::equal(buf_.begin(), buf_.begin() + 1024, buf_.begin() + kHalf));
  std::fill(buf_.begin() + kHalf, buf_.end(), uint8_t{0});
  ibv_qp_attr rights{};
  rights.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;  // the rig's QPs take no READ
  ASSERT_EQ(modify_qp(b_, &rights, IBV_QP_ACCESS_FLAGS), 0);
  t = r_.counters.snapshot();
  ASSERT_EQ(rdma(IBV_WR_RDMA_READ, host(kHalf), mr_->lkey, 512, dm_mr_->rkey, 1024), IBV_WC_SUCCESS);
  EXPECT_EQ((r_.counters.snapshot() - t).by_cause(pcie::TlpCause::kPayloadRead).tlps, 0u);
  EXPECT_TRUE(std::equal(buf_.begin(), buf_.begin() + 1024, buf_.begin() + kHalf));
  // Past the MR's end: a remote access error, as for host memory.
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, host(0), mr_->lkey, kDmBytes - 512, dm_mr_->rkey, 1024), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(DmDevice, ErrorsAreThoseOfTheManPages) {
  ibv_alloc_dm_attr attr{};
  errno = 0;
  EXPECT_EQ(alloc_dm(ctx_, &attr), nullptr);  // length 0
  EXPECT_EQ(errno, EINVAL);
  attr.length = r_.config.caps.max_dm_size + 1;
  EXPECT_EQ(alloc_dm(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.length = 64;
  attr.comp_mask = 1;
  EXPECT_EQ(alloc_dm(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // The window is full once what is left is taken; then ENOMEM.
  attr = ibv_alloc_dm_attr{};
  attr.length = r_.config.caps.max_dm_size - kDmBytes;
  ibv_dm* rest = alloc_dm(ctx_, &attr);
  ASSERT_NE(rest, nullptr);
  attr.length = 64;
  EXPECT_EQ(alloc_dm(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(free_dm(rest), 0);
  // Copies: 4-byte alignment for stores, bounds for both.
  uint8_t b[16] = {};
  EXPECT_EQ(dm_->memcpy_to_dm(dm_, 2, b, 8), EINVAL);
  EXPECT_EQ(dm_->memcpy_to_dm(dm_, 0, b, 6), EINVAL);
  EXPECT_EQ(dm_->memcpy_to_dm(dm_, kDmBytes - 4, b, 8), EFAULT);
  EXPECT_EQ(dm_->memcpy_from_dm(b, dm_, kDmBytes, 1), EFAULT);
  // Registration: zero-based only, inside the allocation, remote write needs local write.
  EXPECT_EQ(reg_dm_mr(pd_, dm_, 0, 64, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(reg_dm_mr(pd_, dm_, kDmBytes - 32, 64, kDmRights), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(reg_dm_mr(pd_, dm_, 0, 64, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // An allocation with an MR in it is busy, and stays usable.
  EXPECT_EQ(free_dm(dm_), EBUSY);
  EXPECT_EQ(dm_->memcpy_to_dm(dm_, 0, b, 16), 0);
}

}  // namespace
}  // namespace softhca::driver::testing
