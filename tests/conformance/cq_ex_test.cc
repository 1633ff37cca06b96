// Extended CQs through the public verbs API (ibv_create_cq_ex(3), ibv_query_rt_values_ex(3),
// ibv_modify_cq(3)): the device reports its clock and moderation limits in ibv_query_device_ex;
// a CQ created with every supported wc_flags field returns, through start_poll / next_poll /
// end_poll and the ibv_wc_read_* functions, the bytes' lengths, immediates, QP numbers, source QP
// and LID of RC and UD receives and of sends; completion timestamps lie between two readings of
// ibv_query_rt_values_ex around the send, rise from one completion to the next, and the wall-clock
// timestamp lies between two readings of CLOCK_REALTIME; fields the device cannot give are
// EOPNOTSUPP; moderation holds the completion event back for cq_count completions or until
// cq_period, on the live device's timer. A (softhca_0) sends to B (softhca_1), whose receive CQ
// is the extended CQ under test.
#include <endian.h>
#include <poll.h>
#include <time.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "verbs_pair.h"

namespace softhca::conformance {
namespace {

constexpr size_t kSrcOff = 0;
constexpr size_t kDstOff = 2 * kMiB;
constexpr uint64_t kRecvIdBase = 500;
constexpr uint64_t kAllWcFlags =
    uint64_t{IBV_WC_STANDARD_FLAGS} | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
// The wall clock of a completion against CLOCK_REALTIME read around it: the two clocks are one
// (the device's ticks are the host's monotonic clock), so any slack covers only a step of the
// system clock during the test; a conversion that is wrong is off by decades.
constexpr int64_t kWallSlackNs = 1'000'000'000;

// One completion as the ibv_cq_ex readers give it.
struct ExCompletion {
  uint64_t wr_id = 0;
  ibv_wc_status status = IBV_WC_GENERAL_ERR;
  ibv_wc_opcode opcode = IBV_WC_SEND;
  uint32_t byte_len = 0;
  uint32_t imm_host = 0;
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  unsigned int wc_flags = 0;
  uint32_t slid = 0;
  uint8_t sl = 0;
  uint8_t dlid_path_bits = 0;
  uint64_t ts = 0;
  uint64_t wall_ns = 0;
};

ExCompletion read_current(ibv_cq_ex* cq) {
  ExCompletion c;
  c.wr_id = cq->wr_id;
  c.status = cq->status;
  c.opcode = ibv_wc_read_opcode(cq);
  c.byte_len = ibv_wc_read_byte_len(cq);
  c.imm_host = be32toh(ibv_wc_read_imm_data(cq));
  c.qp_num = ibv_wc_read_qp_num(cq);
  c.src_qp = ibv_wc_read_src_qp(cq);
  c.wc_flags = ibv_wc_read_wc_flags(cq);
  c.slid = ibv_wc_read_slid(cq);
  c.sl = ibv_wc_read_sl(cq);
  c.dlid_path_bits = ibv_wc_read_dlid_path_bits(cq);
  c.ts = ibv_wc_read_completion_ts(cq);
  c.wall_ns = ibv_wc_read_completion_wallclock_ns(cq);
  return c;
}

// Every completion in cq now, through start_poll .. end_poll.
std::vector<ExCompletion> drain(ibv_cq_ex* cq) {
  std::vector<ExCompletion> out;
  ibv_poll_cq_attr attr{};
  if (ibv_start_poll(cq, &attr) != 0) return out;
  do {
    out.push_back(read_current(cq));
  } while (ibv_next_poll(cq) == 0);
  ibv_end_poll(cq);
  return out;
}

uint64_t device_clock(ibv_context* ctx) {
  ibv_values_ex v{};
  v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  EXPECT_EQ(ibv_query_rt_values_ex(ctx, &v), 0);
  EXPECT_EQ(v.comp_mask, static_cast<uint32_t>(IBV_VALUES_MASK_RAW_CLOCK));
  EXPECT_EQ(v.raw_clock.tv_sec, 0);  // the ticks are in tv_nsec, as mlx5 reports its cycles
  return static_cast<uint64_t>(v.raw_clock.tv_nsec);
}

int64_t realtime_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

bool channel_readable(ibv_comp_channel* ch) {
  pollfd p{ch->fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

class CqEx : public VerbsPair {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices)); }

