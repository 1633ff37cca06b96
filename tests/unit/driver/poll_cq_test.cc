// poll_cq decoding of hand-written CQEs (verbs-abi.md §6.3): requester and responder, byte_len,
// error syndromes, the owner bit across a wrap, selective signalling, SRQ by wqe_counter.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "fake_device.h"
#include "test_util.h"

namespace softhca::driver::testing {
namespace {

hwif::Cqe64 req_cqe(ibv_qp* qp, hwif::WqeOpcode op, uint16_t wqe_counter, uint32_t byte_cnt = 0) {
  hwif::Cqe64 c{};
  c.sop_drop_qpn = (uint32_t{static_cast<uint8_t>(op)} << 24) | qp->qp_num;
  c.wqe_counter = wqe_counter;
  c.byte_cnt = byte_cnt;
  return c;
}

hwif::Cqe64 resp_cqe(ibv_qp* qp, uint16_t wqe_counter, uint32_t byte_cnt) {
  hwif::Cqe64 c{};
  c.sop_drop_qpn = qp->qp_num;
  c.wqe_counter = wqe_counter;
  c.byte_cnt = byte_cnt;
  return c;
}

class PollCq : public ::testing::Test {
 protected:
  void SetUp() override {
    cq_ = h_.cq(255);
    qp_ = h_.qp(IBV_QPT_RC, 16, 1, 0, 0, false, cq_);
    h_.to_rts(qp_);
  }
  void post(uint64_t id, ibv_wr_opcode op = IBV_WR_SEND, unsigned int flags = IBV_SEND_SIGNALED) {
    ibv_send_wr wr = send_wr(id, &sge_, 1, op, flags);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(post_send(qp_, &wr, &bad), 0);
  }
  void post_recv_wr(uint64_t id) {
    ibv_recv_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge_;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(post_recv(qp_, &wr, &bad), 0);
  }
  void cqe(const hwif::Cqe64& c, hwif::CqeOpcode op) { write_cqe(h_.cqes(cq_), 8, pi_++, c, op); }

