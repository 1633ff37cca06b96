// Data integrity through the public verbs C API (issue 2, acceptance "data integrity for every
// operation"): each operation of each transport moves exactly the bytes its work request names,
// nothing else in either buffer changes, and the completions carry the right status, opcode,
// byte_len, imm_data, wr_id, QPN (and for UD src_qp/slid). Sizes 0, 1, 7, 4096, MTU-1, MTU+1 and
// 1 MiB at path MTU 1024 and 4096 (UD, which has no path MTU: up to the port MTU, 4096), with one
// SGE or several (3 on the gathering side, 2 on the receiving side), between two devices and in
// loopback on one. Then atomics, inline data, the ibv_wr_* interface, postlists, an SRQ and a
// completion channel.
#include <endian.h>
#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "verbs_pair.h"

namespace softhca::conformance {
namespace {

enum class Op { kSend, kSendImm, kWrite, kWriteImm, kRead };

struct DataCase {
  ibv_qp_type type;
  Op op;
  Topology topology;
  ibv_mtu mtu;
  uint32_t size;
  bool multi_sge;
};

uint32_t mtu_bytes(ibv_mtu m) { return 128u << m; }  // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5

const char* op_name(Op op) {
  switch (op) {
    case Op::kSend: return "Send";
    case Op::kSendImm: return "SendWithImm";
    case Op::kWrite: return "RdmaWrite";
    case Op::kWriteImm: return "RdmaWriteWithImm";
    case Op::kRead: return "RdmaRead";
  }
  return "?";
}

const char* type_name(ibv_qp_type t) { return t == IBV_QPT_RC ? "Rc" : t == IBV_QPT_UC ? "Uc" : "Ud"; }

ibv_wr_opcode wr_opcode(Op op) {
  switch (op) {
    case Op::kSend: return IBV_WR_SEND;
    case Op::kSendImm: return IBV_WR_SEND_WITH_IMM;
    case Op::kWrite: return IBV_WR_RDMA_WRITE;
    case Op::kWriteImm: return IBV_WR_RDMA_WRITE_WITH_IMM;
    case Op::kRead: return IBV_WR_RDMA_READ;
  }
  return IBV_WR_SEND;
}

ibv_wc_opcode requester_opcode(Op op) {
  switch (op) {
    case Op::kSend:
    case Op::kSendImm: return IBV_WC_SEND;
    case Op::kWrite:
    case Op::kWriteImm: return IBV_WC_RDMA_WRITE;
    case Op::kRead: return IBV_WC_RDMA_READ;
  }
  return IBV_WC_SEND;
}

std::vector<DataCase> all_cases() {
  struct TypeOp {
    ibv_qp_type type;
    Op op;
  };
  const TypeOp ops[] = {{IBV_QPT_RC, Op::kSend},      {IBV_QPT_RC, Op::kSendImm}, {IBV_QPT_RC, Op::kWrite},
                        {IBV_QPT_RC, Op::kWriteImm},  {IBV_QPT_RC, Op::kRead},    {IBV_QPT_UC, Op::kSend},
                        {IBV_QPT_UC, Op::kSendImm},   {IBV_QPT_UC, Op::kWrite},   {IBV_QPT_UC, Op::kWriteImm},
                        {IBV_QPT_UD, Op::kSend},      {IBV_QPT_UD, Op::kSendImm}};
  std::vector<DataCase> cases;
  for (const TypeOp& to : ops) {
    for (ibv_mtu mtu : {IBV_MTU_1024, IBV_MTU_4096}) {
      const uint32_t m = mtu_bytes(mtu);
      // UD has no path MTU: a datagram may be as long as the port MTU (4096), so UD runs once, with
      // the sizes around both MTUs.
      if (to.type == IBV_QPT_UD && mtu != IBV_MTU_4096) continue;
      const std::set<uint32_t> sizes = to.type == IBV_QPT_UD
                                           ? std::set<uint32_t>{0, 1, 7, 1023, 1024, 4095, 4096}
                                           : std::set<uint32_t>{0, 1, 7, 4096, m - 1, m + 1, 1u << 20};
      for (uint32_t size : sizes) {
        for (bool multi : {false, true}) cases.push_back({to.type, to.op, Topology::kTwoDevices, mtu, size, multi});
      }
    }
    // Loopback on one device: fewer sizes, every operation.
    const std::set<uint32_t> loop_sizes =
        to.type == IBV_QPT_UD ? std::set<uint32_t>{1, 1024} : std::set<uint32_t>{1, 1025, 1u << 20};
    for (uint32_t size : loop_sizes) cases.push_back({to.type, to.op, Topology::kLoopback, IBV_MTU_1024, size, true});
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<DataCase>& info) {
  const DataCase& c = info.param;
  return std::string(type_name(c.type)) + op_name(c.op) + "_Mtu" + std::to_string(mtu_bytes(c.mtu)) + "_" +
         std::to_string(c.size) + "B_" + (c.multi_sge ? "3to2Sges" : "1Sge") +
         (c.topology == Topology::kLoopback ? "_Loopback" : "");
}

constexpr uint32_t kGap = 24;                  // bytes between SGEs, which must stay untouched
constexpr uint32_t kSlack = 64;                // receive buffers are this much larger than the message

// Buffer layout of DataIntegrity, sized to the message: the source region (what is sent, or read
// from), then the destination region (what is written, read into, or received into), then the
// receive buffer of a WRITE with immediate, each followed by a page of bytes that must stay as they
// were.
struct Layout {
  size_t src;
  size_t dst;
  size_t recv;
  size_t total;
};
Layout layout_for(uint32_t size) {
  const auto page = [](size_t n) { return (n + 4095) / 4096 * 4096; };
  const size_t region = page(size + 3 * kGap + kGrhBytes + kSlack) + 4096;  // message, gaps, GRH slot, slack
  return Layout{4096, 4096 + region, 4096 + 2 * region, 4096 + 2 * region + 8192};
}
// The other tests' fixed offsets in the default 4 MiB buffer.
constexpr size_t kSrcOff = 4096;
constexpr size_t kDstOff = 2 * kMiB + 4096;
constexpr uint64_t kSendWrId = 0x5e9d'0001;
constexpr uint64_t kRecvWrId = 0x9ecf'0002;

class DataIntegrity : public VerbsPair, public ::testing::WithParamInterface<DataCase> {};

TEST_P(DataIntegrity, DeliversExactlyTheBytesOfTheWorkRequestWithTheExpectedCompletions) {
  const DataCase& c = GetParam();
  const Layout l = layout_for(c.size);
  ASSERT_NO_FATAL_FAILURE(open(c.topology, l.total));
  QpOptions o;
  o.path_mtu = c.mtu;
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(c.type, o, &p));

  const uint64_t seed = (uint64_t{c.type} << 48) ^ (uint64_t(c.op) << 40) ^ (uint64_t{c.mtu} << 32) ^ c.size ^
                        (c.multi_sge ? 0x8000'0000u : 0u);
  fill_pattern(a_.bytes(), seed);
  fill_pattern(b_.bytes(), ~seed);
  std::vector<uint8_t> expect_a(a_.bytes().begin(), a_.bytes().end());
  std::vector<uint8_t> expect_b(b_.bytes().begin(), b_.bytes().end());

  const bool ud = c.type == IBV_QPT_UD;
  const bool has_imm = c.op == Op::kSendImm || c.op == Op::kWriteImm;
  const bool consumes_recv = c.op != Op::kWrite && c.op != Op::kRead;
  // A's list: gathered from, or (READ) scattered into. A zero-byte single-SGE case posts no SGE.
  std::vector<ibv_sge> local;
  if (c.multi_sge || c.size > 0) {
    local = split_sges(a_, c.op == Op::kRead ? l.dst : l.src, c.size, c.multi_sge ? 3 : 1, kGap);
  }
  std::vector<ibv_sge> recv;
  if (consumes_recv) {
    const bool write_imm = c.op == Op::kWriteImm;
    const auto len = static_cast<uint32_t>(write_imm ? 256 : c.size + (ud ? kGrhBytes : 0) + kSlack);
    recv = split_sges(b_, write_imm ? l.recv : l.dst, len, c.multi_sge ? 2 : 1, kGap);
    ASSERT_EQ(post_recv(p.b, kRecvWrId, recv), 0);
  }

  SendArgs args;
  args.opcode = wr_opcode(c.op);
  args.wr_id = kSendWrId;
  args.imm_host = 0x1a2b'0000u ^ c.size;
  if (c.op == Op::kWrite || c.op == Op::kWriteImm || c.op == Op::kRead) {
    args.remote_addr = b_.addr(c.op == Op::kRead ? l.src : l.dst);
    args.rkey = b_.mr->rkey;
  }
  if (ud) {
    args.ah = p.ah_to_b;
    args.remote_qpn = p.b->qp_num;
    args.remote_qkey = p.qkey;
  }
  ASSERT_EQ(post_send(p.a, args, local), 0);

  // What both buffers must hold afterwards.
  if (c.op == Op::kRead) {
    const auto from = expect_b.begin() + static_cast<ptrdiff_t>(l.src);
    const std::vector<uint8_t> payload(from, from + c.size);
    scatter(a_, expect_a, local, payload);
  } else {
    const std::vector<uint8_t> payload = gather(a_, expect_a, local);
    ASSERT_EQ(payload.size(), c.size);
    if (c.op == Op::kWrite || c.op == Op::kWriteImm) {
      std::copy(payload.begin(), payload.end(), expect_b.begin() + static_cast<ptrdiff_t>(l.dst));
    } else {
      scatter(b_, expect_b, recv, payload, ud ? kGrhBytes : 0);  // the GRH slot stays untouched: no GRH
    }
  }

  const ibv_wc s = poll_one(a_.cq);
  EXPECT_EQ(s.status, IBV_WC_SUCCESS) << wc_status_name(s.status);
  EXPECT_EQ(s.wr_id, kSendWrId);
  EXPECT_EQ(s.qp_num, p.a->qp_num);
  EXPECT_EQ(s.opcode, requester_opcode(c.op)) << wc_opcode_name(s.opcode);
  if (c.op == Op::kRead) {
    EXPECT_EQ(s.byte_len, c.size);
  }
  if (consumes_recv) {
    const ibv_wc r = poll_one(b_.cq);
    EXPECT_EQ(r.status, IBV_WC_SUCCESS) << wc_status_name(r.status);
    EXPECT_EQ(r.wr_id, kRecvWrId);
    EXPECT_EQ(r.qp_num, p.b->qp_num);
    EXPECT_EQ(r.opcode, c.op == Op::kWriteImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV) << wc_opcode_name(r.opcode);
    EXPECT_EQ(r.byte_len, c.size + (ud ? kGrhBytes : 0));
    EXPECT_EQ((r.wc_flags & IBV_WC_WITH_IMM) != 0, has_imm);
    if (has_imm) {
      EXPECT_EQ(be32toh(r.imm_data), args.imm_host);
    }
    if (ud) {
      EXPECT_EQ(r.src_qp, p.a->qp_num);
      EXPECT_EQ(r.slid, a_.lid);
      EXPECT_EQ(r.wc_flags & IBV_WC_GRH, 0u);
    }
  }
  EXPECT_TRUE(cq_is_empty(a_.cq));
  EXPECT_TRUE(cq_is_empty(b_.cq));
  EXPECT_TRUE(same_bytes(a_.bytes(), expect_a)) << "in A's buffer";
  EXPECT_TRUE(same_bytes(b_.bytes(), expect_b)) << "in B's buffer";
}

INSTANTIATE_TEST_SUITE_P(EveryOperation, DataIntegrity, ::testing::ValuesIn(all_cases()), case_name);

// ---- atomics ------------------------------------------------------------------------------------

constexpr size_t kTargetOff = 8192;  // 8-byte aligned
constexpr size_t kResultOff = 16384;

std::string topology_name(const ::testing::TestParamInfo<Topology>& info) {
  return info.param == Topology::kLoopback ? "Loopback" : "TwoDevices";
}

class Atomics : public VerbsPair, public ::testing::WithParamInterface<Topology> {
 protected:
  uint64_t load(const Endpoint& e, size_t off) const {
    uint64_t v = 0;
    std::memcpy(&v, e.buf + off, sizeof v);
    return v;
  }
  void store(const Endpoint& e, size_t off, uint64_t v) const { std::memcpy(e.buf + off, &v, sizeof v); }
  // Posts one atomic from A on B's target and returns its completion.
  ibv_wc atomic(const QpPair& p, ibv_wr_opcode opcode, uint64_t compare_add, uint64_t swap, uint64_t wr_id) {
    ibv_sge result = a_.sge(kResultOff, 8);
    SendArgs args;
    args.opcode = opcode;
    args.wr_id = wr_id;
    args.remote_addr = b_.addr(kTargetOff);
    args.rkey = b_.mr->rkey;
    args.compare_add = compare_add;
    args.swap = swap;
    EXPECT_EQ(post_send(p.a, args, std::span(&result, 1)), 0);
    return poll_one(a_.cq);
  }
};

TEST_P(Atomics, CompareAndSwapReturnsTheOriginalAndSwapsOnlyWhenTheCompareMatches) {
  ASSERT_NO_FATAL_FAILURE(open(GetParam()));
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, QpOptions{}, &p));
  constexpr uint64_t kOriginal = 0x0123'4567'89ab'cdefull;
  constexpr uint64_t kSwap = 0xfeed'face'cafe'beefull;
  store(b_, kTargetOff, kOriginal);

