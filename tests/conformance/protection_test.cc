// Protection and isolation through the public verbs C API (issue 7): protection domains isolate
// (a QP uses only keys of its own PD, locally and as a responder); an rkey opens exactly its MR's
// range with exactly its access rights; deregistering an MR revokes its keys at once, even when
// the same memory is registered again. Every case is a row of docs/bad-input.md (bad_input_table.h);
// the rows that must succeed show the checks are not stricter than the range and rights.
#include <cstring>
#include <string>
#include <vector>

#include "bad_input_fixture.h"
#include "bad_input_table.h"
#include "verbs_pair.h"

namespace softhca::conformance {
namespace {

// Remote-write, remote-read and atomic rights of an MR, as a reader of the table says them.
constexpr unsigned int kReadOnly = IBV_ACCESS_REMOTE_READ;
constexpr unsigned int kWriteOnly = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
constexpr size_t kPatternSeed = 11;

const std::string kAccessError = "requester IBV_WC_REM_ACCESS_ERR; QP IBV_QPS_ERR" + kFlushed;
const std::string kLocalError = "requester IBV_WC_LOC_PROT_ERR; QP IBV_QPS_ERR" + kFlushed;

class Protection : public BadInput {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
    ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, QpOptions{}, &p_));
    fill_pattern(b_.bytes().subspan(kSmallMrOff, kSmallMrBytes), kPatternSeed);
  }
  void TearDown() override {
    for (ibv_mr* mr : other_pd_mrs_) EXPECT_EQ(ibv_dereg_mr(mr), 0);
    for (ibv_pd* pd : other_pds_) EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    VerbsPair::TearDown();
  }

  // An MR over e's small-MR range on a second PD of e's device.
  ibv_mr* mr_on_another_pd(Endpoint& e, unsigned int access = kAllAccess) {
    ibv_pd* pd = ibv_alloc_pd(e.ctx);
    EXPECT_NE(pd, nullptr) << errno_name(errno);
    if (pd == nullptr) return nullptr;
    other_pds_.push_back(pd);
    ibv_mr* mr = ibv_reg_mr(pd, e.buf + kSmallMrOff, kSmallMrBytes, static_cast<int>(access));
    EXPECT_NE(mr, nullptr) << errno_name(errno);
    if (mr != nullptr) other_pd_mrs_.push_back(mr);
    return mr;
  }

  // A one-sided WR from A to B's memory at `offset` with `rkey`; A's side at kDstOff (READ,
  // atomics) or kSrcOff (WRITE).
  ibv_send_wr remote_wr(ibv_wr_opcode op, size_t offset, uint32_t length, uint32_t rkey) {
    bad_sge_ = a_.sge(op == IBV_WR_RDMA_WRITE ? kSrcOff : kDstOff, length);
    SendArgs args;
    args.opcode = op;
    args.remote_addr = b_.addr(offset);
    args.rkey = rkey;
    args.compare_add = 1;
    args.swap = 2;
    return make_wr(args, std::span(&bad_sge_, 1));
  }

  // Posts one signaled WR from A and returns "requester STATUS; ..." with the buffers' state.
  std::string post_alone(ibv_send_wr wr) {
    snapshot();
    wr.wr_id = 1;
    wr.send_flags |= IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(p_.a, &wr, &bad), 0);
    const ibv_wc wc = poll_one(a_.cq);
    return "requester " + wc_status_name(wc.status) + "; QP " + qp_state_name(query_state(p_.a));
  }
  // Whether B's small-MR range and A's landing area hold what a successful `op` leaves there.
  [[nodiscard]] bool landed(ibv_wr_opcode op, size_t b_offset, uint32_t length) const {
    if (op == IBV_WR_RDMA_WRITE) return std::memcmp(b_.buf + b_offset, a_.buf + kSrcOff, length) == 0;
    return std::memcmp(a_.buf + kDstOff, b_.buf + b_offset, length) == 0;
  }

  QpPair p_;
  std::vector<ibv_pd*> other_pds_;
  std::vector<ibv_mr*> other_pd_mrs_;
};

// ---- protection domains ------------------------------------------------------------------------

