// The device's state in a region: a second Device attached to the same region at another address
// runs the same device; reclaim(owner) destroys exactly that owner's objects without touching its
// memory; DMA faults from the host bridge become the statuses a real HCA gives.
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>

#include "hca/device.h"
#include "loopback_bench.h"

namespace softhca::test {
namespace {

using hca::Device;
using hca::DeviceRegion;
using hca::RegionInit;
using hwif::CqeOpcode;
using hwif::CqeSyndrome;
using hwif::QpState;
using hwif::WqeOpcode;

constexpr uint64_t kHeapBytes = 16u << 20;  // room for the bench's objects and rings' shadows

uint8_t syndrome(CqeSyndrome s) { return static_cast<uint8_t>(s); }

// One memfd mapped twice: the same bytes at two addresses, as two processes map the host segment.
class SharedRegion {
 public:
  explicit SharedRegion(size_t bytes) : bytes_(bytes) {
    fd_ = ::memfd_create("softhca-region-test", MFD_CLOEXEC);
    if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) throw std::runtime_error("memfd");
    for (void*& m : maps_) {
      m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
      if (m == MAP_FAILED) throw std::runtime_error("mmap");
    }
  }
  ~SharedRegion() {
    for (void* m : maps_) ::munmap(m, bytes_);
    ::close(fd_);
  }
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  [[nodiscard]] DeviceRegion view(int i) const { return {maps_[i], bytes_}; }

 private:
  size_t bytes_;
  int fd_ = -1;
  void* maps_[2] = {nullptr, nullptr};
};

hwif::QpAttributes query(Device& dev, uint32_t qpn, int* err = nullptr) {
  hwif::QueryQpIn in;
  in.qpn = qpn;
  hwif::QueryQpOut out{};
  const int e = hwif::exec_cmd(dev, in, out);
  if (err) *err = e;
  return out.attr;
}

uint64_t tlps(const pcie::Counters& c) {
  const pcie::CounterSnapshot s = c.snapshot();
  return s.by_type(pcie::TlpType::kMWr).tlps + s.by_type(pcie::TlpType::kMRd).tlps +
         s.by_type(pcie::TlpType::kCplD).tlps;
}

// ---- format and attach --------------------------------------------------------------------------

TEST(DeviceRegion, ADeviceAttachedAtAnotherAddressSeesTheSameObjectsAndCompletesTraffic) {
  const hca::DeviceConfig config = hca::default_device_config(0);
  SharedRegion shm(Device::min_region_bytes(config) + kHeapBytes);
  ASSERT_NE(shm.view(0).base, shm.view(1).base);
  Loopback lb;
  RefusingBridge bridge;  // refuses nothing here
  Device a(config, shm.view(0), RegionInit::kFormat, lb.counters(), lb, lb, bridge);
  lb.create(a, 0, 1);
  lb.create(a, 1, 1);
  lb.connect(a);

  Device b(config, shm.view(1), RegionInit::kAttach, lb.counters(), lb, lb, bridge);
  // Expect: b sees a's objects, and a sees b's.
  EXPECT_EQ(b.object_counts(), (Device::ObjectCounts{2, 2, 0, 2, 0, 2, 0}));
  hwif::AllocPdOut pd{};
  ASSERT_EQ(hwif::exec_cmd(b, hwif::AllocPdIn{}, pd), 0);
  EXPECT_EQ(pd.pdn, 3u);  // numbering continues in the shared table
  EXPECT_EQ(a.object_counts().pds, 3u);
  const hwif::QpAttributes q = query(b, lb.side(0).qpn);
  EXPECT_EQ(q.state, QpState::kRts);
  EXPECT_EQ(q.dest_qpn, lb.side(1).qpn);

  // b (one process) posts a WRITE; a (another) is the responder; b takes the ACK.
  for (int i = 0; i < 256; ++i) lb.buf()[i] = static_cast<uint8_t>(i * 7 + 1);
  lb.post(b, 0, WqeOpcode::kRdmaWrite, 256, 0, 8192);
  ASSERT_EQ(lb.queued(), 1u);
  lb.deliver_one(a);
  EXPECT_EQ(std::memcmp(lb.buf() + 8192, lb.buf(), 256), 0);
  EXPECT_TRUE(lb.take_cqes(0).empty());  // Expect: nothing before the ACK
  ASSERT_EQ(lb.queued(), 1u);
  lb.deliver_one(b);
  const auto cqes = lb.take_cqes(0);
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].opcode, CqeOpcode::kReq);
  EXPECT_EQ(cqes[0].wqe_counter, 0u);
  EXPECT_EQ(cqes[0].qpn, lb.side(0).qpn);
  // One set of counters, in the region: the WRITE and its ACK, whoever ran them.
  EXPECT_EQ(a.stats().packets_sent, 2u);
  EXPECT_EQ(b.stats().packets_received, 2u);
  EXPECT_EQ(b.stats().acks_sent, 1u);
}