  store(a_, kResultOff, 0xdddd'dddd'dddd'ddddull);
  ibv_wc wc = atomic(p, IBV_WR_ATOMIC_CMP_AND_SWP, kOriginal + 1, kSwap, 1);  // compare misses
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.opcode, IBV_WC_COMP_SWAP) << wc_opcode_name(wc.opcode);
  EXPECT_EQ(wc.byte_len, 8u);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(load(a_, kResultOff), kOriginal);
  EXPECT_EQ(load(b_, kTargetOff), kOriginal);

  store(a_, kResultOff, 0xdddd'dddd'dddd'ddddull);
  wc = atomic(p, IBV_WR_ATOMIC_CMP_AND_SWP, kOriginal, kSwap, 2);  // compare matches
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(load(a_, kResultOff), kOriginal);
  EXPECT_EQ(load(b_, kTargetOff), kSwap);
  // The bytes around the target and the result are untouched.
  EXPECT_EQ(load(b_, kTargetOff - 8), 0u);
  EXPECT_EQ(load(b_, kTargetOff + 8), 0u);
  EXPECT_EQ(load(a_, kResultOff + 8), 0u);
}

TEST_P(Atomics, FetchAndAddReturnsTheOriginalAndAddsModulo2To64) {
  ASSERT_NO_FATAL_FAILURE(open(GetParam()));
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, QpOptions{}, &p));
  store(b_, kTargetOff, 0xffff'ffff'ffff'fffeull);

  ibv_wc wc = atomic(p, IBV_WR_ATOMIC_FETCH_AND_ADD, 5, 0, 7);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.opcode, IBV_WC_FETCH_ADD) << wc_opcode_name(wc.opcode);
  EXPECT_EQ(wc.byte_len, 8u);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(load(a_, kResultOff), 0xffff'ffff'ffff'fffeull);
  EXPECT_EQ(load(b_, kTargetOff), 3u);

  wc = atomic(p, IBV_WR_ATOMIC_FETCH_AND_ADD, 0x100, 0, 8);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(load(a_, kResultOff), 3u);
  EXPECT_EQ(load(b_, kTargetOff), 0x103u);
}

INSTANTIATE_TEST_SUITE_P(Both, Atomics, ::testing::Values(Topology::kTwoDevices, Topology::kLoopback),
                         topology_name);

// ---- inline data --------------------------------------------------------------------------------

struct InlineCase {
  ibv_qp_type type;
  Op op;  // kSend or kWrite
};

class InlineData : public VerbsPair, public ::testing::WithParamInterface<InlineCase> {};

TEST_P(InlineData, SendsEverySizeUpToMaxInlineDataFromAnUnregisteredBufferReusedAtOnce) {
  const InlineCase& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
  QpOptions o;
  o.max_inline_data = 256;
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(c.type, o, &p));
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(p.a, &attr, IBV_QP_CAP, &init), 0);
  const uint32_t max_inline = init.cap.max_inline_data;
  ASSERT_GE(max_inline, 256u);
  const bool ud = c.type == IBV_QPT_UD;

  for (uint32_t size : {1u, max_inline / 2, max_inline}) {
    SCOPED_TRACE("size " + std::to_string(size));
    std::vector<uint8_t> src(size);  // not registered: inline data is copied into the WQE
    fill_pattern(src, size);
    const std::vector<uint8_t> original = src;
    std::vector<uint8_t> expect_b(b_.bytes().begin(), b_.bytes().end());
    std::vector<ibv_sge> recv;
    if (c.op == Op::kSend) {
      recv = split_sges(b_, kDstOff, size + (ud ? kGrhBytes : 0) + kSlack, 1, 0);
      ASSERT_EQ(post_recv(p.b, size, recv), 0);
      scatter(b_, expect_b, recv, original, ud ? kGrhBytes : 0);
    } else {
      std::copy(original.begin(), original.end(), expect_b.begin() + static_cast<ptrdiff_t>(kDstOff));
    }
    ibv_sge sge{reinterpret_cast<uintptr_t>(src.data()), size, 0};
    SendArgs args;
    args.opcode = c.op == Op::kSend ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
    args.wr_id = size;
    args.flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    args.remote_addr = b_.addr(kDstOff);
    args.rkey = b_.mr->rkey;
    args.ah = p.ah_to_b;
    args.remote_qpn = p.b->qp_num;
    ASSERT_EQ(post_send(p.a, args, std::span(&sge, 1)), 0);
    std::fill(src.begin(), src.end(), uint8_t{0});  // the buffer is the application's again

    const ibv_wc s = poll_one(a_.cq);
    EXPECT_EQ(s.status, IBV_WC_SUCCESS) << wc_status_name(s.status);
    EXPECT_EQ(s.wr_id, size);
    if (c.op == Op::kSend) {
      const ibv_wc r = poll_one(b_.cq);
      EXPECT_EQ(r.status, IBV_WC_SUCCESS) << wc_status_name(r.status);
      EXPECT_EQ(r.byte_len, size + (ud ? kGrhBytes : 0));
    }
    EXPECT_TRUE(same_bytes(b_.bytes(), expect_b));
  }
}