TEST_F(Protection, AnLkeyOfAnotherPdOfTheSameDeviceFailsWithLocalProtectionError) {
  ibv_mr* other = mr_on_another_pd(a_);
  ASSERT_NE(other, nullptr);
  SendArgs args;
  bad_sge_ = ibv_sge{a_.addr(kSmallMrOff), 64, other->lkey};
  expect_row("RC SEND gathering through the lkey of an MR on another PD of the same device", kLocalError,
             error_then_flush(p_.a, make_wr(args, std::span(&bad_sge_, 1))));
}

TEST_F(Protection, AnRdmaWriteWithAnRkeyOfAnotherPdAtTheResponderFailsWithRemoteAccessError) {
  ibv_mr* other = mr_on_another_pd(b_);
  ASSERT_NE(other, nullptr);
  expect_row("RC RDMA WRITE with the rkey of an MR on another PD of the responder's device (range and rights fit)",
             kAccessError, error_then_flush(p_.a, remote_wr(IBV_WR_RDMA_WRITE, kSmallMrOff, 64, other->rkey)));
}

TEST_F(Protection, AnRdmaReadWithAnRkeyOfAnotherPdAtTheResponderFailsWithRemoteAccessError) {
  ibv_mr* other = mr_on_another_pd(b_);
  ASSERT_NE(other, nullptr);
  expect_row("RC RDMA READ with the rkey of an MR on another PD of the responder's device", kAccessError,
             error_then_flush(p_.a, remote_wr(IBV_WR_RDMA_READ, kSmallMrOff, 64, other->rkey)));
}

TEST_F(Protection, AnAtomicWithAnRkeyOfAnotherPdAtTheResponderFailsWithRemoteAccessError) {
  ibv_mr* other = mr_on_another_pd(b_);
  ASSERT_NE(other, nullptr);
  expect_row("RC ATOMIC FETCH_AND_ADD with the rkey of an MR on another PD of the responder's device", kAccessError,
             error_then_flush(p_.a, remote_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, kSmallMrOff, 8, other->rkey)));
}

TEST_F(Protection, AReceiveBufferWithAnLkeyOfAnotherPdFailsOnBothSides) {
  ibv_mr* other = mr_on_another_pd(b_);
  ASSERT_NE(other, nullptr);
  ibv_sge recv{b_.addr(kSmallMrOff), 256, other->lkey};
  ASSERT_EQ(post_recv(p_.b, 9, std::span(&recv, 1)), 0);
  snapshot();
  ibv_sge sge = a_.sge(kSrcOff, 100);
  ASSERT_EQ(post_send(p_.a, SendArgs{}, std::span(&sge, 1)), 0);
  const ibv_wc s = poll_one(a_.cq);
  const ibv_wc r = poll_one(b_.cq);
  expect_row("RC SEND into a receive buffer whose lkey is of an MR on another PD of the responder",
             "responder IBV_WC_LOC_PROT_ERR; requester IBV_WC_REM_OP_ERR; buffers untouched",
             "responder " + wc_status_name(r.status) + "; requester " + wc_status_name(s.status) + "; " +
                 buffers_state());
}

// ---- an rkey opens its range with its rights, nothing more ------------------------------------

struct RangeCase {
  const char* name;
  const char* input;
  ibv_wr_opcode opcode;
  unsigned int access;   // of the 4 KiB target MR
  int64_t offset;        // from the MR's start
  uint32_t length;
  bool allowed;
};

class RkeyRange : public Protection, public ::testing::WithParamInterface<RangeCase> {};

TEST_P(RkeyRange, OpensExactlyTheMrsRangeWithItsRights) {
  const RangeCase& c = GetParam();
  ibv_mr* target = reg_mr(b_, kSmallMrOff, kSmallMrBytes, c.access);
  ASSERT_NE(target, nullptr) << errno_name(errno);
  const size_t offset = static_cast<size_t>(static_cast<int64_t>(kSmallMrOff) + c.offset);
  fill_pattern(a_.bytes().subspan(kSrcOff, c.length), kPatternSeed + 1);
  ibv_send_wr wr = remote_wr(c.opcode, offset, c.length, target->rkey);
  if (!c.allowed) {
    expect_row(c.input, kAccessError, error_then_flush(p_.a, wr));
    return;
  }
  std::string observed = post_alone(wr);
  observed += landed(c.opcode, offset, c.length) ? "; the bytes moved" : "; the bytes did NOT move";
  expect_row(c.input, "requester IBV_WC_SUCCESS; QP IBV_QPS_RTS; the bytes moved", observed);
}