TEST(DeviceRegion, ACopyOfTheRegionBytesIsTheSameDeviceAtAnotherAddress) {
  const hca::DeviceConfig config = hca::default_device_config(0);
  const size_t bytes = Device::min_region_bytes(config) + kHeapBytes;
  hca::PrivateRegion first(bytes), second(bytes);
  Loopback lb;
  RefusingBridge bridge;
  Device a(config, first.region(), RegionInit::kFormat, lb.counters(), lb, lb, bridge);
  lb.create(a, 0, 0);
  lb.create(a, 1, 0);
  lb.connect(a);
  std::memcpy(second.region().base, first.region().base, bytes);
  Device b(config, second.region(), RegionInit::kAttach, lb.counters(), lb, lb, bridge);
  lb.post(b, 0, WqeOpcode::kRdmaWrite, 64, 0, 4096);
  lb.pump(b);
  const auto cqes = lb.take_cqes(0);
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].opcode, CqeOpcode::kReq);
  EXPECT_EQ(a.stats().packets_sent, 0u);  // Expect: the copy ran it; the original is untouched
  EXPECT_EQ(b.stats().packets_sent, 2u);
}

TEST(DeviceRegion, AttachingToAnUnformattedOrTooSmallRegionIsRefused) {
  const hca::DeviceConfig config = hca::default_device_config(0);
  Loopback lb;
  RefusingBridge bridge;
  hca::PrivateRegion blank(Device::min_region_bytes(config));
  EXPECT_THROW(Device(config, blank.region(), RegionInit::kAttach, lb.counters(), lb, lb, bridge),
               std::invalid_argument);
  hca::PrivateRegion small(Device::min_region_bytes(config) - 4096);
  EXPECT_THROW(Device(config, small.region(), RegionInit::kFormat, lb.counters(), lb, lb, bridge),
               std::invalid_argument);
  // Formatted for other capacities: refused too.
  Device formatted(config, blank.region(), RegionInit::kFormat, lb.counters(), lb, lb, bridge);
  hca::DeviceConfig other = config;
  other.caps.max_qp /= 2;
  EXPECT_THROW(Device(other, blank.region(), RegionInit::kAttach, lb.counters(), lb, lb, bridge),
               std::invalid_argument);
}

TEST(DeviceRegion, AFullRegionMakesCreateQpFailWithEnomemAndLeavesNothingBehind) {
  const hca::DeviceConfig config = hca::default_device_config(0);
  hca::PrivateRegion region(Device::min_region_bytes(config));  // 1 MiB of heap
  Loopback lb;
  RefusingBridge bridge;
  Device dev(config, region.region(), RegionInit::kFormat, lb.counters(), lb, lb, bridge);
  lb.create(dev, 0, 0);
  const Device::ObjectCounts before = dev.object_counts();
  // 2^15 basic blocks: 2 MiB of shadow ring alone, more than the heap holds.
  hwif::CreateQpIn in;
  in.pdn = lb.side(0).pdn;
  in.send_cqn = in.recv_cqn = lb.side(0).cqn;
  in.sq_addr = in.rq_addr = in.dbrec_addr = 0x1000;
  in.log_sq_bbs = 15;
  in.log_rq_cnt = 4;
  in.log_rq_stride = 4;
  hwif::CreateQpOut out{};
  EXPECT_EQ(hwif::exec_cmd(dev, in, out), ENOMEM);
  EXPECT_EQ(dev.object_counts(), before);
  in.log_sq_bbs = 6;  // Expect: a small one still fits; QPNs advance (ObjectTable::Reuse::kAfterFresh),
  ASSERT_EQ(hwif::exec_cmd(dev, in, out), 0);  // so it takes the one after the refused attempt's
  EXPECT_EQ(out.qpn, lb.side(0).qpn + 2);
  EXPECT_EQ(dev.object_counts().qps, before.qps + 1);
}