INSTANTIATE_TEST_SUITE_P(SendAndWrite, InlineData,
                         ::testing::Values(InlineCase{IBV_QPT_RC, Op::kSend}, InlineCase{IBV_QPT_RC, Op::kWrite},
                                           InlineCase{IBV_QPT_UC, Op::kSend}, InlineCase{IBV_QPT_UC, Op::kWrite},
                                           InlineCase{IBV_QPT_UD, Op::kSend}),
                         [](const ::testing::TestParamInfo<InlineCase>& tp) {
                           return std::string(type_name(tp.param.type)) + op_name(tp.param.op);
                         });

// ---- postlists, SRQ, completion channel ---------------------------------------------------------

class Postlists : public VerbsPair {};

TEST_F(Postlists, ThirtyTwoWritesInOnePostWithOnlyTheLastSignaledAllLandAndCompleteOnce) {
  ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
  QpOptions o;
  o.sq_sig_all = 0;
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, o, &p));
  fill_pattern(a_.bytes(), 32);
  std::vector<uint8_t> expect_b(b_.bytes().begin(), b_.bytes().end());
  constexpr int kCount = 32;
  constexpr uint32_t kLen = 100;
  std::vector<ibv_sge> sges(kCount);
  std::vector<ibv_send_wr> wrs(kCount);
  for (int i = 0; i < kCount; ++i) {
    const size_t off = static_cast<size_t>(i) * 128;
    sges[i] = a_.sge(kSrcOff + off, kLen);
    SendArgs args;
    args.opcode = IBV_WR_RDMA_WRITE;
    args.wr_id = 100 + static_cast<uint64_t>(i);
    args.flags = i + 1 == kCount ? IBV_SEND_SIGNALED : 0;
    args.remote_addr = b_.addr(kDstOff + off);
    args.rkey = b_.mr->rkey;
    wrs[i] = make_wr(args, std::span(&sges[i], 1));
    if (i > 0) wrs[i - 1].next = &wrs[i];
    std::copy_n(a_.buf + kSrcOff + off, kLen, expect_b.begin() + static_cast<ptrdiff_t>(kDstOff + off));
  }
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.a, wrs.data(), &bad), 0);
  const ibv_wc wc = poll_one(a_.cq);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.wr_id, 100u + kCount - 1);
  EXPECT_TRUE(cq_is_empty(a_.cq));
  EXPECT_TRUE(same_bytes(b_.bytes(), expect_b));
}

