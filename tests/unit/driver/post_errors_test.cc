// What post_send/post_recv/post_srq_recv refuse, with which errno, and where *bad_wr points.
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <vector>

#include "fake_device.h"
#include "test_util.h"

namespace softhca::driver::testing {
namespace {

TEST(PostErrors, InlineDataAboveMaxInlineIsEnomemAndTheWrsBeforeItAreStillRung) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC);  // legacy RC, 1 SGE: one-block WQEs, max_inline_data 12
  h.to_rts(qp);
  std::array<uint8_t, 13> payload{};
  ibv_sge ok{addr_of(payload.data()), 12, 0};
  ibv_sge big{addr_of(payload.data()), 13, 0};
  std::vector<ibv_send_wr> wrs{send_wr(1, &ok, 1, IBV_WR_SEND, IBV_SEND_INLINE),
                               send_wr(2, &big, 1, IBV_WR_SEND, IBV_SEND_INLINE),
                               send_wr(3, &ok, 1, IBV_WR_SEND, IBV_SEND_INLINE)};
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post_send(qp, link(wrs), &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[1]);
  ASSERT_EQ(h.dev.mmio.size(), 1u);  // the first WR alone: BlueFlame (inline, single)
  EXPECT_EQ(h.qp_dbrec(qp)->sq_counter.get(), 1u);  // 16 + 4 + 12 = 32 B: 1 BB
}

TEST(PostErrors, MoreSgesThanMaxSendSgeIsEnomemAsOnMlx5) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 2);
  h.to_rts(qp);
  std::array<uint8_t, 8> buf{};
  std::array<ibv_sge, 3> sges{{{addr_of(buf.data()), 8, 1}, {addr_of(buf.data()), 8, 1}, {addr_of(buf.data()), 8, 1}}};
  ibv_send_wr wr = send_wr(1, sges.data(), 3);
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post_send(qp, &wr, &bad), ENOMEM);
  EXPECT_EQ(bad, &wr);
  EXPECT_TRUE(h.dev.mmio.empty());
}

TEST(PostErrors, AFullSendQueueIsEnomem) {
  DeviceHarness h;
  ibv_qp_init_attr probe{};
  ibv_qp* qp = h.qp(IBV_QPT_RC, 4);
  h.to_rts(qp);
  ibv_qp_attr attr{};
  ASSERT_EQ(query_qp(qp, &attr, IBV_QP_CAP, &probe), 0);
  const uint32_t max_post = attr.cap.max_send_wr;
  ASSERT_GE(max_post, 4u);
  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 1};
  std::vector<ibv_send_wr> wrs(max_post + 1, send_wr(0, &sge, 1));
  for (size_t i = 0; i < wrs.size(); ++i) wrs[i].wr_id = i;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post_send(qp, link(wrs), &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[max_post]);
  EXPECT_EQ(h.qp_dbrec(qp)->sq_counter.get(), max_post);
  ibv_send_wr one = send_wr(9, &sge, 1);
  EXPECT_EQ(post_send(qp, &one, &bad), ENOMEM);
}

TEST(PostErrors, SendingOnAResetOrInitQpIsEinvalAndOnRtrOrRtsIsAccepted) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC);
  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 1};
  ibv_send_wr wr = send_wr(1, &sge, 1);
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post_send(qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  h.to_state(qp, IBV_QPS_INIT);
  EXPECT_EQ(post_send(qp, &wr, &bad), EINVAL);
  h.to_state(qp, IBV_QPS_RTR);
  h.to_state(qp, IBV_QPS_RTS);
  EXPECT_EQ(post_send(qp, &wr, &bad), 0);
}

TEST(PostErrors, ReceivingOnAResetQpIsEinvalAndOnAnInitQpIsAccepted) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC);
  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 1};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_recv(qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  h.to_state(qp, IBV_QPS_INIT);
  EXPECT_EQ(ibv_post_recv(qp, &wr, &bad), 0);
  EXPECT_EQ(h.qp_dbrec(qp)->rq_counter.get(), 1u);
}

