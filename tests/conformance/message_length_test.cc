// Message lengths at and past the device's max_msg_sz, through the public verbs API: every length
// up to max_msg_sz is carried whole, anything longer fails the work request with a local length
// error (IBA 9.7.5.2.1: a message longer than the port's maximum is a local length error), also for
// SGE lengths with bit 31 set, which a send data segment cannot carry (hwif::kMaxDataSegBytes).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "bad_input_fixture.h"
#include "bad_input_table.h"

namespace softhca::conformance {
namespace {

class MessageLength : public BadInput {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices, kBufferBytes));
    ibv_device_attr attr{};
    ASSERT_EQ(ibv_query_device(a_.ctx, &attr), 0);
    ibv_port_attr port{};
    ASSERT_EQ(ibv_query_port(a_.ctx, kPort, &port), 0);
    max_msg_ = port.max_msg_sz;
    ASSERT_GE(kBufferBytes, 2 * max_msg_ + 2 * kMiB) << "the buffers must hold a whole message each way";
    ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, QpOptions{}, &p_));
    small_ = reg_mr(a_, 0, kMiB, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(small_, nullptr) << errno_name(errno);
  }

  // One signaled RDMA WRITE of `length` bytes from A's buffer at offset 0 (lkey `lkey`) to B's
  // buffer at kDst; its completion.
  ibv_wc write(uint64_t length, uint32_t lkey) {
    ibv_sge sge{a_.addr(0), static_cast<uint32_t>(length), lkey};
    SendArgs args;
    args.opcode = IBV_WR_RDMA_WRITE;
    args.wr_id = 7;
    args.remote_addr = b_.addr(kDst);
    args.rkey = b_.mr->rkey;
    EXPECT_EQ(post_send(p_.a, args, std::span(&sge, 1)), 0);
    return poll_one(a_.cq);
  }

  static constexpr size_t kBufferBytes = 20 * kMiB;
  static constexpr size_t kDst = 10 * kMiB;
  uint64_t max_msg_ = 0;
  QpPair p_;
  ibv_mr* small_ = nullptr;
};

TEST_F(MessageLength, AnRdmaWriteOfExactlyMaxMsgSzIsCarriedWhole) {
  for (size_t i = 0; i < max_msg_; ++i) a_.buf[i] = static_cast<uint8_t>(i * 7 + 3);
  std::memset(b_.buf + kDst, 0, max_msg_ + 1);
  const ibv_wc wc = write(max_msg_, a_.mr->lkey);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(std::memcmp(a_.buf, b_.buf + kDst, max_msg_), 0);
  EXPECT_EQ(b_.buf[kDst + max_msg_], 0) << "one byte past the message was written";
}

TEST_F(MessageLength, ASendOfExactlyMaxMsgSzFillsAReceiveBufferOfThatSize) {
  for (size_t i = 0; i < max_msg_; ++i) a_.buf[i] = static_cast<uint8_t>(i * 13 + 1);
  ibv_sge recv = b_.sge(kDst, static_cast<uint32_t>(max_msg_));
  ASSERT_EQ(post_recv(p_.b, 9, std::span(&recv, 1)), 0);
  ibv_sge sge = a_.sge(0, static_cast<uint32_t>(max_msg_));
  SendArgs args;
  args.wr_id = 7;
  ASSERT_EQ(post_send(p_.a, args, std::span(&sge, 1)), 0);
  const ibv_wc s = poll_one(a_.cq);
  const ibv_wc r = poll_one(b_.cq);
  EXPECT_EQ(s.status, IBV_WC_SUCCESS) << wc_status_name(s.status);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS) << wc_status_name(r.status);
  EXPECT_EQ(r.byte_len, max_msg_);
  EXPECT_EQ(std::memcmp(a_.buf, b_.buf + kDst, max_msg_), 0);
}

TEST_F(MessageLength, AnRdmaReadOfExactlyMaxMsgSzIsCarriedWhole) {
  for (size_t i = 0; i < max_msg_; ++i) b_.buf[kDst + i] = static_cast<uint8_t>(i * 5 + 11);
  ibv_sge sge = a_.sge(0, static_cast<uint32_t>(max_msg_));
  SendArgs args;
  args.opcode = IBV_WR_RDMA_READ;
  args.wr_id = 7;
  args.remote_addr = b_.addr(kDst);
  args.rkey = b_.mr->rkey;
  ASSERT_EQ(post_send(p_.a, args, std::span(&sge, 1)), 0);
  const ibv_wc wc = poll_one(a_.cq);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(std::memcmp(a_.buf, b_.buf + kDst, max_msg_), 0);
}

// Each length past max_msg_sz from a 1 MiB MR: the status says the message is too long (not that
// the MR is too short: the length is checked first, as on hardware), the QP goes to ERR and the
// target is untouched. 2^31 and 2^32 - 1 have bit 31 set, which once read as an inline segment and
// completed 0x80000000 bytes with success, having moved none.
TEST_F(MessageLength, EveryLengthPastMaxMsgSzFailsWithALocalLengthError) {
  for (const uint64_t length : {max_msg_ + 1, uint64_t{0x40000000}, uint64_t{0x7fffffff}, uint64_t{0x80000000},
                                uint64_t{0x80000010}, uint64_t{0xffffffff}}) {
    SCOPED_TRACE(length);
    QpPair p;
    ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, QpOptions{}, &p));
    p_ = p;
    snapshot();
    const ibv_wc wc = write(length, small_->lkey);
    char hex[32];
    std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(length));
    expect_row(std::string("RC RDMA WRITE of ") + hex + " bytes (past max_msg_sz) from a 1 MiB MR",
               "requester IBV_WC_LOC_LEN_ERR; QP IBV_QPS_ERR; buffers untouched",
               "requester " + wc_status_name(wc.status) + "; QP " + qp_state_name(query_state(p.a)) + "; " +
                   buffers_state());
  }
}

}  // namespace
}  // namespace softhca::conformance