TEST_F(Postlists, SendsOfDifferentSizesConsumeAReceivePostlistInOrder) {
  ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, QpOptions{}, &p));
  fill_pattern(a_.bytes(), 8);
  std::vector<uint8_t> expect_b(b_.bytes().begin(), b_.bytes().end());
  const uint32_t sizes[] = {0, 1, 1023, 1024, 1025, 7, 4096, 70000};
  constexpr int kCount = 8;
  constexpr size_t kSlot = 80 * 1024;
  std::vector<ibv_sge> recv_sges(kCount);
  std::vector<ibv_recv_wr> recvs(kCount);
  std::vector<ibv_sge> send_sges(kCount);
  std::vector<ibv_send_wr> sends(kCount);
  for (int i = 0; i < kCount; ++i) {
    const size_t off = static_cast<size_t>(i) * kSlot;
    recv_sges[i] = b_.sge(kSrcOff + off, sizes[i] + kSlack);
    recvs[i].wr_id = 200 + static_cast<uint64_t>(i);
    recvs[i].sg_list = &recv_sges[i];
    recvs[i].num_sge = 1;
    if (i > 0) recvs[i - 1].next = &recvs[i];
    send_sges[i] = a_.sge(kSrcOff + off, sizes[i]);
    SendArgs args;
    args.wr_id = 300 + static_cast<uint64_t>(i);
    sends[i] = make_wr(args, std::span(&send_sges[i], 1));
    if (i > 0) sends[i - 1].next = &sends[i];
    std::copy_n(a_.buf + kSrcOff + off, sizes[i], expect_b.begin() + static_cast<ptrdiff_t>(kSrcOff + off));
  }
  ibv_recv_wr* bad_recv = nullptr;
  ASSERT_EQ(ibv_post_recv(p.b, recvs.data(), &bad_recv), 0);
  ibv_send_wr* bad_send = nullptr;
  ASSERT_EQ(ibv_post_send(p.a, sends.data(), &bad_send), 0);
  std::vector<ibv_wc> sent;
  std::vector<ibv_wc> received;
  ASSERT_TRUE(poll_completions(a_.cq, kCount, sent));
  ASSERT_TRUE(poll_completions(b_.cq, kCount, received));
  for (int i = 0; i < kCount; ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    EXPECT_EQ(sent[i].status, IBV_WC_SUCCESS) << wc_status_name(sent[i].status);
    EXPECT_EQ(sent[i].wr_id, 300u + i);
    EXPECT_EQ(received[i].status, IBV_WC_SUCCESS) << wc_status_name(received[i].status);
    EXPECT_EQ(received[i].wr_id, 200u + i);
    EXPECT_EQ(received[i].byte_len, sizes[i]);
  }
  EXPECT_TRUE(same_bytes(b_.bytes(), expect_b));
}