  // B's extended receive CQ (optionally with a channel) and a pair of `type` receiving into it.
  void make_pair(ibv_qp_type type, ibv_comp_channel* channel = nullptr) {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 63;
    attr.channel = channel;
    attr.cq_context = this;
    attr.wc_flags = kAllWcFlags;
    cq_ = ibv_create_cq_ex(b_.ctx, &attr);
    ASSERT_NE(cq_, nullptr) << errno_name(errno);
    adopt_cq(ibv_cq_ex_to_cq(cq_));
    EXPECT_EQ(ibv_cq_ex_to_cq(cq_)->cq_context, this);
    QpOptions o;
    o.recv_cq_b = ibv_cq_ex_to_cq(cq_);
    ASSERT_NO_FATAL_FAILURE(connect(type, o, &p_));
    fill_pattern(a_.bytes().first(kDstOff), 41);
  }
  // A receive at B (wr_id kRecvIdBase + id) and a SEND WITH IMM of len bytes from A, completed at A.
  void send(uint64_t id, uint32_t len, uint32_t imm) {
    const uint32_t grh = p_.type == IBV_QPT_UD ? kGrhBytes : 0;
    ibv_sge recv = b_.sge(kDstOff, len + grh);
    ASSERT_EQ(post_recv(p_.b, kRecvIdBase + id, std::span(&recv, 1)), 0);
    ibv_sge sge = a_.sge(kSrcOff, len);
    SendArgs args;
    args.opcode = IBV_WR_SEND_WITH_IMM;
    args.wr_id = id;
    args.imm_host = imm;
    args.ah = p_.ah_to_b;
    args.remote_qpn = p_.b->qp_num;
    ASSERT_EQ(post_send(p_.a, args, std::span(&sge, 1)), 0);
    const ibv_wc wc = poll_one(a_.cq);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
    ASSERT_EQ(wc.wr_id, id);
    ASSERT_TRUE(same_bytes({b_.buf + kDstOff + grh, len}, {a_.buf + kSrcOff, len}));
  }
  void expect_receive(const ExCompletion& c, uint64_t id, uint32_t len, uint32_t imm) {
    EXPECT_EQ(c.status, IBV_WC_SUCCESS) << wc_status_name(c.status);
    EXPECT_EQ(c.wr_id, kRecvIdBase + id);
    EXPECT_EQ(c.opcode, IBV_WC_RECV) << wc_opcode_name(c.opcode);
    EXPECT_EQ(c.byte_len, len + (p_.type == IBV_QPT_UD ? kGrhBytes : 0));
    EXPECT_EQ(c.imm_host, imm);
    EXPECT_EQ(c.qp_num, p_.b->qp_num);
    EXPECT_EQ(c.slid, a_.lid);
    EXPECT_EQ(c.sl, 0u);
    EXPECT_EQ(c.dlid_path_bits, 0u);
    EXPECT_NE(c.wc_flags & IBV_WC_WITH_IMM, 0u);
    EXPECT_EQ(c.wc_flags & IBV_WC_GRH, 0u);  // InfiniBand, no GRH asked for
  }

