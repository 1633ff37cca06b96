// The driver gets its memory and interrupts from the host kernel (pcie/host_kernel.h): rings,
// doorbell records and event queues from alloc_coherent, registered memory pinned with pin_user,
// completion channels' interrupts from alloc_vector. The fake kernel's DMA addresses are not
// pointers (slot 5 of the live runtimes' layout), so every address the device is told must be one
// the kernel gave. Every create is balanced by its destroy, and every failure gives back what was
// taken.
#include <fcntl.h>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <thread>
#include <vector>

#include "fake_device.h"
#include "fake_kernel.h"
#include "pcie/host_bridge.h"
#include "test_util.h"

namespace softhca::driver::testing {
namespace {

struct Held {
  size_t buffers, pins, vectors;
  bool operator==(const Held&) const = default;
};
Held held(const FakeKernel& k) { return {k.buffers_held(), k.pins_held(), k.vectors_held()}; }
std::ostream& operator<<(std::ostream& os, const Held& h) {
  return os << "{buffers " << h.buffers << ", pins " << h.pins << ", vectors " << h.vectors << "}";
}

bool is_kernel_dma(const DeviceHarness& h, uint64_t dma) {
  return pcie::dma_slot(dma) == FakeKernel::kSlot && h.kernel.host(dma) != nullptr;
}

TEST(HostKernel, EveryObjectKindTakesItsMemoryAndVectorsFromTheKernelAndGivesThemBackOnDestroy) {
  DeviceHarness h;
  // The context holds its async EQ: a ring and a vector.
  ASSERT_EQ(held(h.kernel), (Held{1, 0, 1}));

  ibv_comp_channel* ch = create_comp_channel(h.ctx());
  ASSERT_NE(ch, nullptr);
  EXPECT_EQ(held(h.kernel), (Held{2, 0, 2}));  // the EQ ring and one vector
  EXPECT_EQ(h.kernel.bytes_held(), 1024u * 16u + 256u * 16u);  // 1024 EQEs of 16 bytes, + the async EQ's 256

  ibv_cq* cq = create_cq(h.ctx(), 15, ch, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(held(h.kernel), (Held{4, 0, 2}));  // + CQ ring and doorbell record

  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 7;
  sa.attr.max_sge = 1;
  ibv_srq* srq = create_srq(h.pd(), &sa);
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(held(h.kernel), (Held{6, 0, 2}));  // + SRQ ring and doorbell record

  ibv_qp* rc = h.qp(IBV_QPT_RC, 16, 1, 0, 0, false, cq);
  ASSERT_NE(rc, nullptr);
  EXPECT_EQ(held(h.kernel), (Held{9, 0, 2}));  // + SQ, RQ and doorbell record
  ibv_qp* on_srq = h.qp(IBV_QPT_RC, 16, 1, 0, 0, false, cq, 16, 1, srq);
  ASSERT_NE(on_srq, nullptr);
  EXPECT_EQ(held(h.kernel), (Held{11, 0, 2}));  // + SQ and doorbell record, no RQ

  std::array<uint8_t, 64> buf{};
  ibv_mr* mr = reg_mr(h.pd(), buf.data(), buf.size(), addr_of(buf.data()), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(held(h.kernel), (Held{11, 1, 2}));

  ibv_ah_attr aa{};
  aa.dlid = 3;
  aa.port_num = 1;
  ibv_ah* ah = create_ah(h.pd(), &aa);
  ASSERT_NE(ah, nullptr);
  EXPECT_EQ(held(h.kernel), (Held{11, 1, 2}));  // an AH lives in the driver only

  EXPECT_EQ(destroy_ah(ah), 0);
  EXPECT_EQ(dereg_mr(mr), 0);
  EXPECT_EQ(held(h.kernel), (Held{11, 0, 2}));
  EXPECT_EQ(h.destroy(on_srq), 0);
  EXPECT_EQ(h.destroy(rc), 0);
  EXPECT_EQ(held(h.kernel), (Held{6, 0, 2}));
  EXPECT_EQ(destroy_srq(srq), 0);
  EXPECT_EQ(held(h.kernel), (Held{4, 0, 2}));
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(held(h.kernel), (Held{2, 0, 2}));
  EXPECT_EQ(destroy_comp_channel(ch), 0);
  EXPECT_EQ(held(h.kernel), (Held{1, 0, 1}));
  EXPECT_EQ(h.kernel.calls.alloc, 11);  // the async EQ's ring too, freed when the context closes
  EXPECT_EQ(h.kernel.calls.free, 10);
  EXPECT_EQ(h.kernel.calls.alloc_vector, 2);
  EXPECT_EQ(h.kernel.calls.free_vector, 1);
  EXPECT_EQ(h.kernel.mismatches, 0);
}

TEST(HostKernel, TheDeviceIsToldDmaAddressesTheKernelGaveNeverPointers) {
  DeviceHarness h;
  ibv_comp_channel* ch = create_comp_channel(h.ctx());
  ASSERT_NE(ch, nullptr);
  ibv_cq* cq = create_cq(h.ctx(), 15, ch, 0);
  ASSERT_NE(cq, nullptr);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 3;
  sa.attr.max_sge = 1;
  ibv_srq* srq = create_srq(h.pd(), &sa);
  ASSERT_NE(srq, nullptr);
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 1, 0, 0, false, cq);
  ASSERT_NE(qp, nullptr);

  const hwif::CreateEqIn& eq = h.dev.eqs.begin()->second;
  EXPECT_TRUE(is_kernel_dma(h, eq.ring_addr));
  const hwif::CreateCqIn& c = h.dev.cqs.at(cq->handle);
  EXPECT_TRUE(is_kernel_dma(h, c.ring_addr));
  EXPECT_TRUE(is_kernel_dma(h, c.dbrec_addr));
  const hwif::CreateSrqIn& s = h.dev.srqs.at(srq->handle);
  EXPECT_TRUE(is_kernel_dma(h, s.ring_addr));
  EXPECT_TRUE(is_kernel_dma(h, s.dbrec_addr));
  const hwif::CreateQpIn& q = h.dev.qps.at(qp->qp_num);
  EXPECT_TRUE(is_kernel_dma(h, q.sq_addr));
  EXPECT_TRUE(is_kernel_dma(h, q.rq_addr));
  EXPECT_TRUE(is_kernel_dma(h, q.dbrec_addr));

  // What the driver wrote is what the device finds there: a posted receive in the RQ.
  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 0x55};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  h.to_state(qp, IBV_QPS_INIT);
  ASSERT_EQ(post_recv(qp, &wr, &bad), 0);
  EXPECT_EQ(seg_at<hwif::DataSeg>(h.host(q.rq_addr)).lkey.get(), 0x55u);
  EXPECT_EQ(seg_at<hwif::DataSeg>(h.host(q.rq_addr)).addr.get(), addr_of(buf.data()));  // an iova, as the app gave it

  EXPECT_EQ(h.destroy(qp), 0);
  EXPECT_EQ(destroy_srq(srq), 0);
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(destroy_comp_channel(ch), 0);
}

TEST(HostKernel, RegistrationPinsTheRangeTellsTheDeviceItsDmaAddressAndKeepsTheIova) {
  DeviceHarness h;
  std::vector<uint8_t> buf(10000);
  ibv_mr* mr = reg_mr(h.pd(), buf.data() + 3, 9000, 0x40000, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  const hwif::CreateMkeyIn& in = h.dev.mkeys.at(mr->lkey);
  EXPECT_EQ(in.host_addr, pcie::dma_address(FakeKernel::kSlot, addr_of(buf.data() + 3)));
  EXPECT_EQ(in.iova, 0x40000u);
  EXPECT_EQ(in.length, 9000u);
  EXPECT_EQ(h.host(in.host_addr), buf.data() + 3);
  EXPECT_EQ(mr->addr, buf.data() + 3);  // the application still sees its own address
  EXPECT_EQ(h.kernel.pins_held(), 1u);

  // Registering the same range again nests; each deregistration undoes one.
  ibv_mr* again = reg_mr(h.pd(), buf.data() + 3, 9000, 0x40000, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(h.kernel.pins_held(), 2u);
  EXPECT_EQ(dereg_mr(mr), 0);
  EXPECT_EQ(h.kernel.pins_held(), 1u);
  EXPECT_EQ(dereg_mr(again), 0);
  EXPECT_EQ(h.kernel.pins_held(), 0u);
  EXPECT_EQ(h.kernel.calls.unpin, 2);
}

TEST(HostKernel, ARegistrationPinsForWritingExactlyWhenOneOfItsRightsLetsTheDeviceStore) {
  DeviceHarness h;
  std::vector<uint8_t> buf(64);
  struct Case {
    unsigned int access;
    pcie::PinAccess pinned;
  };
  // The rights the kernel's ib_access_writable() counts; remote read alone and none read only.
  for (const Case c : {Case{0, pcie::PinAccess::kRead}, Case{IBV_ACCESS_REMOTE_READ, pcie::PinAccess::kRead},
                       Case{IBV_ACCESS_LOCAL_WRITE, pcie::PinAccess::kWrite},
                       Case{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, pcie::PinAccess::kWrite},
                       Case{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC, pcie::PinAccess::kWrite},
                       Case{IBV_ACCESS_MW_BIND, pcie::PinAccess::kWrite}}) {
    ibv_mr* mr = reg_mr(h.pd(), buf.data(), buf.size(), addr_of(buf.data()), c.access);
    ASSERT_NE(mr, nullptr) << c.access;
    EXPECT_EQ(h.kernel.last_pin_access, c.pinned) << "access " << c.access;
    EXPECT_EQ(dereg_mr(mr), 0);
  }
  EXPECT_EQ(h.kernel.mismatches, 0);
}

TEST(HostKernel, AZeroLengthRegistrationIsPinnedAndUnpinnedToo) {
  DeviceHarness h;
  uint8_t byte = 0;
  ibv_mr* mr = reg_mr(h.pd(), &byte, 0, addr_of(&byte), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  EXPECT_EQ(h.kernel.pins_held(), 1u);
  EXPECT_EQ(dereg_mr(mr), 0);
  EXPECT_EQ(h.kernel.pins_held(), 0u);
}

TEST(HostKernel, AFailedPinFailsRegistrationWithTheKernelsErrnoAndCreatesNoKey) {
  DeviceHarness h;
  std::array<uint8_t, 64> buf{};
  h.kernel.fail_pin = EFAULT;
  errno = 0;
  EXPECT_EQ(reg_mr(h.pd(), buf.data(), buf.size(), addr_of(buf.data()), IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_TRUE(h.dev.mkeys.empty());
  EXPECT_EQ(h.kernel.pins_held(), 0u);
  EXPECT_EQ(h.kernel.calls.unpin, 0);
}

TEST(HostKernel, ARegistrationTheDeviceRefusesIsUnpinned) {
  DeviceHarness h;
  std::array<uint8_t, 64> buf{};
  h.dev.fail_op = hwif::CmdOpcode::kCreateMkey;
  h.dev.fail_err = ENOSPC;
  errno = 0;
  EXPECT_EQ(reg_mr(h.pd(), buf.data(), buf.size(), addr_of(buf.data()), IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, ENOSPC);
  EXPECT_EQ(h.kernel.calls.pin, 1);
  EXPECT_EQ(h.kernel.calls.unpin, 1);
  EXPECT_EQ(h.kernel.pins_held(), 0u);
}

TEST(HostKernel, ADeregistrationTheDeviceRefusesKeepsThePin) {
  DeviceHarness h;
  std::array<uint8_t, 64> buf{};
  ibv_mr* mr = reg_mr(h.pd(), buf.data(), buf.size(), addr_of(buf.data()), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  h.dev.fail_op = hwif::CmdOpcode::kDestroyMkey;
  h.dev.fail_err = EBUSY;
  EXPECT_EQ(dereg_mr(mr), EBUSY);
  EXPECT_EQ(h.kernel.pins_held(), 1u);  // the device may still reach the pages
  EXPECT_EQ(dereg_mr(mr), 0);
  EXPECT_EQ(h.kernel.pins_held(), 0u);
}

TEST(HostKernel, WhenTheKernelHasNoMemoryEveryCreateFailsWithItsErrnoAndLeavesNothing) {
  DeviceHarness h;
  h.kernel.fail_alloc = ENOMEM;
  EXPECT_EQ(create_cq(h.ctx(), 15, nullptr, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  h.kernel.fail_alloc = ENOMEM;
  EXPECT_EQ(create_comp_channel(h.ctx()), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  h.kernel.fail_alloc = ENOMEM;
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 3;
  sa.attr.max_sge = 1;
  EXPECT_EQ(create_srq(h.pd(), &sa), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ibv_cq* cq = h.cq();
  h.kernel.fail_alloc = ENOMEM;
  ibv_qp_init_attr qa{};
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 4;
  qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  EXPECT_EQ(create_qp(h.pd(), &qa, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(held(h.kernel), (Held{3, 0, 1}));  // only the CQ made after the failures
  EXPECT_TRUE(h.dev.eqs.empty());
  EXPECT_TRUE(h.dev.srqs.empty());
  EXPECT_TRUE(h.dev.qps.empty());
  EXPECT_EQ(h.dev.cqs.size(), 1u);
}

TEST(HostKernel, AChannelWithoutAVectorOrRefusedByTheDeviceGivesBackItsRingAndVector) {
  DeviceHarness h;
  h.kernel.fail_vector = EMFILE;
  errno = 0;
  EXPECT_EQ(create_comp_channel(h.ctx()), nullptr);
  EXPECT_EQ(errno, EMFILE);
  EXPECT_EQ(held(h.kernel), (Held{1, 0, 1}));

  h.dev.fail_op = hwif::CmdOpcode::kCreateEq;
  h.dev.fail_err = ENOSPC;
  EXPECT_EQ(create_comp_channel(h.ctx()), nullptr);
  EXPECT_EQ(errno, ENOSPC);
  EXPECT_EQ(held(h.kernel), (Held{1, 0, 1}));
  EXPECT_EQ(h.kernel.calls.free_vector, 1);
  EXPECT_EQ(h.kernel.mismatches, 0);
}

TEST(HostKernel, GetCqEventWaitsOnTheKernelsVectorAndTheDevicesMsiWakesIt) {
  DeviceHarness h;
  ibv_comp_channel* ch = create_comp_channel(h.ctx());
  ASSERT_NE(ch, nullptr);
  ibv_cq* cq = create_cq(h.ctx(), 15, ch, 0);
  ASSERT_NE(cq, nullptr);
  const hwif::CreateEqIn eq = h.dev.eqs.begin()->second;
  ibv_cq* got = nullptr;
  std::thread waiter([&] {
    void* c = nullptr;
    EXPECT_EQ(get_cq_event(ch, &got, &c), 0);
  });
  // The device: the EQE first, then the MSI-X write of the channel's vector.
  auto* e = h.host<hwif::Eqe>(eq.ring_addr);
  e->type = hwif::kEqeTypeCompletion;
  e->element = cq->handle;
  std::atomic_ref<uint8_t>(e->owner).store(0, std::memory_order_release);
  h.kernel.raise(eq.msi_vector);
  waiter.join();
  EXPECT_EQ(got, cq);
  EXPECT_LE(h.kernel.calls.wait, 1);  // 0 when the EQE was seen before waiting
  ack_cq_events(cq, 1);
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(destroy_comp_channel(ch), 0);
  EXPECT_EQ(h.kernel.vectors_held(), 1u);  // the context's async EQ's, until it closes
}

TEST(HostKernel, GetCqEventWithNothingPendingAsksTheKernelOnceAndReportsItsEagain) {
  DeviceHarness h;
  ibv_comp_channel* ch = create_comp_channel(h.ctx());
  ASSERT_NE(ch, nullptr);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
  ibv_cq* got = nullptr;
  void* c = nullptr;
  errno = 0;
  EXPECT_EQ(get_cq_event(ch, &got, &c), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(h.kernel.calls.wait, 1);
  EXPECT_EQ(destroy_comp_channel(ch), 0);
}

TEST(HostKernel, AContextNeedsAKernel) {
  FakeDevice dev;
  pcie::Counters counters;
  pcie::PcieConfig config;
  pcie::HostPort port{dev, counters, config};
  DeviceLink link;
  link.host_port = &port;
  link.cmd = &dev;
  ibv_device device{};
  errno = 0;
  EXPECT_EQ(open_context(&device, link, -1), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softhca::driver::testing