class SharedReceiveQueue : public VerbsPair {};

TEST_F(SharedReceiveQueue, TwoQpsReceiveThroughOneSrqAndEveryMessageLandsInTheBufferItsWrIdNames) {
  ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
  ibv_srq* srq = create_srq(b_, 16, 2);
  ASSERT_NE(srq, nullptr) << errno_name(errno);
  QpOptions o;
  o.srq_b = srq;
  QpPair p1;
  QpPair p2;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, o, &p1));
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, o, &p2));
  fill_pattern(a_.bytes(), 5);
  fill_pattern(b_.bytes(), 6);
  constexpr size_t kSlot = 16384;
  constexpr int kRecvs = 4;
  // Each receive: two SGEs with a gap, 9000 bytes in all.
  std::vector<std::vector<ibv_sge>> recv_lists;
  for (int i = 0; i < kRecvs; ++i) {
    recv_lists.push_back(split_sges(b_, kDstOff + static_cast<size_t>(i) * kSlot, 9000, 2, kGap));
    ASSERT_EQ(post_srq_recv(srq, 1000 + static_cast<uint64_t>(i), recv_lists.back()), 0);
  }
  struct Message {
    ibv_qp* qp;
    uint32_t qpn_b;
    uint32_t size;
    size_t src_off;
  };
  const Message messages[] = {{p1.a, p1.b->qp_num, 100, kSrcOff},
                              {p2.a, p2.b->qp_num, 2000, kSrcOff + kSlot},
                              {p1.a, p1.b->qp_num, 8999, kSrcOff + 2 * kSlot},
                              {p2.a, p2.b->qp_num, 0, kSrcOff + 3 * kSlot}};
  uint64_t wr_id = 1;
  for (const Message& m : messages) {
    ibv_sge sge = a_.sge(m.src_off, m.size);
    SendArgs args;
    args.wr_id = wr_id++;
    ASSERT_EQ(post_send(m.qp, args, std::span(&sge, 1)), 0);
  }
  std::vector<ibv_wc> sent;
  std::vector<ibv_wc> received;
  ASSERT_TRUE(poll_completions(a_.cq, kRecvs, sent));
  ASSERT_TRUE(poll_completions(b_.cq, kRecvs, received));
  for (const ibv_wc& s : sent) EXPECT_EQ(s.status, IBV_WC_SUCCESS) << wc_status_name(s.status);
  std::set<uint64_t> used_wr_ids;
  std::vector<bool> delivered(kRecvs, false);
  for (const ibv_wc& r : received) {
    ASSERT_EQ(r.status, IBV_WC_SUCCESS) << wc_status_name(r.status);
    ASSERT_GE(r.wr_id, 1000u);
    ASSERT_LT(r.wr_id, 1000u + kRecvs);
    EXPECT_TRUE(used_wr_ids.insert(r.wr_id).second) << "receive " << r.wr_id << " completed twice";
    // Which message is it? The one sent on this QP with this length, not yet matched.
    int match = -1;
    for (int i = 0; i < kRecvs; ++i) {
      if (!delivered[i] && messages[i].qpn_b == r.qp_num && messages[i].size == r.byte_len) match = i;
    }
    ASSERT_GE(match, 0) << "no message of " << r.byte_len << " bytes on QP " << r.qp_num;
    delivered[match] = true;
    const std::vector<ibv_sge>& list = recv_lists[r.wr_id - 1000];
    const std::vector<uint8_t> got = gather(b_, b_.bytes(), list);
    const std::span<const uint8_t> want(a_.buf + messages[match].src_off, messages[match].size);
    EXPECT_TRUE(same_bytes(std::span<const uint8_t>(got).first(want.size()), want));
  }
}

class CompletionChannel : public VerbsPair {
 protected:
  // B's receive CQ on a non-blocking channel, and an RC pair whose B side completes into it.
  void open_channel_pair() {
    ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
    channel_ = create_channel(b_);
    ASSERT_NE(channel_, nullptr) << errno_name(errno);
    ASSERT_EQ(fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK), 0);
    cq_ = create_cq(b_, 16, channel_, nullptr);
    ASSERT_NE(cq_, nullptr) << errno_name(errno);
    QpOptions o;
    o.recv_cq_b = cq_;
    ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, o, &pair_));
  }
  // One 64-byte SEND from A into a receive posted with wr_id on B; A's completion polled.
  void send_one(uint64_t wr_id) {
    ibv_sge recv = b_.sge(kDstOff, 4096);
    ASSERT_EQ(post_recv(pair_.b, wr_id, std::span(&recv, 1)), 0);
    ibv_sge sge = a_.sge(kSrcOff, 64);
    SendArgs args;
    args.wr_id = wr_id;
    args.flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(post_send(pair_.a, args, std::span(&sge, 1)), 0);
    EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_SUCCESS);
  }
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  QpPair pair_;
};

