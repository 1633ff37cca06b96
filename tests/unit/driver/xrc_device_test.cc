// XRC with the real device model (device_rig.h): the packets of an INI QP's message carry XRC
// opcodes and the XRCETH with the SRQ number it names in every request packet, the TGT QP's ACK
// an XRC opcode and no XRCETH (IBA 9.2, 9.3); and an XRC message costs the PCIe transactions of
// the same message on RC into a basic SRQ: one doorbell, one WQE read, one receive WQE read, the
// payload reads and writes, two CQEs (the XRC segment of the WQE fits its one basic block).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "device_rig.h"
#include "driver/objects.h"
#include "driver/provider.h"
#include "hwif/cmd.h"
#include "hwif/device_interface.h"
#include "fabric/packet/packet.h"
#include "pcie/counters.h"

namespace softhca::driver::testing {
namespace {

constexpr uint32_t kBytes = 4096;  // four packets at MTU 1024

int modify(ibv_qp* qp, ibv_qp_attr a, int mask) { return modify_qp(qp, &a, mask); }

// INI -> TGT on the rig's one port, with the masks of the kernel's qp_state_table for XRC.
int connect_xrc(ibv_qp* ini, ibv_qp* tgt, uint16_t lid) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  constexpr int kInit = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  if (int e = modify(ini, a, kInit) | modify(tgt, a, kInit); e != 0) return e;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.ah_attr.dlid = lid;
  a.ah_attr.port_num = 1;
  a.min_rnr_timer = 1;
  a.dest_qp_num = ini->qp_num;
  constexpr int kRtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (int e = modify(tgt, a, kRtr | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER); e != 0) return e;
  a.dest_qp_num = tgt->qp_num;
  if (int e = modify(ini, a, kRtr); e != 0) return e;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  if (int e = modify(tgt, a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN); e != 0) return e;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return modify(ini, a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_MAX_QP_RD_ATOMIC);
}

class XrcDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = open_rig_context(r_);
    ASSERT_NE(ctx_, nullptr);
    pd_ = alloc_pd(ctx_);
    cq_ = create_cq(ctx_, 31, nullptr, 0);
    srq_cq_ = create_cq(ctx_, 31, nullptr, 0);
    ASSERT_TRUE(pd_ != nullptr && cq_ != nullptr && srq_cq_ != nullptr);
    xrcd_ = open_xrcd(ctx_, -1, 0);
    ASSERT_NE(xrcd_, nullptr) << errno;
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 8;
    sa.attr.max_sge = 1;
    srq_ = create_srq_in(pd_, &sa, xrcd_, srq_cq_);
    ASSERT_NE(srq_, nullptr) << errno;
    ASSERT_EQ(get_srq_num(srq_, &srqn_), 0);
    tgt_ = create_xrc_tgt_qp(xrcd_, nullptr);
    ASSERT_NE(tgt_, nullptr) << errno;
    ibv_qp_init_attr qa{};
    qa.send_cq = cq_;
    qa.qp_type = IBV_QPT_XRC_SEND;
    qa.cap.max_send_wr = 8;
    qa.cap.max_send_sge = 1;
    ini_ = create_qp(pd_, &qa, 0);
    ASSERT_NE(ini_, nullptr) << errno;
    ASSERT_EQ(connect_xrc(ini_, tgt_, r_.dev.lid()), 0);
    mr_ = reg_mr(pd_, buf_.data(), buf_.size(), reinterpret_cast<uintptr_t>(buf_.data()), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr_, nullptr);
    for (size_t i = 0; i < kBytes; ++i) buf_[i] = static_cast<uint8_t>(i * 7 + 1);
  }
  void TearDown() override {
    EXPECT_EQ(dereg_mr(mr_), 0);
    EXPECT_EQ(destroy_qp(ini_), 0);
    EXPECT_EQ(destroy_qp(tgt_), 0);
    EXPECT_EQ(destroy_srq(srq_), 0);
    EXPECT_EQ(close_xrcd(xrcd_), 0);
    EXPECT_EQ(destroy_cq(srq_cq_), 0);
    EXPECT_EQ(destroy_cq(cq_), 0);
    EXPECT_EQ(dealloc_pd(pd_), 0);
    EXPECT_EQ(close_context(ctx_), 0);
    EXPECT_EQ(r_.kernel.buffers_held(), 0u);
    EXPECT_EQ(r_.bridge.faults, 0);
  }
  void post_recv_into(ibv_srq* srq, uint64_t wr_id) {
    ibv_sge s{reinterpret_cast<uintptr_t>(buf_.data() + kBytes), kBytes, mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(post_srq_recv(srq, &wr, &bad), 0);
  }
  void post_send_from(ibv_qp* qp, uint32_t remote_srqn) {
    ibv_sge s{reinterpret_cast<uintptr_t>(buf_.data()), kBytes, mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 1;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.qp_type.xrc.remote_srqn = remote_srqn;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  }
  static fabric::PacketFields parsed(const std::vector<uint8_t>& p) {
    fabric::PacketFields f;
    std::span<const uint8_t> payload;
    EXPECT_EQ(fabric::parse(p, f, payload), fabric::ParseStatus::kOk);
    return f;
  }

  Rig r_;
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(2 * kBytes);
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_cq* srq_cq_ = nullptr;
  ibv_xrcd* xrcd_ = nullptr;
  ibv_srq* srq_ = nullptr;
  uint32_t srqn_ = 0;
  ibv_qp* tgt_ = nullptr;
  ibv_qp* ini_ = nullptr;
  ibv_mr* mr_ = nullptr;
};

TEST_F(XrcDevice, EveryRequestPacketCarriesTheXrcethAndTheAckCarriesNone) {
  post_recv_into(srq_, 5);
  post_send_from(ini_, srqn_);
  using fabric::BthOpcode;
  const std::vector<BthOpcode> expected = {BthOpcode::kXrcSendFirst, BthOpcode::kXrcSendMiddle,
                                           BthOpcode::kXrcSendMiddle, BthOpcode::kXrcSendLast};
  ASSERT_EQ(r_.loop.queue.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const fabric::PacketFields f = parsed(r_.loop.queue[i]);
    EXPECT_EQ(f.opcode, expected[i]) << i;
    EXPECT_EQ(f.dest_qp.value(), tgt_->qp_num);
    ASSERT_TRUE(f.xrceth.has_value()) << i;
    EXPECT_EQ(f.xrceth->srqn, srqn_);
  }
  // Expect: the requests delivered, the TGT QP's ACK (one, for the message's last packet) waits.
  std::deque<std::vector<uint8_t>> requests;
  std::swap(requests, r_.loop.queue);
  for (const std::vector<uint8_t>& p : requests) r_.dev.receive(p);
  ASSERT_EQ(r_.loop.queue.size(), 1u);
  const fabric::PacketFields ack = parsed(r_.loop.queue.front());
  EXPECT_EQ(ack.opcode, BthOpcode::kXrcAcknowledge);
  EXPECT_EQ(ack.dest_qp.value(), ini_->qp_num);
  EXPECT_FALSE(ack.xrceth.has_value());
  r_.loop.pump(r_.dev);
  ibv_wc wc{};
  ASSERT_EQ(poll_cq(cq_, 1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(poll_cq(srq_cq_, 1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.qp_num, tgt_->qp_num);
  EXPECT_EQ(wc.byte_len, kBytes);
  EXPECT_TRUE(std::equal(buf_.begin(), buf_.begin() + kBytes, buf_.begin() + kBytes));
}

TEST_F(XrcDevice, AnXrcMessageCostsTheTransactionsOfTheSameMessageOnRcIntoAnSrq) {
  // The XRC message.
  post_recv_into(srq_, 5);
  const pcie::CounterSnapshot before_xrc = r_.counters.snapshot();
  post_send_from(ini_, srqn_);
  r_.loop.pump(r_.dev);
  const pcie::CounterSnapshot xrc = r_.counters.snapshot() - before_xrc;
  ibv_wc wc{};
  ASSERT_EQ(poll_cq(cq_, 1, &wc), 1);
  ASSERT_EQ(poll_cq(srq_cq_, 1, &wc), 1);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);

  // The same message between two RC QPs, the receiver on a basic SRQ.
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 1;
  ibv_srq* basic = create_srq(pd_, &sa);
  ASSERT_NE(basic, nullptr);
  ibv_qp_init_attr qa{};
  qa.send_cq = cq_;
  qa.recv_cq = srq_cq_;
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {8, 0, 1, 1, 0};
  ibv_qp* a = create_qp(pd_, &qa, 0);
  qa.srq = basic;
  ibv_qp* b = create_qp(pd_, &qa, 0);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  ASSERT_EQ(to_rts(a, b->qp_num, r_.dev.lid()), 0);
  ASSERT_EQ(to_rts(b, a->qp_num, r_.dev.lid()), 0);
  post_recv_into(basic, 6);
  const pcie::CounterSnapshot before_rc = r_.counters.snapshot();
  post_send_from(a, 0);
  r_.loop.pump(r_.dev);
  const pcie::CounterSnapshot rc = r_.counters.snapshot() - before_rc;
  ASSERT_EQ(poll_cq(cq_, 1, &wc), 1);
  ASSERT_EQ(poll_cq(srq_cq_, 1, &wc), 1);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);

  using pcie::TlpCause;
  using pcie::TlpType;
  // Expect: one doorbell, one WQE read (ctrl, XRC and data segments: 48 bytes, one basic block),
  // one SRQ WQE read, two CQEs; payload reads and writes as RC's.
  EXPECT_EQ(xrc.tlps(TlpType::kMWr, TlpCause::kDoorbell), 1u);
  EXPECT_EQ(xrc.tlps(TlpType::kMRd, TlpCause::kWqeRead), 1u);
  EXPECT_EQ(xrc.tlps(TlpType::kMRd, TlpCause::kRecvWqeRead), 1u);
  EXPECT_EQ(xrc.tlps(TlpType::kMWr, TlpCause::kCqeWrite), 2u);
  EXPECT_GT(xrc.tlps(TlpType::kMRd, TlpCause::kPayloadRead), 0u);
  for (const TlpType t : {TlpType::kMWr, TlpType::kMRd, TlpType::kCplD}) {
    for (int c = 0; c < pcie::kTlpCauseCount; ++c) {
      const auto cause = static_cast<TlpCause>(c);
      EXPECT_EQ(xrc.tlps(t, cause), rc.tlps(t, cause)) << pcie::to_string(t) << " " << pcie::to_string(cause);
    }
  }
  EXPECT_EQ(destroy_qp(a), 0);
  EXPECT_EQ(destroy_qp(b), 0);
  EXPECT_EQ(destroy_srq(basic), 0);
}

TEST_F(XrcDevice, ADomainWithAnSrqOrTgtQpInItCannotBeClosed) {
  EXPECT_EQ(close_xrcd(xrcd_), EBUSY);
  // The device's own rule, for another process's objects: the last open stays while they do.
  hwif::CloseXrcdIn in;
  in.xrcdn = to_xrcd(xrcd_)->xrcdn;
  EXPECT_EQ(hwif::exec_cmd(r_.dev, in), EBUSY);
  in.xrcdn += 98;  // a domain nobody opened
  EXPECT_EQ(hwif::exec_cmd(r_.dev, in), EINVAL);
}

}  // namespace
}  // namespace softhca::driver::testing