// ---- reclaim --------------------------------------------------------------------------------------

class Reclaim : public ::testing::Test {
 protected:
  void SetUp() override {
    lb_.create(dev_, 0, kLive);
    lb_.create(dev_, 1, kDead);
    // The dead owner also has an EQ, a CQ reporting to it, and an SRQ.
    hwif::CreateEqIn eq;
    eq.ring_addr = Loopback::addr(eq_ring_.data());
    eq.log_nent = 4;
    eq.msi_vector = 42;
    hwif::CreateEqOut eqo{};
    ASSERT_EQ(hwif::exec_cmd(dev_, eq, eqo), 0);
    hwif::CreateCqIn cq;
    cq.ring_addr = Loopback::addr(eq_ring_.data());
    cq.dbrec_addr = Loopback::addr(eq_ring_.data());
    cq.log_nent = 4;
    cq.eqn = eqo.eqn;
    hwif::CreateCqOut cqo{};
    ASSERT_EQ(hwif::exec_cmd(dev_, cq, cqo), 0);
    hwif::CreateSrqIn srq;
    srq.pdn = lb_.side(1).pdn;
    srq.ring_addr = srq.dbrec_addr = Loopback::addr(eq_ring_.data());
    srq.log_wqe_cnt = 4;
    srq.log_stride = 5;
    hwif::CreateSrqOut srqo{};
    ASSERT_EQ(hwif::exec_cmd(dev_, srq, srqo), 0);
    // ... and half the device memory, with a key in it.
    hwif::AllocDmOut dmo{};
    ASSERT_EQ(hwif::exec_cmd(dev_, hwif::AllocDmIn{config_.caps.max_dm_size / 2, 0}, dmo), 0);
    hwif::CreateMkeyIn key;
    key.pdn = lb_.side(1).pdn;
    key.access = hwif::kAccessLocalWrite;
    key.host_addr = dmo.dma_addr;
    key.length = 64;
    key.dmn = dmo.dmn;
    hwif::CreateMkeyOut keyo{};
    ASSERT_EQ(hwif::exec_cmd(dev_, key, keyo), 0);
    dev_.set_owner(kLive);
  }

  static constexpr uint32_t kLive = 2;
  static constexpr uint32_t kDead = 1;
  hca::DeviceConfig config_ = hca::default_device_config(0);
  hca::PrivateRegion region_{Device::min_region_bytes(config_) + kHeapBytes};
  Loopback lb_;
  RefusingBridge bridge_;
  Device dev_{config_, region_.region(), RegionInit::kFormat, lb_.counters(), lb_, lb_, bridge_};
  alignas(64) std::array<uint8_t, 4096> eq_ring_{};
};

