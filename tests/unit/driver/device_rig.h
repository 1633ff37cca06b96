// The driver on the real device model (src/hca) for the driver's unit tests, single-threaded:
// a fake host kernel whose DMA addresses are not pointers (process slot FakeKernel::kSlot), a
// bridge that resolves only those, a port looped back by the test (pump) and a clock that stands where the test puts it (0 at first).
// Leaves out: timers (nothing here is lost, so nothing is retransmitted). Sizes in bytes.
#pragma once
#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <span>
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
  Picoseconds now() override { return t; }
  void request_wakeup(Picoseconds at) override { wakeups.push_back(at); }
  int64_t wall_clock_ns(Picoseconds at) override { return at.count() / 1000 + wall_offset_ns; }
  void pump(hca::Device& dev) {
    for (int n = 0; !queue.empty() && n < 10000; ++n) {
      const std::vector<uint8_t> p = std::move(queue.front());
      queue.pop_front();
      dev.receive(p);
    }
  }
  std::deque<std::vector<uint8_t>> queue;
  Picoseconds t{0};              // the time the clock stands at (a test moves it)
  int64_t wall_offset_ns = 0;    // wall clock [ns] at engine time 0
  std::vector<Picoseconds> wakeups;  // every wake-up the device asked for
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

// The driver's context on the rig's device (BlueFlame off, so every doorbell is one MWr); nullptr
// if it would not open.
inline ibv_context* open_rig_context(Rig& r) {
  DeviceLink link;
  link.host_port = &r.port;
  link.cmd = &r.dev;
  link.blueflame = BlueFlameMode::kOff;
  link.kernel = &r.kernel;
  verbs_context* v = open_context(&r.device, link, -1);
  return v == nullptr ? nullptr : &v->context;
}

inline int to_rts(ibv_qp* qp, uint32_t dest_qpn, uint16_t dlid) {
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

inline ibv_qp* rc_qp(ibv_pd* pd, ibv_cq* cq, uint32_t max_send_wr = 8) {
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = max_send_wr;
  a.cap.max_recv_wr = 8;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  return create_qp(pd, &a, 0);
}

}  // namespace softhca::driver::testing