TEST_F(CompletionChannel, AnArmedCqRaisesOneEventPerArmThatNamesTheCqAndItsContext) {
  ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
  ibv_comp_channel* channel = create_channel(b_);
  ASSERT_NE(channel, nullptr) << errno_name(errno);
  int cq_tag = 0;  // the cq_context the event must return
  ibv_cq* cq = create_cq(b_, 16, channel, &cq_tag);
  ASSERT_NE(cq, nullptr) << errno_name(errno);
  QpOptions o;
  o.recv_cq_b = cq;
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, o, &p));
  fill_pattern(a_.bytes(), 11);

  for (uint32_t round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // Round 2 arms for solicited completions only and sends a solicited message.
    const bool solicited = round == 2;
    ASSERT_EQ(ibv_req_notify_cq(cq, solicited ? 1 : 0), 0);
    ibv_sge recv = b_.sge(kDstOff, 4096);
    ASSERT_EQ(post_recv(p.b, 50 + round, std::span(&recv, 1)), 0);
    ibv_sge sge = a_.sge(kSrcOff + round * 4096, 1000 + round);
    SendArgs args;
    args.wr_id = round;
    args.flags = IBV_SEND_SIGNALED | (solicited ? unsigned{IBV_SEND_SOLICITED} : 0u);
    ASSERT_EQ(post_send(p.a, args, std::span(&sge, 1)), 0);

    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    ASSERT_TRUE(wait_cq_event(channel, &ev_cq, &ev_ctx));
    EXPECT_EQ(ev_cq, cq);
    EXPECT_EQ(ev_ctx, &cq_tag);
    ibv_ack_cq_events(ev_cq, 1);
    const ibv_wc r = poll_one(cq);
    EXPECT_EQ(r.status, IBV_WC_SUCCESS) << wc_status_name(r.status);
    EXPECT_EQ(r.wr_id, 50u + round);
    EXPECT_EQ(r.byte_len, 1000u + round);
    EXPECT_TRUE(same_bytes({b_.buf + kDstOff, r.byte_len}, {a_.buf + kSrcOff + round * 4096, r.byte_len}));
    EXPECT_EQ(poll_one(a_.cq).status, IBV_WC_SUCCESS);
  }
}

// The arm carries the consumer index (mlx5_arm_cq), and a CQ armed behind the CQEs written fires
// at once, as ConnectX does: a consumer that polled until empty and armed just after a completion
// came in is told of it (Open MPI's connection manager polls, then arms). Armed with everything
// polled, the next completion raises exactly one event.
TEST_F(CompletionChannel, ArmingACqThatHoldsAnUnpolledCompletionRaisesTheEventAtOnce) {
  ASSERT_NO_FATAL_FAILURE(open_channel_pair());
  ibv_comp_channel* const channel = channel_;
  ibv_cq* const cq = cq_;
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_NO_FATAL_FAILURE(send_one(1));  // B's CQ now holds a completion nobody polled
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  ASSERT_TRUE(wait_cq_event(channel, &ev_cq, &ev_ctx));  // Expect: the event, at the arm
  EXPECT_EQ(ev_cq, cq);
  ibv_ack_cq_events(ev_cq, 1);
  EXPECT_EQ(poll_one(cq).wr_id, 1u);

  // Expect: armed with nothing left to poll, no event until the next completion, then one.
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_ctx), -1);
  EXPECT_EQ(errno, EAGAIN);
  ASSERT_NO_FATAL_FAILURE(send_one(2));
  ASSERT_TRUE(wait_cq_event(channel, &ev_cq, &ev_ctx));
  EXPECT_EQ(ev_cq, cq);
  ibv_ack_cq_events(ev_cq, 1);
  EXPECT_EQ(poll_one(cq).wr_id, 2u);
  EXPECT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_ctx), -1);  // and only one
  EXPECT_EQ(errno, EAGAIN);
}

// The pattern of perftest's latency tests: take the event, arm, then poll. The CQE that raised
// the event is still in the CQ at the arm, and raises no second event; the next completion does.
TEST_F(CompletionChannel, ArmingAfterTheEventWithItsCompletionUnpolledRaisesNoSecondEvent) {
  ASSERT_NO_FATAL_FAILURE(open_channel_pair());
  ibv_comp_channel* const channel = channel_;
  ibv_cq* const cq = cq_;
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  for (uint64_t id = 1; id <= 3; ++id) {
    SCOPED_TRACE("completion " + std::to_string(id));
    ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
    ASSERT_NO_FATAL_FAILURE(send_one(id));
    ASSERT_TRUE(wait_cq_event(channel, &ev_cq, &ev_ctx));
    ibv_ack_cq_events(ev_cq, 1);
    ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);  // before polling, as perftest
    errno = 0;
    EXPECT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_ctx), -1);  // Expect: no second event
    EXPECT_EQ(errno, EAGAIN);
    EXPECT_EQ(poll_one(cq).wr_id, id);
    // The next round's arm comes with nothing pending: it only re-requests.
  }
}

// ---- the ibv_wr_* interface ---------------------------------------------------------------------

class WrInterface : public VerbsPair {};

