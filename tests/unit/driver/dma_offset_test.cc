// The driver and the real device model (src/hca) with DMA addresses that are not pointers: the
// fake host kernel gives addresses of process slot 5 ((5 << 52) | va, docs/live-mode.md), and the
// device reaches host memory only through a bridge that resolves those and nothing else. An RDMA
// write between two QPs of one device (its port looped back) and a completion event then work
// only if every address the driver handed the device — rings, doorbell records, the EQ, the
// registered memory — is a DMA address from the kernel, and the interrupt is the kernel's vector.
// Single-threaded: packets are handed back to the device by the test.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <deque>
#include <vector>

#include "driver/provider.h"
#include "fake_kernel.h"
#include "hca/device.h"
#include "hca/device_config.h"
#include "hca/device_state.h"
#include "pcie/counters.h"
#include "pcie/host_bridge.h"
#include "pcie/host_port.h"

namespace softhca::driver::testing {
namespace {

// The root complex of a process in slot FakeKernel::kSlot: DMA addresses of that slot that the
// kernel handed out resolve; anything else (a pointer, slot 0) is a DMA fault.
class SlotBridge final : public pcie::HostBridge {
 public:
  explicit SlotBridge(FakeKernel& kernel) : kernel_(kernel) {}
  std::span<uint8_t> map(uint64_t dma_addr, size_t len) override {
    uint8_t* p = kernel_.host(dma_addr);
    if (p == nullptr) {
      ++faults;
      return {};
    }
    return {p, len};
  }
  void deliver_msi(uint64_t vector) override {
    ++msis;
    kernel_.raise(vector);
  }
  int faults = 0;
  int msis = 0;

 private:
  FakeKernel& kernel_;
};

class Loop final : public hca::PacketPort, public hca::EngineClock {
 public:
  void transmit(std::span<const uint8_t> packet) override { queue.emplace_back(packet.begin(), packet.end()); }
  Picoseconds now() override { return Picoseconds{0}; }
  void request_wakeup(Picoseconds /*at*/) override {}
  void pump(hca::Device& dev) {
    for (int n = 0; !queue.empty() && n < 10000; ++n) {
      const std::vector<uint8_t> p = std::move(queue.front());
      queue.pop_front();
      dev.receive(p);
    }
  }
  std::deque<std::vector<uint8_t>> queue;
};

struct Rig {
  FakeKernel kernel;
  SlotBridge bridge{kernel};
  Loop loop;
  pcie::Counters counters;
  hca::DeviceConfig config = hca::default_device_config(0);
  hca::PrivateRegion region{hca::Device::default_region_bytes(config)};
  hca::Device dev{config, region.region(), hca::RegionInit::kFormat, counters, loop, loop, bridge};
  pcie::HostPort port{dev, counters, config.pcie};
  ibv_device device{};
};

int to_rts(ibv_qp* qp, uint32_t dest_qpn, uint16_t dlid) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (int e = modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS); e != 0) return e;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.ah_attr.dlid = dlid;
  a.ah_attr.port_num = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  if (int e = modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
      e != 0)
    return e;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                               IBV_QP_MAX_QP_RD_ATOMIC);
}

ibv_qp* rc_qp(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 8;
  a.cap.max_recv_wr = 8;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  return create_qp(pd, &a, 0);
}

TEST(DmaOffset, AnRdmaWriteAndItsCompletionEventWorkWhenDmaAddressesAreNotPointers) {
  Rig r;
  DeviceLink link;
  link.host_port = &r.port;
  link.cmd = &r.dev;
  link.blueflame = BlueFlameMode::kOff;  // the WQE from the ring, by DMA
  link.kernel = &r.kernel;
  verbs_context* v = open_context(&r.device, link, -1, -1);
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