TEST_F(Reclaim, DestroysExactlyThatOwnersObjectsWithoutDmaOrInterrupts) {
  lb_.connect(dev_);
  EXPECT_EQ(dev_.object_counts(), (Device::ObjectCounts{2, 3, 1, 3, 1, 2, 1}));
  const uint64_t maps = bridge_.maps;
  const uint64_t tlps_before = tlps(lb_.counters());
  dev_.reclaim(kDead);
  // Expect: only the live owner's PD, key, CQ and QP remain; nothing touched host memory.
  EXPECT_EQ(dev_.object_counts(), (Device::ObjectCounts{1, 1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(bridge_.maps, maps);
  EXPECT_EQ(tlps(lb_.counters()), tlps_before);
  EXPECT_TRUE(bridge_.msis.empty());
  EXPECT_TRUE(lb_.take_cqes(1).empty());
  int err = 0;
  query(dev_, lb_.side(1).qpn, &err);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(query(dev_, lb_.side(0).qpn, &err).state, QpState::kRts);
  EXPECT_EQ(err, 0);
  dev_.reclaim(kDead);  // Expect: a second reclaim finds nothing
  EXPECT_EQ(dev_.object_counts().qps, 1u);
  // Expect: the survivor's reference counts are whole: its objects tear down in the usual order.
  EXPECT_EQ(hwif::exec_cmd(dev_, hwif::DeallocPdIn{lb_.side(0).pdn}), EBUSY);
  // Expect: the dead owner's device memory is free again: the whole window fits.
  hwif::AllocDmOut dm{};
  ASSERT_EQ(hwif::exec_cmd(dev_, hwif::AllocDmIn{config_.caps.max_dm_size, 0}, dm), 0);
  EXPECT_EQ(hwif::exec_cmd(dev_, hwif::FreeDmIn{dm.dmn}), 0);
  EXPECT_EQ(hwif::exec_cmd(dev_, hwif::DestroyQpIn{lb_.side(0).qpn}), 0);
  EXPECT_EQ(hwif::exec_cmd(dev_, hwif::DestroyCqIn{lb_.side(0).cqn}), 0);
  EXPECT_EQ(hwif::exec_cmd(dev_, hwif::DestroyMkeyIn{lb_.side(0).key}), 0);
  EXPECT_EQ(hwif::exec_cmd(dev_, hwif::DeallocPdIn{lb_.side(0).pdn}), 0);
  EXPECT_EQ(dev_.object_counts(), (Device::ObjectCounts{0, 0, 0, 0, 0, 0, 0}));
}

TEST_F(Reclaim, PacketsToAReclaimedQpAreDroppedAndThePeerEndsWithRetryExceeded) {
  lb_.connect(dev_, /*retry_cnt=*/2);
  dev_.reclaim(kDead);
  lb_.post(dev_, 0, WqeOpcode::kRdmaWrite, 64, 0, 4096);
  lb_.pump(dev_);
  EXPECT_EQ(dev_.stats().dropped[static_cast<size_t>(hca::DropReason::kUnknownQp)], 1u);
  // Expect: each ACK timeout (4.096 us * 2^14 = 67 ms) sends again; the third gives up.
  std::vector<CqeSeen> cqes;
  for (int i = 0; i < 10 && cqes.empty(); ++i) {
    lb_.advance(dev_, std::chrono::duration_cast<Picoseconds>(std::chrono::seconds(1)));
    cqes = lb_.take_cqes(0);
  }
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].opcode, CqeOpcode::kReqErr);
  EXPECT_EQ(cqes[0].syndrome, syndrome(CqeSyndrome::kRetryExcErr));
  EXPECT_EQ(dev_.stats().timeouts, 3u);
  EXPECT_EQ(dev_.stats().dropped[static_cast<size_t>(hca::DropReason::kUnknownQp)], 3u);
}

// ---- DMA faults ---------------------------------------------------------------------------------

class DmaFault : public ::testing::Test {
 protected:
  static constexpr uint64_t kBad = 32 * 1024;  // the bridge refuses buf[32 KiB, 48 KiB)
  static constexpr uint64_t kBadLen = 16 * 1024;

  void SetUp() override {
    lb_.create(dev_, 0, 0);
    lb_.create(dev_, 1, 0);
    lb_.connect(dev_);
    bridge_.refuse(lb_.buf() + kBad, kBadLen);
  }
  std::vector<CqeSeen> run(WqeOpcode op, uint32_t len, uint64_t local, uint64_t remote) {
    lb_.post(dev_, 0, op, len, local, remote, 1);
    lb_.pump(dev_);
    return lb_.take_cqes(0);
  }

  hca::DeviceConfig config_ = hca::default_device_config(0);
  hca::PrivateRegion region_{Device::min_region_bytes(config_) + kHeapBytes};
  Loopback lb_;
  RefusingBridge bridge_;
  Device dev_{config_, region_.region(), RegionInit::kFormat, lb_.counters(), lb_, lb_, bridge_};
};

TEST_F(DmaFault, AGatherFromRefusedMemoryCompletesWithALocalProtectionError) {
  // The first 128 bytes map (a short piece), the rest fault.
  const auto cqes = run(WqeOpcode::kRdmaWrite, 256, kBad - 128, 0);
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].opcode, CqeOpcode::kReqErr);
  EXPECT_EQ(cqes[0].syndrome, syndrome(CqeSyndrome::kLocProtErr));
  EXPECT_EQ(dev_.stats().packets_sent, 0u);  // Expect: nothing went on the wire
  EXPECT_EQ(dev_.stats().dma_faults, 1u);
  EXPECT_EQ(query(dev_, lb_.side(0).qpn).state, QpState::kErr);
}

