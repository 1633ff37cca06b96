// The data path under concurrency, through the contract only: a device thread learns the SQ
// producer index from the doorbell record (acquire), reads the WQEs, and writes one CQE per WQE
// when the CQ has room (set_ci, acquire); a poller thread polls; the test thread posts.
// Run under TSan (SOFTHCA_SANITIZE=thread) this checks the ownership handovers of the rings.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <thread>

#include "fake_device.h"
#include "test_util.h"

namespace softhca::driver::testing {
namespace {

uint32_t acquire_be32(Be32& field) { return std::atomic_ref<Be32>(field).load(std::memory_order_acquire).get(); }

TEST(Concurrency, APosterAPollerAndADeviceThreadRetireEveryWrOnceAndInOrder) {
  DeviceHarness h(BlueFlameMode::kOff);
  ibv_cq* cq = h.cq(15);  // 16 CQEs: the device often waits for the poller
  ibv_qp* qp = h.qp(IBV_QPT_RC, 8, 1, 0, 0, /*sig_all=*/true, cq);
  h.to_rts(qp);
  constexpr uint32_t kWrs = 20000;
  const uint32_t nent = 16;
  uint8_t* sq = h.sq(qp);
  const uint32_t sq_bbs = h.sq_bbs(qp);
  hwif::QpDbRec* qp_db = h.qp_dbrec(qp);
  hwif::CqDbRec* cq_db = h.cq_dbrec(cq);
  hwif::Cqe64* cqes = h.cqes(cq);

  std::thread device([&] {
    uint16_t consumed_bb = 0;
    uint32_t pi = 0;
    while (pi < kWrs) {
      const auto producer = static_cast<uint16_t>(acquire_be32(qp_db->sq_counter));
      if (producer == consumed_bb) {
        std::this_thread::yield();
        continue;
      }
      const hwif::CtrlSeg c = ctrl_at(sq + static_cast<size_t>(consumed_bb & (sq_bbs - 1)) * 64);
      ASSERT_EQ(c.wqe_index(), consumed_bb);
      while (pi - (acquire_be32(cq_db->set_ci) & 0xffffff) >= nent) std::this_thread::yield();
      hwif::Cqe64 cqe{};
      cqe.sop_drop_qpn = (uint32_t{static_cast<uint8_t>(c.opcode())} << 24) | c.qpn();
      cqe.wqe_counter = c.wqe_index();
      write_cqe(cqes, 4, pi++, cqe, hwif::CqeOpcode::kReq);
      consumed_bb = static_cast<uint16_t>(consumed_bb + (c.ds() * 16 + 63) / 64);
    }
  });

  std::atomic<uint32_t> polled{0};
  std::thread poller([&] {
    std::array<ibv_wc, 4> wc{};
    uint64_t expect = 0;
    while (expect < kWrs) {
      const int n = poll_cq(cq, 4, wc.data());
      ASSERT_GE(n, 0);
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(wc[i].status, IBV_WC_SUCCESS);
        ASSERT_EQ(wc[i].wr_id, expect);
        ++expect;
      }
      polled.store(static_cast<uint32_t>(expect), std::memory_order_relaxed);
      if (n == 0) std::this_thread::yield();
    }
  });

  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 1};
  uint32_t full = 0;
  for (uint64_t i = 0; i < kWrs;) {
    ibv_send_wr wr = send_wr(i, &sge, 1);
    ibv_send_wr* bad = nullptr;
    const int err = post_send(qp, &wr, &bad);
    if (err == ENOMEM) {
      ++full;
      std::this_thread::yield();
      continue;
    }
    ASSERT_EQ(err, 0);
    ++i;
  }
  poller.join();
  device.join();
  EXPECT_EQ(polled.load(), kWrs);
  RecordProperty("sq_full_retries", static_cast<int>(full));
}

}  // namespace
}  // namespace softhca::driver::testing