constexpr auto kMrBytes = static_cast<int64_t>(kSmallMrBytes);

INSTANTIATE_TEST_SUITE_P(
    Rc, RkeyRange,
    ::testing::Values(
        RangeCase{"WriteWholeMr", "RC RDMA WRITE of exactly the remote MR's 4096 bytes", IBV_WR_RDMA_WRITE, kAllAccess,
                  0, 4096, true},
        RangeCase{"WriteOneByteBeforeStart", "RC RDMA WRITE of 8 bytes starting 1 byte before the remote MR",
                  IBV_WR_RDMA_WRITE, kAllAccess, -1, 8, false},
        RangeCase{"WriteOneByteAfterEnd", "RC RDMA WRITE of 8 bytes starting 1 byte after the remote MR's last byte",
                  IBV_WR_RDMA_WRITE, kAllAccess, kMrBytes + 1, 8, false},
        RangeCase{"WriteLastByte", "RC RDMA WRITE of 1 byte at the remote MR's last byte", IBV_WR_RDMA_WRITE,
                  kAllAccess, kMrBytes - 1, 1, true},
        RangeCase{"WriteCrossingEndByOne", "RC RDMA WRITE of 9 bytes starting 8 bytes before the remote MR's end",
                  IBV_WR_RDMA_WRITE, kAllAccess, kMrBytes - 8, 9, false},
        RangeCase{"ReadCrossingEndByOne", "RC RDMA READ of 2048 bytes starting 2047 bytes before the remote MR's end",
                  IBV_WR_RDMA_READ, kAllAccess, kMrBytes - 2047, 2048, false},
        RangeCase{"ReadOneByteBeforeStart", "RC RDMA READ of 8 bytes starting 1 byte before the remote MR",
                  IBV_WR_RDMA_READ, kAllAccess, -1, 8, false},
        RangeCase{"WriteToReadOnlyMr", "RC RDMA WRITE to a read-only MR (IBV_ACCESS_REMOTE_READ only)",
                  IBV_WR_RDMA_WRITE, kReadOnly, 0, 64, false},
        RangeCase{"ReadFromReadOnlyMr", "RC RDMA READ from a read-only MR (IBV_ACCESS_REMOTE_READ only)",
                  IBV_WR_RDMA_READ, kReadOnly, 0, 64, true},
        RangeCase{"ReadFromWriteOnlyMr",
                  "RC RDMA READ from a write-only MR (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)",
                  IBV_WR_RDMA_READ, kWriteOnly, 0, 64, false},
        RangeCase{"WriteToWriteOnlyMr",
                  "RC RDMA WRITE to a write-only MR (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)",
                  IBV_WR_RDMA_WRITE, kWriteOnly, 0, 64, true},
        RangeCase{"FetchAddOnWriteOnlyMr", "RC ATOMIC FETCH_AND_ADD on a write-only MR (no IBV_ACCESS_REMOTE_ATOMIC)",
                  IBV_WR_ATOMIC_FETCH_AND_ADD, kWriteOnly, 0, 8, false},
        RangeCase{"CompareSwapOnReadWriteMr",
                  "RC ATOMIC CMP_AND_SWP on an MR with every right but IBV_ACCESS_REMOTE_ATOMIC",
                  IBV_WR_ATOMIC_CMP_AND_SWP, kAllAccess & ~IBV_ACCESS_REMOTE_ATOMIC, 0, 8, false}),
    [](const ::testing::TestParamInfo<RangeCase>& tp) { return std::string(tp.param.name); });

// ---- deregistration revokes at once -------------------------------------------------------------

