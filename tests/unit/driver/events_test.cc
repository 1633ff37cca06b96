// Completion events: arming a CQ (doorbell record + CQ doorbell), the event queue behind a
// completion channel, and get_cq_event with a hand-written EQE and a raised vector.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "fake_device.h"
#include "test_util.h"

namespace softhca::driver::testing {
namespace {

constexpr uint64_t kCqDoorbell = hwif::uar_page_offset(0) + hwif::kCqDoorbellOffset;  // 0x1020

// The device's EQE writer, by hand: owner = pass & 1, written last.
void write_eqe(const DeviceHarness& h, const hwif::CreateEqIn& eq, uint32_t index, uint32_t cqn) {
  auto* ring = h.host<hwif::Eqe>(eq.ring_addr);
  hwif::Eqe& e = ring[index & ((1u << eq.log_nent) - 1)];
  e.type = hwif::kEqeTypeCompletion;
  e.element = cqn;
  std::atomic_ref<uint8_t>(e.owner).store(static_cast<uint8_t>((index >> eq.log_nent) & 1), std::memory_order_release);
}


TEST(Events, ArmingWritesTheArmWordToTheRecordAndRingsTheCqDoorbellWithCqn) {
  DeviceHarness h;
  ibv_cq* cq = h.cq();
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  ASSERT_EQ(h.dev.mmio.size(), 1u);
  EXPECT_EQ(h.dev.mmio[0].offset, kCqDoorbell);
  ASSERT_EQ(h.dev.mmio[0].bytes.size(), 8u);
  EXPECT_EQ(be32_at(h.dev.mmio[0].bytes.data()), 0u);  // sn 0, any completion, ci 0
  EXPECT_EQ(be32_at(h.dev.mmio[0].bytes.data() + 4), cq->handle);
  EXPECT_EQ(h.cq_dbrec(cq)->arm.get(), 0u);

  ASSERT_EQ(req_notify_cq(cq, 1), 0);
  EXPECT_EQ(be32_at(h.dev.mmio[1].bytes.data()), hwif::kCqArmSolicited);
  EXPECT_EQ(h.counters.snapshot().tlps(pcie::TlpType::kMWr, pcie::TlpCause::kCqArm), 2u);
}

TEST(Events, GetCqEventReturnsTheCqNamedByTheEqeAndTheNextArmUsesTheNextSequenceNumber) {
  DeviceHarness h;
  ibv_comp_channel* ch = create_comp_channel(h.ctx());
  ASSERT_NE(ch, nullptr);
  EXPECT_EQ(ch->context, h.ctx());
  ASSERT_EQ(h.dev.eqs.size(), 1u);
  const auto& [eqn, eq] = *h.dev.eqs.begin();
  EXPECT_EQ(eq.msi_vector, FakeKernel::kVectorBase + 1);  // the vector the host kernel gave (after the async EQ's), not the fd
  EXPECT_EQ(fcntl(ch->fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);

  ibv_cq* cq = create_cq(h.ctx(), 15, ch, 1);
  ASSERT_NE(cq, nullptr);
  int tag = 0;
  cq->cq_context = &tag;  // what ibv_create_cq's cq_context argument sets (verbs layer)
  EXPECT_EQ(cq->channel, ch);
  EXPECT_EQ(ch->refcnt, 1);
  EXPECT_EQ(h.dev.cqs.at(cq->handle).eqn, eqn);
  EXPECT_EQ(destroy_comp_channel(ch), EBUSY);

  ASSERT_EQ(req_notify_cq(cq, 0), 0);
  write_eqe(h, eq, 0, cq->handle);
  h.kernel.raise(eq.msi_vector);  // the device's MSI-X write
  ibv_cq* got = nullptr;
  void* got_ctx = nullptr;
  ASSERT_EQ(get_cq_event(ch, &got, &got_ctx), 0);
  EXPECT_EQ(got, cq);
  EXPECT_EQ(got_ctx, &tag);
  ack_cq_events(cq, 1);
  EXPECT_EQ(cq->comp_events_completed, 1u);

  ASSERT_EQ(req_notify_cq(cq, 0), 0);
  EXPECT_EQ(be32_at(h.dev.mmio.back().bytes.data()) >> 28, 1u);  // sn advanced by the event

  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(destroy_comp_channel(ch), 0);
}

TEST(Events, ANonBlockingChannelWithNothingPendingFailsWithEagain) {
  DeviceHarness h;
  ibv_comp_channel* ch = create_comp_channel(h.ctx());
  ASSERT_NE(ch, nullptr);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
  ibv_cq* got = nullptr;
  void* got_ctx = nullptr;
  errno = 0;
  EXPECT_EQ(get_cq_event(ch, &got, &got_ctx), -1);
  EXPECT_EQ(errno, EAGAIN);
  // A stale interrupt with no EQE behind it is consumed and still reports EAGAIN.
  h.kernel.raise(h.dev.eqs.begin()->second.msi_vector);
  EXPECT_EQ(get_cq_event(ch, &got, &got_ctx), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(destroy_comp_channel(ch), 0);
}

TEST(Events, GetCqEventBlocksUntilTheDeviceWritesAnEqeAndSignalsTheEventfd) {
  DeviceHarness h;
  ibv_comp_channel* ch = create_comp_channel(h.ctx());
  ASSERT_NE(ch, nullptr);
  ibv_cq* cq = create_cq(h.ctx(), 15, ch, 0);
  ASSERT_NE(cq, nullptr);
  const hwif::CreateEqIn eq = h.dev.eqs.begin()->second;
  std::atomic<bool> returned{false};
  ibv_cq* got = nullptr;
  std::thread waiter([&] {
    void* c = nullptr;
    EXPECT_EQ(get_cq_event(ch, &got, &c), 0);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(returned.load());
  write_eqe(h, eq, 0, cq->handle);
  h.kernel.raise(eq.msi_vector);  // the device's MSI-X write
  waiter.join();
  EXPECT_EQ(got, cq);
  ack_cq_events(cq, 1);
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(destroy_comp_channel(ch), 0);
}

TEST(Events, EqesOfDestroyedCqsAreSkippedAndTheRingWraps) {
  DeviceHarness h;
  ibv_comp_channel* ch = create_comp_channel(h.ctx());
  ASSERT_NE(ch, nullptr);
  ibv_cq* cq = create_cq(h.ctx(), 15, ch, 0);
  ASSERT_NE(cq, nullptr);
  const hwif::CreateEqIn eq = h.dev.eqs.begin()->second;
  const uint32_t nent = 1u << eq.log_nent;
  ibv_cq* got = nullptr;
  void* c = nullptr;
  for (uint32_t i = 0; i < nent + 2; ++i) {
    write_eqe(h, eq, i, i % 3 == 1 ? 0xabcdef : cq->handle);  // every third names no CQ
    if (i % 3 == 1) continue;
    h.kernel.raise(eq.msi_vector);
    ASSERT_EQ(get_cq_event(ch, &got, &c), 0) << i;
    EXPECT_EQ(got, cq);
  }
  ack_cq_events(cq, nent + 2 - (nent + 2 + 1) / 3);
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(destroy_comp_channel(ch), 0);
}

TEST(Events, ACompVectorOutOfRangeIsEinval) {
  DeviceHarness h;
  EXPECT_EQ(h.ctx()->num_comp_vectors, 2);
  EXPECT_EQ(create_cq(h.ctx(), 15, nullptr, 2), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(create_cq(h.ctx(), 15, nullptr, -1), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softhca::driver::testing
