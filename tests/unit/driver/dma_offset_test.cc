// The driver and the real device model (src/hca) with DMA addresses that are not pointers: the
// fake host kernel gives addresses of process slot 5 ((5 << 52) | va, docs/live-mode.md), and the
// device reaches host memory only through a bridge that resolves those and nothing else. An RDMA
// write between two QPs of one device (its port looped back) and a completion event then work
// only if every address the driver handed the device — rings, doorbell records, the EQ, the
// registered memory — is a DMA address from the kernel, and the interrupt is the kernel's vector.
// Single-threaded: packets are handed back to the device by the test.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "device_rig.h"
#include "driver/provider.h"

namespace softhca::driver::testing {
namespace {

TEST(DmaOffset, AnRdmaWriteAndItsCompletionEventWorkWhenDmaAddressesAreNotPointers) {
  Rig r;
  DeviceLink link;
  link.host_port = &r.port;
  link.cmd = &r.dev;
  link.blueflame = BlueFlameMode::kOff;  // the WQE from the ring, by DMA
  link.kernel = &r.kernel;
  verbs_context* v = open_context(&r.device, link, -1);
  ASSERT_NE(v, nullptr);
  ibv_context* ctx = &v->context;
  ibv_pd* pd = alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  ibv_comp_channel* ch = create_comp_channel(ctx);
  ASSERT_NE(ch, nullptr);
  ibv_cq* cq = create_cq(ctx, 15, ch, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp* a = rc_qp(pd, cq);
  ibv_qp* b = rc_qp(pd, cq);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const uint16_t lid = r.dev.lid();
  ASSERT_EQ(to_rts(a, b->qp_num, lid), 0);
  ASSERT_EQ(to_rts(b, a->qp_num, lid), 0);

  std::vector<uint8_t> src(3000), dst(3000, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  ibv_mr* smr = reg_mr(pd, src.data(), src.size(), reinterpret_cast<uintptr_t>(src.data()), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dmr = reg_mr(pd, dst.data(), dst.size(), reinterpret_cast<uintptr_t>(dst.data()),
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(smr, nullptr);
  ASSERT_NE(dmr, nullptr);

  ASSERT_EQ(req_notify_cq(cq, 0), 0);
  ibv_sge sge{reinterpret_cast<uintptr_t>(src.data()), static_cast<uint32_t>(src.size()), smr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 42;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst.data());
  wr.wr.rdma.rkey = dmr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(a, &wr, &bad), 0);
  r.loop.pump(r.dev);

  ibv_wc wc{};
  ASSERT_EQ(poll_cq(cq, 1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 42u);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(r.bridge.faults, 0);
  EXPECT_EQ(r.bridge.msis, 1);

  // The device raised the channel's vector: the event is there without blocking.
  ibv_cq* got = nullptr;
  void* cq_ctx = nullptr;
  ASSERT_EQ(get_cq_event(ch, &got, &cq_ctx), 0);
  EXPECT_EQ(got, cq);
  ack_cq_events(cq, 1);

  EXPECT_EQ(dereg_mr(smr), 0);
  EXPECT_EQ(dereg_mr(dmr), 0);
  EXPECT_EQ(destroy_qp(a), 0);
  EXPECT_EQ(destroy_qp(b), 0);
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(destroy_comp_channel(ch), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
  EXPECT_EQ(close_context(ctx), 0);
  EXPECT_EQ(r.kernel.buffers_held(), 0u);
  EXPECT_EQ(r.kernel.pins_held(), 0u);
  EXPECT_EQ(r.kernel.vectors_held(), 0u);
  EXPECT_EQ(r.kernel.mismatches, 0);
}

}  // namespace
}  // namespace softhca::driver::testing