enum class Revoked { kRkeyWrite, kRkeyRead, kRkeyAtomic, kLkeySend, kRkeyWriteAfterReregister };

struct DeregCase {
  const char* name;
  const char* input;
  Revoked what;
};

class UseAfterDereg : public Protection, public ::testing::WithParamInterface<DeregCase> {};

TEST_P(UseAfterDereg, FailsWithAnAccessErrorAndLeavesTheMemory) {
  const DeregCase& c = GetParam();
  Endpoint& owner = c.what == Revoked::kLkeySend ? a_ : b_;
  ibv_mr* mr = ibv_reg_mr(owner.pd, owner.buf + kSmallMrOff, kSmallMrBytes, static_cast<int>(kAllAccess));
  ASSERT_NE(mr, nullptr) << errno_name(errno);
  const uint32_t lkey = mr->lkey;
  const uint32_t rkey = mr->rkey;
  // The MR worked before: one WRITE through it lands.
  if (c.what != Revoked::kLkeySend) {
    fill_pattern(a_.bytes().subspan(kSrcOff, 64), kPatternSeed + 2);
    ASSERT_EQ(post_alone(remote_wr(IBV_WR_RDMA_WRITE, kSmallMrOff, 64, rkey)),
              "requester IBV_WC_SUCCESS; QP IBV_QPS_RTS");
    ASSERT_TRUE(landed(IBV_WR_RDMA_WRITE, kSmallMrOff, 64));
    fill_pattern(a_.bytes().subspan(kSrcOff, 64), kPatternSeed + 3);  // what a revoked WRITE would bring
  }
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  ibv_mr* again = nullptr;
  if (c.what == Revoked::kRkeyWriteAfterReregister) {
    again = reg_mr(b_, kSmallMrOff, kSmallMrBytes, kAllAccess);  // same memory, same rights, new keys
    ASSERT_NE(again, nullptr) << errno_name(errno);
    EXPECT_NE(again->rkey, rkey);
  }
  std::string observed;
  switch (c.what) {
    case Revoked::kRkeyWrite:
    case Revoked::kRkeyWriteAfterReregister:
      observed = error_then_flush(p_.a, remote_wr(IBV_WR_RDMA_WRITE, kSmallMrOff, 64, rkey));
      break;
    case Revoked::kRkeyRead:
      observed = error_then_flush(p_.a, remote_wr(IBV_WR_RDMA_READ, kSmallMrOff, 64, rkey));
      break;
    case Revoked::kRkeyAtomic:
      observed = error_then_flush(p_.a, remote_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, kSmallMrOff, 8, rkey));
      break;
    case Revoked::kLkeySend: {
      bad_sge_ = ibv_sge{a_.addr(kSmallMrOff), 64, lkey};
      observed = error_then_flush(p_.a, make_wr(SendArgs{}, std::span(&bad_sge_, 1)));
      break;
    }
  }
  expect_row(c.input, c.what == Revoked::kLkeySend ? kLocalError : kAccessError, observed);
}

INSTANTIATE_TEST_SUITE_P(
    Rc, UseAfterDereg,
    ::testing::Values(
        DeregCase{"WriteWithOldRkey", "RC RDMA WRITE with the rkey of an MR deregistered after a WRITE through it",
                  Revoked::kRkeyWrite},
        DeregCase{"ReadWithOldRkey", "RC RDMA READ with the rkey of a deregistered MR", Revoked::kRkeyRead},
        DeregCase{"FetchAddWithOldRkey", "RC ATOMIC FETCH_AND_ADD with the rkey of a deregistered MR",
                  Revoked::kRkeyAtomic},
        DeregCase{"SendWithOldLkey", "RC SEND gathering through the lkey of a deregistered MR", Revoked::kLkeySend},
        DeregCase{"WriteWithOldRkeyAfterReregistering",
                  "RC RDMA WRITE with the old rkey after its MR was deregistered and the same memory registered "
                  "again (new keys)",
                  Revoked::kRkeyWriteAfterReregister}),
    [](const ::testing::TestParamInfo<DeregCase>& tp) { return std::string(tp.param.name); });

}  // namespace
}  // namespace softhca::conformance