TEST_F(WrInterface, OneBatchOfEveryRcOperationDeliversTheSameBytesAsPostSendWould) {
  ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
  QpOptions o;
  o.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
                     IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                     IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
  o.max_inline_data = 64;
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, o, &p));
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(p.a);
  ASSERT_NE(qx, nullptr);
  fill_pattern(a_.bytes(), 21);
  fill_pattern(b_.bytes(), 22);
  std::vector<uint8_t> expect_a(a_.bytes().begin(), a_.bytes().end());
  std::vector<uint8_t> expect_b(b_.bytes().begin(), b_.bytes().end());
  std::vector<uint8_t> inline1(48);
  std::vector<uint8_t> inline2(32);
  fill_pattern(inline1, 1);
  fill_pattern(inline2, 2);

  // B: receives for WRITE_WITH_IMM, SEND (2 SGEs) and SEND_WITH_IMM; an atomic target.
  constexpr size_t kTarget = 3 * kMiB;
  const uint64_t original = 40;
  std::memcpy(b_.buf + kTarget, &original, 8);
  std::memcpy(expect_b.data() + kTarget, &original, 8);
  std::vector<std::vector<ibv_sge>> recvs = {split_sges(b_, kDstOff + 0x10000, 64, 1, 0),
                                             split_sges(b_, kDstOff + 0x20000, 3000 + kSlack, 2, kGap),
                                             split_sges(b_, kDstOff + 0x30000, 64, 1, 0)};
  for (size_t i = 0; i < recvs.size(); ++i) ASSERT_EQ(post_recv(p.b, 10 + i, recvs[i]), 0);
  const std::vector<ibv_sge> send_list = split_sges(a_, kSrcOff + 0x20000, 3000, 3, kGap);

  ibv_wr_start(qx);
  qx->wr_flags = IBV_SEND_SIGNALED;
  qx->wr_id = 1;
  ibv_wr_rdma_write(qx, b_.mr->rkey, b_.addr(kDstOff));
  ibv_wr_set_sge(qx, a_.mr->lkey, a_.addr(kSrcOff), 1000);
  qx->wr_id = 2;
  ibv_wr_rdma_write_imm(qx, b_.mr->rkey, b_.addr(kDstOff + 0x8000), htobe32(0x22));
  ibv_wr_set_inline_data(qx, inline1.data(), inline1.size());
  qx->wr_id = 3;
  ibv_wr_send(qx);
  ibv_wr_set_sge_list(qx, send_list.size(), send_list.data());
  qx->wr_id = 4;
  ibv_wr_send_imm(qx, htobe32(0x44));
  ibv_wr_set_inline_data(qx, inline2.data(), inline2.size());
  qx->wr_id = 5;
  ibv_wr_rdma_read(qx, b_.mr->rkey, b_.addr(kSrcOff + 0x40000));
  ibv_wr_set_sge(qx, a_.mr->lkey, a_.addr(kDstOff), 2000);
  qx->wr_id = 6;
  ibv_wr_atomic_fetch_add(qx, b_.mr->rkey, b_.addr(kTarget), 2);
  ibv_wr_set_sge(qx, a_.mr->lkey, a_.addr(kDstOff + 0x10000), 8);
  qx->wr_id = 7;
  ibv_wr_atomic_cmp_swp(qx, b_.mr->rkey, b_.addr(kTarget), original + 2, 99);
  ibv_wr_set_sge(qx, a_.mr->lkey, a_.addr(kDstOff + 0x10008), 8);
  ASSERT_EQ(ibv_wr_complete(qx), 0);

  std::copy_n(a_.buf + kSrcOff, 1000, expect_b.begin() + static_cast<ptrdiff_t>(kDstOff));
  std::copy(inline1.begin(), inline1.end(), expect_b.begin() + static_cast<ptrdiff_t>(kDstOff + 0x8000));
  scatter(b_, expect_b, recvs[1], gather(a_, expect_a, send_list));
  scatter(b_, expect_b, recvs[2], inline2);
  std::copy_n(b_.buf + kSrcOff + 0x40000, 2000, expect_a.begin() + static_cast<ptrdiff_t>(kDstOff));
  const uint64_t after_add = original + 2;
  std::memcpy(expect_a.data() + kDstOff + 0x10000, &original, 8);
  std::memcpy(expect_a.data() + kDstOff + 0x10008, &after_add, 8);
  const uint64_t swapped = 99;
  std::memcpy(expect_b.data() + kTarget, &swapped, 8);

  std::vector<ibv_wc> sent;
  std::vector<ibv_wc> received;
  ASSERT_TRUE(poll_completions(a_.cq, 7, sent));
  ASSERT_TRUE(poll_completions(b_.cq, 3, received));
  const ibv_wc_opcode sent_ops[] = {IBV_WC_RDMA_WRITE, IBV_WC_RDMA_WRITE, IBV_WC_SEND,     IBV_WC_SEND,
                                    IBV_WC_RDMA_READ,  IBV_WC_FETCH_ADD,  IBV_WC_COMP_SWAP};
  for (size_t i = 0; i < sent.size(); ++i) {
    SCOPED_TRACE("sent " + std::to_string(i));
    EXPECT_EQ(sent[i].status, IBV_WC_SUCCESS) << wc_status_name(sent[i].status);
    EXPECT_EQ(sent[i].wr_id, i + 1);
    EXPECT_EQ(sent[i].opcode, sent_ops[i]) << wc_opcode_name(sent[i].opcode);
  }
  const uint32_t recv_len[] = {48, 3000, 32};
  const uint32_t recv_imm[] = {0x22, 0, 0x44};
  for (size_t i = 0; i < received.size(); ++i) {
    SCOPED_TRACE("received " + std::to_string(i));
    EXPECT_EQ(received[i].status, IBV_WC_SUCCESS) << wc_status_name(received[i].status);
    EXPECT_EQ(received[i].wr_id, 10 + i);
    EXPECT_EQ(received[i].opcode, i == 0 ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV);
    EXPECT_EQ(received[i].byte_len, recv_len[i]);
    EXPECT_EQ((received[i].wc_flags & IBV_WC_WITH_IMM) != 0, recv_imm[i] != 0);
    if (recv_imm[i] != 0) {
      EXPECT_EQ(be32toh(received[i].imm_data), recv_imm[i]);
    }
  }
  EXPECT_TRUE(same_bytes(a_.bytes(), expect_a)) << "in A's buffer";
  EXPECT_TRUE(same_bytes(b_.bytes(), expect_b)) << "in B's buffer";
}