TEST_F(DmaFault, AWriteIntoRefusedMemoryIsNakedAndTheRequesterSeesRemoteAccessError) {
  const auto cqes = run(WqeOpcode::kRdmaWrite, 256, 0, kBad);
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].opcode, CqeOpcode::kReqErr);
  EXPECT_EQ(cqes[0].syndrome, syndrome(CqeSyndrome::kRemAccessErr));
  EXPECT_EQ(dev_.stats().naks_sent, 1u);
  EXPECT_EQ(query(dev_, lb_.side(1).qpn).state, QpState::kErr);  // the responder too (IBA 9.9.3.1)
}

TEST_F(DmaFault, AReadOfRefusedMemoryIsNakedAndTheRequesterSeesRemoteAccessError) {
  const auto cqes = run(WqeOpcode::kRdmaRead, 256, 0, kBad);
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].syndrome, syndrome(CqeSyndrome::kRemAccessErr));
  EXPECT_EQ(dev_.stats().naks_sent, 1u);
}

TEST_F(DmaFault, AnAtomicOnRefusedMemoryIsNakedAndTheRequesterSeesRemoteAccessError) {
  const auto cqes = run(WqeOpcode::kAtomicFa, 8, 0, kBad);
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].syndrome, syndrome(CqeSyndrome::kRemAccessErr));
}

TEST_F(DmaFault, AReadResultIntoRefusedMemoryCompletesWithALocalProtectionError) {
  const auto cqes = run(WqeOpcode::kRdmaRead, 256, kBad, 0);
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].syndrome, syndrome(CqeSyndrome::kLocProtErr));
}

TEST_F(DmaFault, ACqWhoseRingIsRefusedGoesToErrorAndTakesNoMoreCqes) {
  bridge_.refuse(lb_.side(0).cq.data(), lb_.side(0).cq.size());
  EXPECT_TRUE(run(WqeOpcode::kRdmaWrite, 64, 0, 4096).empty());
  EXPECT_EQ(dev_.stats().dma_faults, 1u);
  EXPECT_TRUE(run(WqeOpcode::kRdmaWrite, 64, 0, 4096).empty());
  EXPECT_EQ(dev_.stats().dma_faults, 1u);  // Expect: the CQ in error is not written again
  EXPECT_EQ(dev_.stats().cq_overruns, 1u);
  EXPECT_EQ(dev_.stats().cqes_written, 0u);
}

TEST_F(DmaFault, ASendQueueThatCannotBeReadPutsTheQpInError) {
  bridge_.refuse(lb_.side(0).sq.data(), lb_.side(0).sq.size());
  const auto cqes = run(WqeOpcode::kRdmaWrite, 64, 0, 4096);
  EXPECT_TRUE(cqes.empty());  // Expect: an unreadable WQE is neither executed nor completed
  EXPECT_EQ(dev_.stats().packets_sent, 0u);
  EXPECT_EQ(query(dev_, lb_.side(0).qpn).state, QpState::kErr);
}

}  // namespace
}  // namespace softhca::test