  DeviceHarness h_;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  std::array<uint8_t, 64> buf_{};
  ibv_sge sge_{addr_of(buf_.data()), 64, 0x100};
  uint32_t pi_ = 0;
};

TEST_F(PollCq, ASuccessfulSendCompletesWithItsWrIdAndAdvancesTheConsumerIndexRecord) {
  post(41);
  ibv_wc wc{};
  EXPECT_EQ(ibv_poll_cq(cq_, 1, &wc), 0);  // nothing written yet: the ring starts invalid
  cqe(req_cqe(qp_, hwif::WqeOpcode::kSend, 0), hwif::CqeOpcode::kReq);
  ASSERT_EQ(ibv_poll_cq(cq_, 4, &wc), 1);
  EXPECT_EQ(wc.wr_id, 41u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  EXPECT_EQ(wc.qp_num, qp_->qp_num);
  EXPECT_EQ(wc.wc_flags, 0u);
  EXPECT_EQ(h_.cq_dbrec(cq_)->set_ci.get(), 1u);
}

TEST_F(PollCq, RdmaReadReportsTheCqesByteCountAndAtomicsReport8) {
  post(1, IBV_WR_RDMA_READ);
  post(2, IBV_WR_RDMA_WRITE_WITH_IMM);
  cqe(req_cqe(qp_, hwif::WqeOpcode::kRdmaRead, 0, 4096), hwif::CqeOpcode::kReq);
  cqe(req_cqe(qp_, hwif::WqeOpcode::kRdmaWriteImm, 1), hwif::CqeOpcode::kReq);
  std::array<ibv_wc, 4> wc{};
  ASSERT_EQ(poll_cq(cq_, 4, wc.data()), 2);
  EXPECT_EQ(wc[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wc[0].byte_len, 4096u);
  EXPECT_EQ(wc[1].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(wc[1].wc_flags, static_cast<unsigned>(IBV_WC_WITH_IMM));

  ibv_send_wr cas = send_wr(3, &sge_, 1, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_SEND_SIGNALED);
  ibv_send_wr fa = send_wr(4, &sge_, 1, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_SEND_SIGNALED);
  cas.next = &fa;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp_, &cas, &bad), 0);
  cqe(req_cqe(qp_, hwif::WqeOpcode::kAtomicCs, 2, 0), hwif::CqeOpcode::kReq);
  cqe(req_cqe(qp_, hwif::WqeOpcode::kAtomicFa, 3, 0), hwif::CqeOpcode::kReq);
  ASSERT_EQ(poll_cq(cq_, 4, wc.data()), 2);
  EXPECT_EQ(wc[0].wr_id, 3u);
  EXPECT_EQ(wc[0].opcode, IBV_WC_COMP_SWAP);
  EXPECT_EQ(wc[0].byte_len, 8u);
  EXPECT_EQ(wc[1].wr_id, 4u);
  EXPECT_EQ(wc[1].opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(wc[1].byte_len, 8u);
}

TEST_F(PollCq, ReceivesCompleteInOrderWithImmediateDataAsCarried) {
  post_recv_wr(100);
  post_recv_wr(101);
  hwif::Cqe64 a = resp_cqe(qp_, 0, 17);
  const uint8_t imm[4] = {0xde, 0xad, 0xbe, 0xef};
  std::memcpy(static_cast<void*>(&a.imm_inval_pkey), imm, 4);
  cqe(a, hwif::CqeOpcode::kRespSendImm);
  hwif::Cqe64 b = resp_cqe(qp_, 0, 0);
  std::memcpy(static_cast<void*>(&b.imm_inval_pkey), imm, 4);
  cqe(b, hwif::CqeOpcode::kRespWrImm);
  std::array<ibv_wc, 2> wc{};
  ASSERT_EQ(poll_cq(cq_, 2, wc.data()), 2);
  EXPECT_EQ(wc[0].wr_id, 100u);
  EXPECT_EQ(wc[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(wc[0].byte_len, 17u);
  EXPECT_TRUE(wc[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(std::memcmp(&wc[0].imm_data, imm, 4), 0);
  EXPECT_EQ(wc[1].wr_id, 101u);
  EXPECT_EQ(wc[1].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(std::memcmp(&wc[1].imm_data, imm, 4), 0);
}

TEST_F(PollCq, AUdReceiveReportsSourceQpSlSlidAndTheGrhFlag) {
  ibv_qp* ud = h_.qp(IBV_QPT_UD, 16, 1, 0, 0, false, cq_);
  h_.to_state(ud, IBV_QPS_INIT);
  ibv_recv_wr wr{};
  wr.wr_id = 5;
  wr.sg_list = &sge_;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(post_recv(ud, &wr, &bad), 0);
  hwif::Cqe64 c = resp_cqe(ud, 0, 40 + 12);
  c.flags_rqpn = (1u << 28) | (3u << 24) | 0x00abcd;
  c.slid = 0x42;
  c.ml_path = 0x85;
  c.imm_inval_pkey = 1;  // pkey index
  cqe(c, hwif::CqeOpcode::kRespSend);
  ibv_wc wc{};
  ASSERT_EQ(poll_cq(cq_, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.qp_num, ud->qp_num);
  EXPECT_EQ(wc.src_qp, 0xabcdu);
  EXPECT_EQ(wc.sl, 3);
  EXPECT_EQ(wc.slid, 0x42);
  EXPECT_EQ(wc.dlid_path_bits, 0x05);
  EXPECT_EQ(wc.pkey_index, 1);
  EXPECT_EQ(wc.byte_len, 52u);
  EXPECT_EQ(wc.wc_flags, static_cast<unsigned>(IBV_WC_GRH));
}

TEST_F(PollCq, ErrorSyndromesMapToTheirWcStatusAndCarryTheVendorSyndrome) {
  const std::vector<std::pair<uint8_t, ibv_wc_status>> table{
      {0x01, IBV_WC_LOC_LEN_ERR},     {0x02, IBV_WC_LOC_QP_OP_ERR},  {0x04, IBV_WC_LOC_PROT_ERR},
      {0x05, IBV_WC_WR_FLUSH_ERR},    {0x06, IBV_WC_MW_BIND_ERR},    {0x10, IBV_WC_BAD_RESP_ERR},
      {0x11, IBV_WC_LOC_ACCESS_ERR},  {0x12, IBV_WC_REM_INV_REQ_ERR}, {0x13, IBV_WC_REM_ACCESS_ERR},
      {0x14, IBV_WC_REM_OP_ERR},      {0x15, IBV_WC_RETRY_EXC_ERR},  {0x16, IBV_WC_RNR_RETRY_EXC_ERR},
      {0x22, IBV_WC_REM_ABORT_ERR},   {0x77, IBV_WC_GENERAL_ERR}};
  for (size_t i = 0; i < table.size(); ++i) {
    post(1000 + i);
    hwif::ErrCqe64 e{};
    e.syndrome = table[i].first;
    e.vendor_err_synd = 0x5c;
    e.s_wqe_opcode_qpn = (uint32_t{0x0a} << 24) | qp_->qp_num;
    e.wqe_counter = static_cast<uint16_t>(i);
    cqe(load_as<hwif::Cqe64>(&e), hwif::CqeOpcode::kReqErr);
    ibv_wc wc{};
    ASSERT_EQ(poll_cq(cq_, 1, &wc), 1) << i;
    EXPECT_EQ(wc.status, table[i].second) << int{table[i].first};
    EXPECT_EQ(wc.vendor_err, 0x5cu);
    EXPECT_EQ(wc.wr_id, 1000 + i);
    EXPECT_EQ(wc.qp_num, qp_->qp_num);
  }
  // A flushed receive consumes the next RQ WQE.
  post_recv_wr(77);
  hwif::ErrCqe64 e{};
  e.syndrome = 0x05;
  e.s_wqe_opcode_qpn = qp_->qp_num;
  cqe(load_as<hwif::Cqe64>(&e), hwif::CqeOpcode::kRespErr);
  ibv_wc wc{};
  ASSERT_EQ(poll_cq(cq_, 1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc.wr_id, 77u);
}

TEST(PollCqWrap, TheOwnerBitFlipsOnEachPassOfTheRing) {
  DeviceHarness h;
  ibv_cq* cq = h.cq(3);  // 4 entries
  ASSERT_EQ(cq->cqe, 3);
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 1, 0, 0, true, cq);
  h.to_rts(qp);
  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 1};
  for (uint16_t i = 0; i < 6; ++i) {
    ibv_send_wr wr = send_wr(i, &sge, 1);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  }
  hwif::Cqe64* ring = h.cqes(cq);
  for (uint32_t i = 0; i < 4; ++i) write_cqe(ring, 2, i, req_cqe(qp, hwif::WqeOpcode::kSend, static_cast<uint16_t>(i)), hwif::CqeOpcode::kReq);
  std::array<ibv_wc, 8> wc{};
  ASSERT_EQ(poll_cq(cq, 8, wc.data()), 4);
  // Slots 0..3 still hold pass-0 CQEs (owner 0): not valid for indices 4..7.
  EXPECT_EQ(poll_cq(cq, 8, wc.data()), 0);
  write_cqe(ring, 2, 4, req_cqe(qp, hwif::WqeOpcode::kSend, 4), hwif::CqeOpcode::kReq);
  write_cqe(ring, 2, 5, req_cqe(qp, hwif::WqeOpcode::kSend, 5), hwif::CqeOpcode::kReq);
  EXPECT_EQ(ring[0].op_own & 1, 1);
  ASSERT_EQ(poll_cq(cq, 8, wc.data()), 2);
  EXPECT_EQ(wc[0].wr_id, 4u);
  EXPECT_EQ(wc[1].wr_id, 5u);
  EXPECT_EQ(h.cq_dbrec(cq)->set_ci.get(), 6u);
}

TEST(PollCqSelective, OneCqeRetiresEveryUnsignaledWqeBeforeIt) {
  DeviceHarness h;
  ibv_cq* cq = h.cq();
  // Legacy RC, one SGE: one-block WQEs, and the smallest ring (16 blocks) holds exactly 16.
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 1, 0, 0, false, cq);
  h.to_rts(qp);
  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 1};
  std::vector<ibv_send_wr> wrs;
  for (uint64_t i = 0; i < 16; ++i) wrs.push_back(send_wr(10 + i, &sge, 1, IBV_WR_SEND, i == 15 ? IBV_SEND_SIGNALED : 0));
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp, link(wrs), &bad), 0);
  EXPECT_EQ(ctrl_at(h.sq(qp)).fm_ce_se, 0);
  EXPECT_EQ(ctrl_at(h.sq(qp) + 15 * 64).fm_ce_se, hwif::kCtrlCqUpdate);
  ibv_send_wr more = send_wr(20, &sge, 1);
  EXPECT_EQ(post_send(qp, &more, &bad), ENOMEM);

  write_cqe(h.cqes(cq), 8, 0, req_cqe(qp, hwif::WqeOpcode::kSend, 15), hwif::CqeOpcode::kReq);
  std::array<ibv_wc, 4> wc{};
  ASSERT_EQ(poll_cq(cq, 4, wc.data()), 1);
  EXPECT_EQ(wc[0].wr_id, 25u);
  std::vector<ibv_send_wr> again;
  for (uint64_t i = 0; i < 16; ++i) again.push_back(send_wr(30 + i, &sge, 1));
  EXPECT_EQ(post_send(qp, link(again), &bad), 0);
}

TEST(PollCqSrq, AnSrqCompletionIsFoundByWqeCounterAndItsWqeIsRecycled) {
  DeviceHarness h;
  ibv_cq* cq = h.cq();
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 3;
  sa.attr.max_sge = 2;
  ibv_srq* srq = create_srq(h.pd(), &sa);
  ASSERT_NE(srq, nullptr);
  const hwif::CreateSrqIn& in = h.dev.srqs.at(srq->handle);
  EXPECT_EQ(in.log_wqe_cnt, 2u);
  EXPECT_EQ(in.log_stride, 6u);  // next segment + 2 data segments -> 64 B
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 1, 0, 0, false, cq, 16, 1, srq);
  EXPECT_EQ(h.dev.qps.at(qp->qp_num).srqn, srq->handle);

  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 0x77};
  for (uint64_t i = 0; i < 3; ++i) {
    ibv_recv_wr wr{};
    wr.wr_id = 500 + i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(post_srq_recv(srq, &wr, &bad), 0);
  }
  auto* ring = h.host(in.ring_addr);
  auto* dbrec = h.host<hwif::SrqDbRec>(in.dbrec_addr);
  EXPECT_EQ(dbrec->counter.get(), 3u);
  // WQE 1: next -> 2, one data segment, then the terminator.
  EXPECT_EQ(seg_at<hwif::SrqNextSeg>(ring + 64).next_wqe_index.get(), 2u);
  EXPECT_EQ(seg_at<hwif::DataSeg>(ring + 64 + 16).lkey.get(), 0x77u);
  EXPECT_EQ(seg_at<hwif::DataSeg>(ring + 64 + 32).lkey.get(), hwif::kInvalidLkey);

  write_cqe(h.cqes(cq), 8, 0, resp_cqe(qp, 1, 8), hwif::CqeOpcode::kRespSend);
  ibv_wc wc{};
  ASSERT_EQ(poll_cq(cq, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 501u);
  // WQE 1 went to the free list's tail: the old sentinel 3 now links to it.
  EXPECT_EQ(seg_at<hwif::SrqNextSeg>(ring + 3 * 64).next_wqe_index.get(), 1u);
  ibv_recv_wr wr{};
  wr.wr_id = 600;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(post_srq_recv(srq, &wr, &bad), 0);  // into WQE 3
  EXPECT_EQ(post_srq_recv(srq, &wr, &bad), ENOMEM);  // WQE 1 is the sentinel now
  EXPECT_EQ(destroy_srq(srq), EBUSY);  // a QP uses it
  ASSERT_EQ(h.destroy(qp), 0);
  EXPECT_EQ(destroy_srq(srq), 0);
}

TEST(PollCqClean, DestroyingAQpDropsItsUnpolledCqesAndKeepsTheOthersInOrder) {
  DeviceHarness h;
  ibv_cq* cq = h.cq(7);
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 8;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_wr = 1;
  a.cap.max_recv_sge = 1;
  a.sq_sig_all = 1;
  ibv_qp* keep = create_qp(h.pd(), &a, 0);
  ibv_qp* gone = create_qp(h.pd(), &a, 0);
  ASSERT_NE(keep, nullptr);
  ASSERT_NE(gone, nullptr);
  h.to_rts(keep);
  h.to_rts(gone);
  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 1};
  for (uint64_t i = 0; i < 2; ++i) {
    ibv_send_wr w1 = send_wr(10 + i, &sge, 1);
    ibv_send_wr w2 = send_wr(20 + i, &sge, 1);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(post_send(keep, &w1, &bad), 0);
    ASSERT_EQ(post_send(gone, &w2, &bad), 0);
  }
  hwif::Cqe64* ring = h.cqes(cq);
  write_cqe(ring, 3, 0, req_cqe(keep, hwif::WqeOpcode::kSend, 0), hwif::CqeOpcode::kReq);
  write_cqe(ring, 3, 1, req_cqe(gone, hwif::WqeOpcode::kSend, 0), hwif::CqeOpcode::kReq);
  write_cqe(ring, 3, 2, req_cqe(keep, hwif::WqeOpcode::kSend, 1), hwif::CqeOpcode::kReq);
  write_cqe(ring, 3, 3, req_cqe(gone, hwif::WqeOpcode::kSend, 1), hwif::CqeOpcode::kReq);
  ASSERT_EQ(destroy_qp(gone), 0);
  std::array<ibv_wc, 4> wc{};
  ASSERT_EQ(poll_cq(cq, 4, wc.data()), 2);
  EXPECT_EQ(wc[0].wr_id, 10u);
  EXPECT_EQ(wc[1].wr_id, 11u);
  EXPECT_EQ(poll_cq(cq, 4, wc.data()), 0);
  EXPECT_EQ(destroy_qp(keep), 0);
}

}  // namespace
}  // namespace softhca::driver::testing