  ibv_cq_ex* cq_ = nullptr;
  QpPair p_;
};

TEST_F(CqEx, TheDeviceReportsItsClockAndModerationLimits) {
  ibv_device_attr_ex attr{};
  ASSERT_EQ(ibv_query_device_ex(b_.ctx, nullptr, &attr), 0);
  EXPECT_EQ(attr.hca_core_clock, 1'000'000u);  // kHz: one tick per nanosecond
  EXPECT_EQ(attr.completion_timestamp_mask, ~uint64_t{0});
  EXPECT_EQ(attr.cq_mod_caps.max_cq_count, 65535u);
  EXPECT_EQ(attr.cq_mod_caps.max_cq_period, 4095u);
}

TEST_F(CqEx, RcReceivesCarryEveryFieldAndTimestampsBetweenClockReadings) {
  ASSERT_NO_FATAL_FAILURE(make_pair(IBV_QPT_RC));
  std::vector<uint64_t> before, after;
  std::vector<int64_t> wall_before, wall_after;
  for (uint32_t i = 0; i < 4; ++i) {
    before.push_back(device_clock(b_.ctx));
    wall_before.push_back(realtime_ns());
    ASSERT_NO_FATAL_FAILURE(send(i, 100 + 300 * i, 0xc0de0000 + i));
    after.push_back(device_clock(b_.ctx));
    wall_after.push_back(realtime_ns());
  }
  const std::vector<ExCompletion> got = drain(cq_);
  ASSERT_EQ(got.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    expect_receive(got[i], i, 100 + 300 * i, 0xc0de0000 + i);
    // Expect: the device clock when the CQE was written, between the readings around the send.
    EXPECT_GE(got[i].ts, before[i]);
    EXPECT_LE(got[i].ts, after[i]);
    EXPECT_GE(static_cast<int64_t>(got[i].wall_ns), wall_before[i] - kWallSlackNs);
    EXPECT_LE(static_cast<int64_t>(got[i].wall_ns), wall_after[i] + kWallSlackNs);
    if (i > 0) {
      EXPECT_GT(got[i].ts, got[i - 1].ts);
      // Expect: one tick per nanosecond, the same steps in both clocks.
      EXPECT_EQ(got[i].wall_ns - got[i - 1].wall_ns, got[i].ts - got[i - 1].ts);
    }
  }
  EXPECT_TRUE(drain(cq_).empty());
}

TEST_F(CqEx, UdReceivesCarryTheSourceQp) {
  ASSERT_NO_FATAL_FAILURE(make_pair(IBV_QPT_UD));
  ASSERT_NO_FATAL_FAILURE(send(1, 256, 0x5eed));
  const std::vector<ExCompletion> got = drain(cq_);
  ASSERT_EQ(got.size(), 1u);
  expect_receive(got[0], 1, 256, 0x5eed);
  EXPECT_EQ(got[0].src_qp, p_.a->qp_num);
}

TEST_F(CqEx, SendCompletionsInAnExtendedCqCarryTheirOpcodeAndQp) {
  ibv_cq_init_attr_ex attr{};
  attr.cqe = 15;
  attr.wc_flags = IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  ibv_cq_ex* cq = ibv_create_cq_ex(a_.ctx, &attr);
  ASSERT_NE(cq, nullptr) << errno_name(errno);
  adopt_cq(ibv_cq_ex_to_cq(cq));
  // A QP whose send CQ is the extended one: connect it to a QP of B by hand.
  ibv_qp_init_attr init{};
  init.send_cq = ibv_cq_ex_to_cq(cq);
  init.recv_cq = a_.cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 4;
  init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* sender = ibv_create_qp(a_.pd, &init);
  ASSERT_NE(sender, nullptr) << errno_name(errno);
  ibv_qp* target = create_qp(b_, IBV_QPT_RC, QpOptions{});  // destroyed by the fixture
  ASSERT_NE(target, nullptr);
  const QpOptions o;
  ASSERT_EQ(modify_to_init(sender, o), 0);
  ASSERT_EQ(modify_to_rtr(sender, target->qp_num, b_.lid, kPsnB, o), 0);
  ASSERT_EQ(modify_to_rts(sender, kPsnA, o), 0);
  ASSERT_EQ(modify_to_init(target, o), 0);
  ASSERT_EQ(modify_to_rtr(target, sender->qp_num, a_.lid, kPsnA, o), 0);
  ASSERT_EQ(modify_to_rts(target, kPsnB, o), 0);
  ibv_sge sge = a_.sge(kSrcOff, 512);
  SendArgs args;
  args.opcode = IBV_WR_RDMA_WRITE;
  args.wr_id = 77;
  args.remote_addr = b_.addr(kDstOff);
  args.rkey = b_.mr->rkey;
  const uint64_t t0 = device_clock(a_.ctx);
  ASSERT_EQ(post_send(sender, args, std::span(&sge, 1)), 0);
  std::vector<ExCompletion> got;
  for (int tries = 0; got.empty() && tries < 1000000; ++tries) got = drain(cq);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS) << wc_status_name(got[0].status);
  EXPECT_EQ(got[0].wr_id, 77u);
  EXPECT_EQ(got[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(got[0].qp_num, sender->qp_num);
  EXPECT_GE(got[0].ts, t0);
  EXPECT_LE(got[0].ts, device_clock(a_.ctx));
  EXPECT_TRUE(same_bytes({b_.buf + kDstOff, 512}, {a_.buf + kSrcOff, 512}));
  EXPECT_EQ(ibv_destroy_qp(sender), 0);
}

TEST_F(CqEx, FieldsTheDeviceCannotGiveAreNotSupported) {
  ibv_cq_init_attr_ex attr{};
  attr.cqe = 15;
  for (uint64_t flag : {uint64_t{IBV_WC_EX_WITH_CVLAN}, uint64_t{IBV_WC_EX_WITH_FLOW_TAG},
                        uint64_t{IBV_WC_EX_WITH_TM_INFO}}) {
    attr.wc_flags = IBV_WC_STANDARD_FLAGS | flag;
    errno = 0;
    EXPECT_EQ(ibv_create_cq_ex(a_.ctx, &attr), nullptr) << flag;
    EXPECT_EQ(errno, EOPNOTSUPP) << flag;
  }
  attr.wc_flags = IBV_WC_STANDARD_FLAGS;
  attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD << 1;  // unknown to rdma-core 44
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(a_.ctx, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  attr.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(a_.ctx, &attr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  attr.cqe = 1u << 30;  // above max_cqe
  attr.comp_mask = 0;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(a_.ctx, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_values_ex v{};
  v.comp_mask = IBV_VALUES_MASK_RESERVED;
  EXPECT_EQ(ibv_query_rt_values_ex(a_.ctx, &v), EINVAL);
}

TEST_F(CqEx, ModerationByCountHoldsTheEventBackUntilTheCount) {
  ibv_comp_channel* ch = create_channel(b_);
  ASSERT_NE(ch, nullptr);
  ASSERT_NO_FATAL_FAILURE(make_pair(IBV_QPT_RC, ch));
  ibv_cq* cq = ibv_cq_ex_to_cq(cq_);
  ibv_modify_cq_attr m{};
  m.attr_mask = IBV_CQ_ATTR_MODERATE;
  m.moderate.cq_count = 3;
  m.moderate.cq_period = 0;
  ASSERT_EQ(ibv_modify_cq(cq, &m), 0);
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  ASSERT_NO_FATAL_FAILURE(send(0, 64, 0));
  ASSERT_NO_FATAL_FAILURE(send(1, 64, 1));
  // Expect: two completions, and no event yet (the device completes in-process traffic before
  // ibv_post_send returns, so an event would already be there).
  EXPECT_FALSE(channel_readable(ch));
  ASSERT_NO_FATAL_FAILURE(send(2, 64, 2));
  ibv_cq* got = nullptr;
  void* got_ctx = nullptr;
  ASSERT_TRUE(wait_cq_event(ch, &got, &got_ctx));
  EXPECT_EQ(got, cq);
  EXPECT_EQ(got_ctx, this);
  ibv_ack_cq_events(cq, 1);
  EXPECT_EQ(drain(cq_).size(), 3u);
}

TEST_F(CqEx, ModerationByPeriodRaisesTheEventOnTheDevicesTimer) {
  ibv_comp_channel* ch = create_channel(b_);
  ASSERT_NE(ch, nullptr);
  ASSERT_NO_FATAL_FAILURE(make_pair(IBV_QPT_RC, ch));
  ibv_cq* cq = ibv_cq_ex_to_cq(cq_);
  ibv_modify_cq_attr m{};
  m.attr_mask = IBV_CQ_ATTR_MODERATE;
  m.moderate.cq_count = 1000;
  m.moderate.cq_period = 2000;  // us
  ASSERT_EQ(ibv_modify_cq(cq, &m), 0);
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  ASSERT_NO_FATAL_FAILURE(send(0, 64, 0));
  // Expect: far below the count, the event still comes once the period ran out.
  ibv_cq* got = nullptr;
  void* got_ctx = nullptr;
  ASSERT_TRUE(wait_cq_event(ch, &got, &got_ctx));
  EXPECT_EQ(got, cq);
  ibv_ack_cq_events(cq, 1);
  const std::vector<ExCompletion> c = drain(cq_);
  ASSERT_EQ(c.size(), 1u);
  expect_receive(c[0], 0, 64, 0);
}

TEST_F(CqEx, ModifyCqRefusesWhatTheDeviceCannotDo) {
  ASSERT_NO_FATAL_FAILURE(make_pair(IBV_QPT_RC));
  ibv_cq* cq = ibv_cq_ex_to_cq(cq_);
  ibv_modify_cq_attr m{};
  m.attr_mask = IBV_CQ_ATTR_MODERATE;
  m.moderate.cq_count = 16;
  m.moderate.cq_period = 4096;
  EXPECT_EQ(ibv_modify_cq(cq, &m), EINVAL);
  m.attr_mask = 0;
  EXPECT_EQ(ibv_modify_cq(cq, &m), EINVAL);
  m.attr_mask = IBV_CQ_ATTR_RESERVED;
  EXPECT_EQ(ibv_modify_cq(cq, &m), EINVAL);
  m.attr_mask = IBV_CQ_ATTR_MODERATE;
  m.moderate.cq_period = 16;
  EXPECT_EQ(ibv_modify_cq(cq, &m), 0);
  // A plain CQ takes moderation too.
  EXPECT_EQ(ibv_modify_cq(a_.cq, &m), 0);
}

}  // namespace
}  // namespace softhca::conformance
