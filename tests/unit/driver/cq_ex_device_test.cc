// Extended CQs with the real device model writing the CQEs (device_rig.h, a clock the test moves):
// a CQE carries the device clock of its writing (1 tick = 1 ns of engine time) and the wall clock
// is that plus the offset the device reported at creation; ibv_query_rt_values_ex reads the same
// clock; the start/next/end_poll readers give the fields ibv_poll_cq gives; a timestamped CQE is
// still one 64-byte MWr; and CQ moderation holds the event (EQE write and MSI) back until
// cq_count CQEs or cq_period microseconds, on the device's own timer.
#include <gtest/gtest.h>

#include <endian.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "device_rig.h"
#include "driver/provider.h"
#include "pcie/counters.h"

namespace softhca::driver::testing {
namespace {

constexpr uint64_t kAllWcFlags =
    uint64_t{IBV_WC_STANDARD_FLAGS} | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
constexpr int64_t kWallAtZeroNs = 1'700'000'000'000'000'000;  // 2023-11-14, a wall clock well past the epoch

// Two RC QPs of one device connected through its looped-back port; a's sends complete in a CQ of
// its own (sq_cq_), b's receives in the extended CQ under test (cq_, with a completion channel).
class CqExDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    r_.loop.wall_offset_ns = kWallAtZeroNs;
    r_.loop.t = Picoseconds(5'000'000);  // 5 us
    ctx_ = open_rig_context(r_);
    ASSERT_NE(ctx_, nullptr);
    pd_ = alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    ch_ = create_comp_channel(ctx_);
    ASSERT_NE(ch_, nullptr);
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 31;
    attr.channel = ch_;
    attr.wc_flags = kAllWcFlags;
    cqx_ = create_cq_ex(ctx_, &attr);
    ASSERT_NE(cqx_, nullptr) << errno;
    cq_ = ibv_cq_ex_to_cq(cqx_);
    sq_cq_ = create_cq(ctx_, 31, nullptr, 0);
    ASSERT_NE(sq_cq_, nullptr);
    ibv_qp_init_attr qa{};
    qa.send_cq = sq_cq_;
    qa.recv_cq = sq_cq_;
    qa.qp_type = IBV_QPT_RC;
    qa.cap = {16, 16, 1, 1, 0};
    a_ = create_qp(pd_, &qa, 0);
    qa.send_cq = cq_;
    qa.recv_cq = cq_;
    b_ = create_qp(pd_, &qa, 0);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    ASSERT_EQ(to_rts(a_, b_->qp_num, r_.dev.lid()), 0);
    ASSERT_EQ(to_rts(b_, a_->qp_num, r_.dev.lid()), 0);
    mr_ = reg_mr(pd_, buf_.data(), buf_.size(), reinterpret_cast<uintptr_t>(buf_.data()), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr_, nullptr);
  }
  void TearDown() override {
    EXPECT_EQ(dereg_mr(mr_), 0);
    EXPECT_EQ(destroy_qp(a_), 0);
    EXPECT_EQ(destroy_qp(b_), 0);
    EXPECT_EQ(destroy_cq(sq_cq_), 0);
    EXPECT_EQ(destroy_cq(cq_), 0);
    EXPECT_EQ(destroy_comp_channel(ch_), 0);
    EXPECT_EQ(dealloc_pd(pd_), 0);
    EXPECT_EQ(close_context(ctx_), 0);
    EXPECT_EQ(r_.kernel.buffers_held(), 0u);
    EXPECT_EQ(r_.bridge.faults, 0);
  }
  // A receive at b, then a SEND WITH IMM of `len` bytes from a (completed and polled from sq_cq_).
  void send(uint64_t id, uint32_t len, uint32_t imm) {
    ibv_sge rsge{reinterpret_cast<uintptr_t>(buf_.data() + 4096), 2048, mr_->lkey};
    ibv_recv_wr rwr{};
    rwr.wr_id = 1000 + id;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    ASSERT_EQ(post_recv(b_, &rwr, &rbad), 0);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data()), len, mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htobe32(imm);
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(post_send(a_, &wr, &bad), 0);
    r_.loop.pump(r_.dev);
    ibv_wc wc{};
    ASSERT_EQ(poll_cq(sq_cq_, 1, &wc), 1);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  uint64_t eqes() const { return r_.counters.snapshot().tlps(pcie::TlpType::kMWr, pcie::TlpCause::kEqeWrite); }
  void arm() { ASSERT_EQ(req_notify_cq(cq_, 0), 0); }
  void take_event() {
    ibv_cq* got = nullptr;
    void* cq_ctx = nullptr;
    ASSERT_EQ(get_cq_event(ch_, &got, &cq_ctx), 0);
    EXPECT_EQ(got, cq_);
    ack_cq_events(cq_, 1);
  }
  // Polls every completion with start/next/end_poll; their wr_ids.
  std::vector<uint64_t> drain() {
    std::vector<uint64_t> ids;
    ibv_poll_cq_attr pa{};
    if (cqx_->start_poll(cqx_, &pa) != 0) return ids;
    do {
      EXPECT_EQ(cqx_->status, IBV_WC_SUCCESS);
      ids.push_back(cqx_->wr_id);
    } while (cqx_->next_poll(cqx_) == 0);
    cqx_->end_poll(cqx_);
    return ids;
  }