TEST_F(WrInterface, UcWritesAndSendsInOneBatchDeliverTheirBytes) {
  ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
  QpOptions o;
  o.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_UC, o, &p));
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(p.a);
  ASSERT_NE(qx, nullptr);
  fill_pattern(a_.bytes(), 31);
  std::vector<uint8_t> expect_b(b_.bytes().begin(), b_.bytes().end());
  std::vector<ibv_sge> recv0 = split_sges(b_, kDstOff + 0x10000, 64, 1, 0);
  std::vector<ibv_sge> recv1 = split_sges(b_, kDstOff + 0x20000, 5000, 2, kGap);
  ASSERT_EQ(post_recv(p.b, 10, recv0), 0);
  ASSERT_EQ(post_recv(p.b, 11, recv1), 0);

  ibv_wr_start(qx);
  qx->wr_flags = IBV_SEND_SIGNALED;
  qx->wr_id = 1;
  ibv_wr_rdma_write(qx, b_.mr->rkey, b_.addr(kDstOff));
  ibv_wr_set_sge(qx, a_.mr->lkey, a_.addr(kSrcOff), 3000);
  qx->wr_id = 2;
  ibv_wr_rdma_write_imm(qx, b_.mr->rkey, b_.addr(kDstOff + 0x8000), htobe32(7));
  ibv_wr_set_sge(qx, a_.mr->lkey, a_.addr(kSrcOff + 0x8000), 1025);
  qx->wr_id = 3;
  ibv_wr_send(qx);
  ibv_wr_set_sge(qx, a_.mr->lkey, a_.addr(kSrcOff + 0x20000), 4000);
  ASSERT_EQ(ibv_wr_complete(qx), 0);
  std::copy_n(a_.buf + kSrcOff, 3000, expect_b.begin() + static_cast<ptrdiff_t>(kDstOff));
  std::copy_n(a_.buf + kSrcOff + 0x8000, 1025, expect_b.begin() + static_cast<ptrdiff_t>(kDstOff + 0x8000));
  scatter(b_, expect_b, recv1, std::span<const uint8_t>(a_.buf + kSrcOff + 0x20000, 4000));

  std::vector<ibv_wc> sent;
  std::vector<ibv_wc> received;
  ASSERT_TRUE(poll_completions(a_.cq, 3, sent));
  ASSERT_TRUE(poll_completions(b_.cq, 2, received));
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(sent[i].status, IBV_WC_SUCCESS) << wc_status_name(sent[i].status);
    EXPECT_EQ(sent[i].wr_id, i + 1);
  }
  EXPECT_EQ(received[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(received[0].byte_len, 1025u);
  EXPECT_EQ(be32toh(received[0].imm_data), 7u);
  EXPECT_EQ(received[1].opcode, IBV_WC_RECV);
  EXPECT_EQ(received[1].byte_len, 4000u);
  EXPECT_TRUE(same_bytes(b_.bytes(), expect_b));
}

TEST_F(WrInterface, UdSendsAddressedWithSetUdAddrLandAfterTheGrhSlot) {
  ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices));
  QpOptions o;
  o.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
  o.max_inline_data = 64;
  QpPair p;
  ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_UD, o, &p));
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(p.a);
  ASSERT_NE(qx, nullptr);
  fill_pattern(a_.bytes(), 41);
  std::vector<uint8_t> expect_b(b_.bytes().begin(), b_.bytes().end());
  std::vector<uint8_t> inline_data(40);
  fill_pattern(inline_data, 42);
  std::vector<ibv_sge> recv0 = split_sges(b_, kDstOff, kGrhBytes + 1024, 2, kGap);
  std::vector<ibv_sge> recv1 = split_sges(b_, kDstOff + 0x10000, kGrhBytes + 64, 1, 0);
  ASSERT_EQ(post_recv(p.b, 10, recv0), 0);
  ASSERT_EQ(post_recv(p.b, 11, recv1), 0);

  ibv_wr_start(qx);
  qx->wr_flags = IBV_SEND_SIGNALED;
  qx->wr_id = 1;
  ibv_wr_send(qx);
  ibv_wr_set_ud_addr(qx, p.ah_to_b, p.b->qp_num, p.qkey);  // address first, then data
  ibv_wr_set_sge(qx, a_.mr->lkey, a_.addr(kSrcOff), 1024);
  qx->wr_id = 2;
  ibv_wr_send_imm(qx, htobe32(0x77));
  ibv_wr_set_inline_data(qx, inline_data.data(), inline_data.size());  // data first, then address
  ibv_wr_set_ud_addr(qx, p.ah_to_b, p.b->qp_num, p.qkey);
  ASSERT_EQ(ibv_wr_complete(qx), 0);
  scatter(b_, expect_b, recv0, std::span<const uint8_t>(a_.buf + kSrcOff, 1024), kGrhBytes);
  scatter(b_, expect_b, recv1, inline_data, kGrhBytes);

  std::vector<ibv_wc> sent;
  std::vector<ibv_wc> received;
  ASSERT_TRUE(poll_completions(a_.cq, 2, sent));
  ASSERT_TRUE(poll_completions(b_.cq, 2, received));
  for (const ibv_wc& s : sent) EXPECT_EQ(s.status, IBV_WC_SUCCESS) << wc_status_name(s.status);
  EXPECT_EQ(received[0].byte_len, 1024u + kGrhBytes);
  EXPECT_EQ(received[0].src_qp, p.a->qp_num);
  EXPECT_EQ(received[1].byte_len, 40u + kGrhBytes);
  EXPECT_EQ(be32toh(received[1].imm_data), 0x77u);
  EXPECT_EQ(received[1].slid, a_.lid);
  EXPECT_TRUE(same_bytes(b_.bytes(), expect_b));
}

}  // namespace
}  // namespace softhca::conformance
