// A send WQE that lies about its size (found by tests/fuzz/wqe_parse_fuzz): the control segment
// claims more basic blocks than the doorbell rang. The device must fail that WQE alone, put the QP
// in error and stop at the producer index, not walk the whole 16-bit WQE index space.
#include <gtest/gtest.h>

#include "device_harness.h"

namespace softhca::test {
namespace {

using hwif::CqeOpcode;
using hwif::CqeSyndrome;
using hwif::WqeOpcode;

TEST(HostileWqe, AWqeClaimingMoreBlocksThanWereRungFailsAloneAndTheFlushStopsAtTheProducer) {
  DeviceHarness h;
  ASSERT_EQ(h.connect(500, 100), 0);
  h.post_overlong(16);  // 16 units: 256 bytes, 4 basic blocks; 1 rung
  // Expect: one error CQE (local QP operation error), nothing sent, the QP in error.
  auto cqes = h.take_cqes();
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].opcode, CqeOpcode::kReqErr);
  EXPECT_EQ(cqes[0].syndrome, static_cast<uint8_t>(CqeSyndrome::kLocQpOpErr));
  EXPECT_EQ(cqes[0].wqe_counter, 0u);
  EXPECT_EQ(h.device().stats().cqes_written, 1u);  // not one flush per index of the 16-bit space
  EXPECT_EQ(h.device().stats().cq_overruns, 0u);
  EXPECT_TRUE(h.take_sent().empty());
  hwif::QueryQpOut q{};
  ASSERT_EQ(hwif::exec_cmd(h.device(), hwif::QueryQpIn{h.qpn()}, q), 0);
  EXPECT_EQ(q.attr.state, hwif::QpState::kErr);
  // Expect: the next WQE rung is flushed, exactly once, at the index right after the bad one.
  h.post(WqeOpcode::kSend, 8, 0, 0);
  cqes = h.take_cqes();
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].syndrome, static_cast<uint8_t>(CqeSyndrome::kWrFlushErr));
  EXPECT_EQ(cqes[0].wqe_counter, 1u);
  EXPECT_EQ(h.device().stats().cqes_written, 2u);
  EXPECT_TRUE(h.take_sent().empty());
}

}  // namespace
}  // namespace softhca::test