TEST(PostErrors, AFullReceiveQueueIsEnomemAndTooManySgesIsEinval) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 1, 0, 0, false, nullptr, /*max_recv_wr=*/4, /*max_recv_sge=*/1);
  h.to_state(qp, IBV_QPS_INIT);
  std::array<uint8_t, 8> buf{};
  std::array<ibv_sge, 2> sges{{{addr_of(buf.data()), 8, 1}, {addr_of(buf.data()), 8, 1}}};
  std::vector<ibv_recv_wr> wrs(5);
  for (size_t i = 0; i < wrs.size(); ++i) {
    wrs[i].wr_id = i;
    wrs[i].sg_list = sges.data();
    wrs[i].num_sge = 1;
    wrs[i].next = i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(post_recv(qp, wrs.data(), &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[4]);
  EXPECT_EQ(h.qp_dbrec(qp)->rq_counter.get(), 4u);

  DeviceHarness h2;
  ibv_qp* qp2 = h2.qp(IBV_QPT_RC, 16, 1, 0, 0, false, nullptr, 4, 1);
  h2.to_state(qp2, IBV_QPS_INIT);
  ibv_recv_wr two{};
  two.sg_list = sges.data();
  two.num_sge = 2;
  EXPECT_EQ(post_recv(qp2, &two, &bad), EINVAL);
  EXPECT_EQ(bad, &two);
}

TEST(PostErrors, TheFailingWrInTheMiddleOfAListIsReported) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_UC);
  h.to_rts(qp);
  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 1};
  std::vector<ibv_send_wr> wrs{write_wr(1, &sge, 0x1000, 2), write_wr(2, &sge, 0x1000, 2), write_wr(3, &sge, 0x1000, 2)};
  wrs[1].opcode = IBV_WR_RDMA_READ;  // not on UC
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post_send(qp, link(wrs), &bad), EINVAL);
  EXPECT_EQ(bad, &wrs[1]);
  EXPECT_EQ(h.qp_dbrec(qp)->sq_counter.get(), 1u);
  ASSERT_EQ(h.dev.mmio.size(), 1u);
}

TEST(PostErrors, AtomicsAndWritesOnUdAndUnsupportedOpcodesAreEinval) {
  DeviceHarness h;
  ibv_qp* ud = h.qp(IBV_QPT_UD);
  h.to_rts(ud);
  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 1};
  ibv_send_wr* bad = nullptr;
  ibv_send_wr wr = write_wr(1, &sge, 0x1000, 2);
  EXPECT_EQ(post_send(ud, &wr, &bad), EINVAL);
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  EXPECT_EQ(post_send(ud, &wr, &bad), EINVAL);
  ibv_send_wr no_ah = send_wr(1, &sge, 1);
  EXPECT_EQ(post_send(ud, &no_ah, &bad), EINVAL);
  // SEND with invalidate is RC's and XRC's; windows are bound on connected QPs only.
  ibv_send_wr inv = send_wr(1, &sge, 1, IBV_WR_SEND_WITH_INV);
  EXPECT_EQ(post_send(ud, &inv, &bad), EINVAL);
  ibv_send_wr local_inv = send_wr(1, &sge, 0, IBV_WR_LOCAL_INV);
  EXPECT_EQ(post_send(ud, &local_inv, &bad), EINVAL);

  ibv_qp* rc = h.qp(IBV_QPT_RC);
  h.to_rts(rc);
  ibv_send_wr tso = send_wr(1, &sge, 1, IBV_WR_TSO);
  EXPECT_EQ(post_send(rc, &tso, &bad), EINVAL);
  ibv_send_wr bind_nothing = send_wr(1, &sge, 0, IBV_WR_BIND_MW);  // bind_mw.mw is NULL
  EXPECT_EQ(post_send(rc, &bind_nothing, &bad), EINVAL);
  ibv_send_wr no_sge_atomic = send_wr(1, &sge, 0, IBV_WR_ATOMIC_CMP_AND_SWP);
  EXPECT_EQ(post_send(rc, &no_sge_atomic, &bad), EINVAL);
  EXPECT_TRUE(h.dev.mmio.empty());
}

TEST(PostErrors, AnSrqRefusesMoreThanItsDepthAndTooManySges) {
  DeviceHarness h;
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 3;  // 4 WQEs, one of them the sentinel
  sa.attr.max_sge = 1;
  ibv_srq* srq = create_srq(h.pd(), &sa);
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(sa.attr.max_wr, 3u);
  std::array<uint8_t, 8> buf{};
  std::array<ibv_sge, 2> sges{{{addr_of(buf.data()), 8, 1}, {addr_of(buf.data()), 8, 1}}};
  std::vector<ibv_recv_wr> wrs(4);
  for (size_t i = 0; i < wrs.size(); ++i) {
    wrs[i].wr_id = i;
    wrs[i].sg_list = sges.data();
    wrs[i].num_sge = 1;
    wrs[i].next = i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(srq, wrs.data(), &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[3]);
  ibv_recv_wr two{};
  two.sg_list = sges.data();
  two.num_sge = 2;
  EXPECT_EQ(post_srq_recv(srq, &two, &bad), EINVAL);
  EXPECT_EQ(destroy_srq(srq), 0);
}

}  // namespace
}  // namespace softhca::driver::testing