  Rig r_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* ch_ = nullptr;
  ibv_cq_ex* cqx_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_cq* sq_cq_ = nullptr;
  ibv_qp* a_ = nullptr;
  ibv_qp* b_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(8192, 0x5a);
};

TEST_F(CqExDevice, EachCqeCarriesTheDeviceClockOfItsWritingAndItsWallClock) {
  r_.loop.t = Picoseconds(1'234'567'000);  // 1,234,567 ns
  send(1, 100, 0xabcd0001);
  r_.loop.t = Picoseconds(2'000'000'999);  // ticks are whole ns: 2,000,000 ns
  send(2, 200, 0xabcd0002);
  ibv_poll_cq_attr pa{};
  ASSERT_EQ(cqx_->start_poll(cqx_, &pa), 0);
  EXPECT_EQ(cqx_->wr_id, 1001u);
  EXPECT_EQ(ibv_wc_read_completion_ts(cqx_), 1'234'567u);
  // Expect: wall clock = ticks + (wall clock - ticks) at creation, here kWallAtZeroNs.
  EXPECT_EQ(ibv_wc_read_completion_wallclock_ns(cqx_), static_cast<uint64_t>(kWallAtZeroNs) + 1'234'567u);
  ASSERT_EQ(cqx_->next_poll(cqx_), 0);
  EXPECT_EQ(cqx_->wr_id, 1002u);
  EXPECT_EQ(ibv_wc_read_completion_ts(cqx_), 2'000'000u);
  EXPECT_EQ(ibv_wc_read_completion_wallclock_ns(cqx_), static_cast<uint64_t>(kWallAtZeroNs) + 2'000'000u);
  EXPECT_EQ(cqx_->next_poll(cqx_), ENOENT);
  cqx_->end_poll(cqx_);
  EXPECT_EQ(cqx_->start_poll(cqx_, &pa), ENOENT);  // the lock went back with ENOENT: no end_poll
}

TEST_F(CqExDevice, TheReadersGiveTheFieldsOfTheCompletion) {
  send(7, 321, 0x01020304);
  ibv_poll_cq_attr pa{};
  ASSERT_EQ(cqx_->start_poll(cqx_, &pa), 0);
  EXPECT_EQ(cqx_->status, IBV_WC_SUCCESS);
  EXPECT_EQ(cqx_->wr_id, 1007u);
  EXPECT_EQ(ibv_wc_read_opcode(cqx_), IBV_WC_RECV);
  EXPECT_EQ(ibv_wc_read_byte_len(cqx_), 321u);
  EXPECT_EQ(be32toh(ibv_wc_read_imm_data(cqx_)), 0x01020304u);
  EXPECT_EQ(ibv_wc_read_wc_flags(cqx_), static_cast<unsigned>(IBV_WC_WITH_IMM));
  EXPECT_EQ(ibv_wc_read_qp_num(cqx_), b_->qp_num);
  EXPECT_EQ(ibv_wc_read_slid(cqx_), r_.dev.lid());
  EXPECT_EQ(ibv_wc_read_sl(cqx_), 0u);
  EXPECT_EQ(ibv_wc_read_dlid_path_bits(cqx_), 0u);
  EXPECT_EQ(ibv_wc_read_vendor_err(cqx_), 0u);
  cqx_->end_poll(cqx_);
  ibv_poll_cq_attr bad{1};
  EXPECT_EQ(cqx_->start_poll(cqx_, &bad), EINVAL);
}

TEST_F(CqExDevice, ATimestampedCqeIsStillOneMwrAndTheCqMayBePolledWithPollCqToo) {
  const pcie::CounterSnapshot before = r_.counters.snapshot();
  send(1, 64, 1);
  send(2, 64, 2);
  const pcie::CounterSnapshot d = r_.counters.snapshot() - before;
  // Expect: 4 CQEs (2 sends, 2 receives), one MWr each: the timestamp is inside the 64 bytes.
  EXPECT_EQ(d.tlps(pcie::TlpType::kMWr, pcie::TlpCause::kCqeWrite), 4u);
  ibv_wc wc{};
  ASSERT_EQ(poll_cq(cq_, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 1001u);
  EXPECT_EQ(drain(), std::vector<uint64_t>{1002});
}

TEST_F(CqExDevice, QueryRtValuesReadsTheDeviceClock) {
  r_.loop.t = Picoseconds(987'654'321'000);
  ibv_values_ex v{};
  v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  ASSERT_EQ(query_rt_values(ctx_, &v), 0);
  EXPECT_EQ(v.comp_mask, static_cast<uint32_t>(IBV_VALUES_MASK_RAW_CLOCK));
  EXPECT_EQ(v.raw_clock.tv_sec, 0);
  EXPECT_EQ(v.raw_clock.tv_nsec, 987'654'321);
  v.comp_mask = IBV_VALUES_MASK_RESERVED;
  EXPECT_EQ(query_rt_values(ctx_, &v), EINVAL);
}

TEST_F(CqExDevice, ModerationByCountHoldsTheEventUntilTheCountIsReached) {
  ibv_modify_cq_attr m{};
  m.attr_mask = IBV_CQ_ATTR_MODERATE;
  m.moderate.cq_count = 3;
  m.moderate.cq_period = 0;
  ASSERT_EQ(modify_cq(cq_, &m), 0);
  arm();
  const uint64_t eqes0 = eqes();
  send(1, 64, 1);
  send(2, 64, 2);
  // Expect: two CQEs, no event yet (no EQE written, no MSI).
  EXPECT_EQ(eqes() - eqes0, 0u);
  EXPECT_EQ(r_.bridge.msis, 0);
  send(3, 64, 3);
  EXPECT_EQ(eqes() - eqes0, 1u);
  EXPECT_EQ(r_.bridge.msis, 1);
  take_event();
  EXPECT_EQ(drain(), (std::vector<uint64_t>{1001, 1002, 1003}));
  // Expect: the count starts again at the next arm.
  arm();
  send(4, 64, 4);
  send(5, 64, 5);
  EXPECT_EQ(r_.bridge.msis, 1);
  send(6, 64, 6);
  EXPECT_EQ(r_.bridge.msis, 2);
  take_event();
  EXPECT_EQ(drain(), (std::vector<uint64_t>{1004, 1005, 1006}));
}

TEST_F(CqExDevice, ModerationByPeriodRaisesTheEventOnTheDevicesTimer) {
  ibv_modify_cq_attr m{};
  m.attr_mask = IBV_CQ_ATTR_MODERATE;
  m.moderate.cq_count = 100;
  m.moderate.cq_period = 50;  // us
  ASSERT_EQ(modify_cq(cq_, &m), 0);
  arm();
  const Picoseconds t0 = r_.loop.t;
  r_.loop.wakeups.clear();
  send(1, 64, 1);
  EXPECT_EQ(r_.bridge.msis, 0);
  // Expect: the device asked to be woken 50 us after the first CQE.
  ASSERT_FALSE(r_.loop.wakeups.empty());
  EXPECT_EQ(r_.loop.wakeups.back(), t0 + Picoseconds(50'000'000));
  r_.loop.t = t0 + Picoseconds(20'000'000);
  send(2, 64, 2);  // a second CQE does not move the deadline
  r_.loop.t = t0 + Picoseconds(49'999'000);
  r_.dev.on_timer(r_.loop.t);
  EXPECT_EQ(r_.bridge.msis, 0);
  r_.loop.t = t0 + Picoseconds(50'000'000);
  r_.dev.on_timer(r_.loop.t);
  EXPECT_EQ(r_.bridge.msis, 1);
  take_event();
  // Expect: no second event from the same timer.
  r_.loop.t = t0 + Picoseconds(200'000'000);
  r_.dev.on_timer(r_.loop.t);
  EXPECT_EQ(r_.bridge.msis, 1);
  EXPECT_EQ(drain(), (std::vector<uint64_t>{1001, 1002}));
}

TEST_F(CqExDevice, WithoutModerationEveryArmedCqeRaisesAtOnce) {
  arm();
  send(1, 64, 1);
  EXPECT_EQ(r_.bridge.msis, 1);
  take_event();
  EXPECT_EQ(drain(), std::vector<uint64_t>{1001});
}

TEST_F(CqExDevice, ModifyCqRefusesWhatTheDeviceCannotDo) {
  ibv_modify_cq_attr m{};
  m.attr_mask = IBV_CQ_ATTR_MODERATE;
  m.moderate.cq_count = 1;
  m.moderate.cq_period = 4096;  // above max_cq_period (4095 us)
  EXPECT_EQ(modify_cq(cq_, &m), EINVAL);
  m.moderate.cq_period = 4095;
  EXPECT_EQ(modify_cq(cq_, &m), 0);
  m.attr_mask = 0;
  EXPECT_EQ(modify_cq(cq_, &m), EINVAL);
  m.attr_mask = IBV_CQ_ATTR_MODERATE | IBV_CQ_ATTR_RESERVED;
  EXPECT_EQ(modify_cq(cq_, &m), EINVAL);
}

TEST_F(CqExDevice, ACqWithoutTimestampsGetsNone) {
  ibv_cq_init_attr_ex attr{};
  attr.cqe = 7;
  attr.wc_flags = IBV_WC_STANDARD_FLAGS;
  ibv_cq_ex* plain = create_cq_ex(ctx_, &attr);
  ASSERT_NE(plain, nullptr);
  ibv_qp_init_attr qa{};
  qa.send_cq = ibv_cq_ex_to_cq(plain);
  qa.recv_cq = ibv_cq_ex_to_cq(plain);
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {4, 4, 1, 1, 0};
  ibv_qp* c = create_qp(pd_, &qa, 0);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(to_rts(c, c->qp_num, r_.dev.lid()), 0);  // connected to itself
  ibv_mr* target = reg_mr(pd_, buf_.data() + 4096, 4096, reinterpret_cast<uintptr_t>(buf_.data() + 4096),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(target, nullptr);
  r_.loop.t = Picoseconds(77'000'000);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data()), 8, mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 5;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf_.data() + 4096);
  wr.wr.rdma.rkey = target->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(c, &wr, &bad), 0);
  r_.loop.pump(r_.dev);
  ibv_poll_cq_attr pa{};
  ASSERT_EQ(plain->start_poll(plain, &pa), 0);
  EXPECT_EQ(plain->wr_id, 5u);
  EXPECT_EQ(plain->status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_wc_read_opcode(plain), IBV_WC_RDMA_WRITE);
  EXPECT_EQ(ibv_wc_read_completion_ts(plain), 0u);  // Expect: the device wrote no clock
  plain->end_poll(plain);
  EXPECT_EQ(dereg_mr(target), 0);
  EXPECT_EQ(destroy_qp(c), 0);
  EXPECT_EQ(destroy_cq(ibv_cq_ex_to_cq(plain)), 0);
}

TEST_F(CqExDevice, AnErrorCompletionHasNoTimestamp) {
  r_.loop.t = Picoseconds(33'000'000);
  // A receive of 16 bytes for a SEND of 64: b's receive completes with a local length error.
  ibv_sge rsge{reinterpret_cast<uintptr_t>(buf_.data() + 4096), 16, mr_->lkey};
  ibv_recv_wr rwr{};
  rwr.wr_id = 9;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(post_recv(b_, &rwr, &rbad), 0);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data()), 64, mr_->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(a_, &wr, &bad), 0);
  r_.loop.pump(r_.dev);
  ibv_poll_cq_attr pa{};
  ASSERT_EQ(cqx_->start_poll(cqx_, &pa), 0);
  EXPECT_EQ(cqx_->wr_id, 9u);
  EXPECT_EQ(cqx_->status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(ibv_wc_read_completion_ts(cqx_), 0u);
  EXPECT_EQ(ibv_wc_read_completion_wallclock_ns(cqx_), 0u);
  cqx_->end_poll(cqx_);
}

TEST_F(CqExDevice, CreateCqExRefusesFieldsAndFlagsItCannotGive) {
  ibv_cq_init_attr_ex attr{};
  attr.cqe = 7;
  for (uint64_t flag : {uint64_t{IBV_WC_EX_WITH_CVLAN}, uint64_t{IBV_WC_EX_WITH_FLOW_TAG},
                        uint64_t{IBV_WC_EX_WITH_TM_INFO}, uint64_t{1} << 12}) {
    attr.wc_flags = IBV_WC_STANDARD_FLAGS | flag;
    errno = 0;
    EXPECT_EQ(create_cq_ex(ctx_, &attr), nullptr) << flag;
    EXPECT_EQ(errno, EOPNOTSUPP) << flag;
  }
  attr.wc_flags = IBV_WC_STANDARD_FLAGS;
  attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  attr.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  errno = 0;
  EXPECT_EQ(create_cq_ex(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  attr.flags = 0;
  attr.parent_domain = pd_;  // a PD, not a parent domain
  errno = 0;
  EXPECT_EQ(create_cq_ex(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  attr.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  ibv_cq_ex* st = create_cq_ex(ctx_, &attr);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(destroy_cq(ibv_cq_ex_to_cq(st)), 0);
}

}  // namespace
}  // namespace softhca::driver::testing
