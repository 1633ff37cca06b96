#include "verbs_pair.h"

#include <endian.h>
#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

namespace softhca::conformance {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kPageBytes = 4096;

ibv_context* open_device_by_name(const char* name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return nullptr;
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n; ++i) {
    if (std::strcmp(ibv_get_device_name(list[i]), name) == 0) {
      ctx = ibv_open_device(list[i]);
      break;
    }
  }
  ibv_free_device_list(list);
  return ctx;
}

std::string wc_to_string(const ibv_wc& wc) {
  return "wr_id " + std::to_string(wc.wr_id) + ", status " + wc_status_name(wc.status) + ", opcode " +
         wc_opcode_name(wc.opcode) + ", byte_len " + std::to_string(wc.byte_len) + ", qp_num " +
         std::to_string(wc.qp_num);
}

}  // namespace

// ---- QP state machine ---------------------------------------------------------------------------

int step_attr(ibv_qp_type type, ibv_qp_state to, const QpOptions& o, uint32_t dest_qpn, uint16_t dlid, uint32_t psn,
              ibv_qp_attr* attr) {
  ibv_qp_attr& a = *attr;
  a = ibv_qp_attr{};
  a.qp_state = to;
  int mask = IBV_QP_STATE;
  switch (to) {
    case IBV_QPS_INIT:
      a.pkey_index = 0;
      a.port_num = kPort;
      mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (type == IBV_QPT_UD) {
        a.qkey = o.qkey;
        mask |= IBV_QP_QKEY;
      } else {
        a.qp_access_flags = o.access;
        mask |= IBV_QP_ACCESS_FLAGS;
      }
      break;
    case IBV_QPS_RTR:
      if (type == IBV_QPT_UD) break;
      a.path_mtu = o.path_mtu;
      a.dest_qp_num = dest_qpn;
      a.rq_psn = psn;
      a.ah_attr.dlid = dlid;
      a.ah_attr.port_num = kPort;
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (type == IBV_QPT_RC) {
        a.max_dest_rd_atomic = o.max_rd_atomic;
        a.min_rnr_timer = o.min_rnr_timer;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
      break;
    case IBV_QPS_RTS:
      a.sq_psn = psn;
      mask |= IBV_QP_SQ_PSN;
      if (type == IBV_QPT_RC) {
        a.timeout = o.timeout;
        a.retry_cnt = o.retry_cnt;
        a.rnr_retry = o.rnr_retry;
        a.max_rd_atomic = o.max_rd_atomic;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      }
      break;
    default:
      break;
  }
  return mask;
}

int modify_to_init(ibv_qp* qp, const QpOptions& o) {
  ibv_qp_attr a;
  const int mask = step_attr(qp->qp_type, IBV_QPS_INIT, o, 0, 0, 0, &a);
  return ibv_modify_qp(qp, &a, mask);
}

int modify_to_rtr(ibv_qp* qp, uint32_t dest_qpn, uint16_t dlid, uint32_t rq_psn, const QpOptions& o) {
  ibv_qp_attr a;
  const int mask = step_attr(qp->qp_type, IBV_QPS_RTR, o, dest_qpn, dlid, rq_psn, &a);
  return ibv_modify_qp(qp, &a, mask);
}

int modify_to_rts(ibv_qp* qp, uint32_t sq_psn, const QpOptions& o) {
  ibv_qp_attr a;
  const int mask = step_attr(qp->qp_type, IBV_QPS_RTS, o, 0, 0, sq_psn, &a);
  return ibv_modify_qp(qp, &a, mask);
}

ibv_qp_state query_state(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (ibv_query_qp(qp, &attr, IBV_QP_STATE, &init) != 0) return IBV_QPS_UNKNOWN;
  return attr.qp_state;
}

// ---- completions --------------------------------------------------------------------------------

::testing::AssertionResult poll_completions(ibv_cq* cq, size_t n, std::vector<ibv_wc>& out) {
  const auto deadline = Clock::now() + kDeadline;
  const size_t target = out.size() + n;
  while (out.size() < target) {
    ibv_wc wc[16];
    const int want = static_cast<int>(std::min<size_t>(16, target - out.size()));
    const int got = ibv_poll_cq(cq, want, wc);
    if (got < 0) return ::testing::AssertionFailure() << "ibv_poll_cq returned " << got;
    out.insert(out.end(), wc, wc + got);
    if (got == 0) {
      if (Clock::now() > deadline) {
        return ::testing::AssertionFailure() << "only " << (n - (target - out.size())) << " of " << n
                                             << " completions arrived within " << kDeadline.count() << " s";
      }
      std::this_thread::yield();
    }
  }
  return ::testing::AssertionSuccess();
}

ibv_wc poll_one(ibv_cq* cq) {
  std::vector<ibv_wc> wcs;
  if (auto r = poll_completions(cq, 1, wcs); !r) {
    ADD_FAILURE() << r.message();
    ibv_wc none{};
    none.wr_id = ~uint64_t{0};
    none.status = IBV_WC_GENERAL_ERR;
    return none;
  }
  return wcs.front();
}

::testing::AssertionResult cq_is_empty(ibv_cq* cq) {
  ibv_wc wc{};
  const int n = ibv_poll_cq(cq, 1, &wc);
  if (n == 0) return ::testing::AssertionSuccess();
  if (n < 0) return ::testing::AssertionFailure() << "ibv_poll_cq returned " << n;
  return ::testing::AssertionFailure() << "unexpected completion: " << wc_to_string(wc);
}

::testing::AssertionResult wait_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  const int flags = fcntl(channel->fd, F_GETFL);
  if (flags < 0 || fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return ::testing::AssertionFailure() << "cannot make the channel fd non-blocking: " << errno_name(errno);
  }
  const auto deadline = Clock::now() + kDeadline;
  for (;;) {
    if (ibv_get_cq_event(channel, cq, cq_context) == 0) return ::testing::AssertionSuccess();
    if (errno != EAGAIN) return ::testing::AssertionFailure() << "ibv_get_cq_event: " << errno_name(errno);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      return ::testing::AssertionFailure() << "no completion event within " << kDeadline.count() << " s";
    }
    pollfd pfd{channel->fd, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left)) < 0 && errno != EINTR) {
      return ::testing::AssertionFailure() << "poll: " << errno_name(errno);
    }
  }
}

// ---- bytes --------------------------------------------------------------------------------------

void fill_pattern(std::span<uint8_t> bytes, uint64_t seed) {
  std::mt19937_64 gen(seed);
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    const uint64_t v = gen();
    std::memcpy(bytes.data() + i, &v, 8);
  }
  if (i < bytes.size()) {
    const uint64_t v = gen();
    std::memcpy(bytes.data() + i, &v, bytes.size() - i);
  }
}

::testing::AssertionResult same_bytes(std::span<const uint8_t> actual, std::span<const uint8_t> expected) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << actual.size() << " vs " << expected.size();
  }
  if (actual.empty() || std::memcmp(actual.data(), expected.data(), actual.size()) == 0) {
    return ::testing::AssertionSuccess();
  }
  size_t first = actual.size();
  size_t differing = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] == expected[i]) continue;
    ++differing;
    first = std::min(first, i);
  }
  return ::testing::AssertionFailure() << differing << " bytes differ, the first at offset " << first << " (got 0x"
                                       << std::hex << int{actual[first]} << ", expected 0x" << int{expected[first]}
                                       << ")";
}

std::vector<ibv_sge> split_sges(const Endpoint& e, size_t offset, uint32_t length, uint32_t parts, uint32_t gap) {
  std::vector<ibv_sge> sges;
  const uint32_t base = length / parts;
  for (uint32_t i = 0; i < parts; ++i) {
    const uint32_t len = i + 1 == parts ? length - base * (parts - 1) : base;
    sges.push_back(e.sge(offset, len));
    offset += len + gap;
  }
  return sges;
}

std::vector<uint8_t> gather(const Endpoint& e, std::span<const uint8_t> image, std::span<const ibv_sge> sges) {
  std::vector<uint8_t> out;
  for (const ibv_sge& s : sges) {
    const size_t off = static_cast<size_t>(s.addr - e.addr(0));
    out.insert(out.end(), image.begin() + static_cast<ptrdiff_t>(off),
               image.begin() + static_cast<ptrdiff_t>(off + s.length));
  }
  return out;
}

void scatter(const Endpoint& e, std::span<uint8_t> image, std::span<const ibv_sge> sges, std::span<const uint8_t> data,
             size_t skip) {
  for (const ibv_sge& s : sges) {
    size_t off = static_cast<size_t>(s.addr - e.addr(0));
    size_t len = s.length;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    off += skip;
    len -= skip;
    skip = 0;
    const size_t n = std::min(len, data.size());
    std::copy_n(data.begin(), n, image.begin() + static_cast<ptrdiff_t>(off));
    data = data.subspan(n);
    if (data.empty()) return;
  }
}

// ---- names --------------------------------------------------------------------------------------

std::string wc_status_name(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS: return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR: return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR: return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_EEC_OP_ERR: return "IBV_WC_LOC_EEC_OP_ERR";
    case IBV_WC_LOC_PROT_ERR: return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR: return "IBV_WC_WR_FLUSH_ERR";
    case IBV_WC_MW_BIND_ERR: return "IBV_WC_MW_BIND_ERR";
    case IBV_WC_BAD_RESP_ERR: return "IBV_WC_BAD_RESP_ERR";
    case IBV_WC_LOC_ACCESS_ERR: return "IBV_WC_LOC_ACCESS_ERR";
    case IBV_WC_REM_INV_REQ_ERR: return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR: return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR: return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR: return "IBV_WC_RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "IBV_WC_RNR_RETRY_EXC_ERR";
    case IBV_WC_LOC_RDD_VIOL_ERR: return "IBV_WC_LOC_RDD_VIOL_ERR";
    case IBV_WC_REM_INV_RD_REQ_ERR: return "IBV_WC_REM_INV_RD_REQ_ERR";
    case IBV_WC_REM_ABORT_ERR: return "IBV_WC_REM_ABORT_ERR";
    case IBV_WC_INV_EECN_ERR: return "IBV_WC_INV_EECN_ERR";
    case IBV_WC_INV_EEC_STATE_ERR: return "IBV_WC_INV_EEC_STATE_ERR";
    case IBV_WC_FATAL_ERR: return "IBV_WC_FATAL_ERR";
    case IBV_WC_RESP_TIMEOUT_ERR: return "IBV_WC_RESP_TIMEOUT_ERR";
    case IBV_WC_GENERAL_ERR: return "IBV_WC_GENERAL_ERR";
    default: return "ibv_wc_status " + std::to_string(static_cast<int>(status));
  }
}

std::string wc_opcode_name(ibv_wc_opcode opcode) {
  switch (opcode) {
    case IBV_WC_SEND: return "IBV_WC_SEND";
    case IBV_WC_RDMA_WRITE: return "IBV_WC_RDMA_WRITE";
    case IBV_WC_RDMA_READ: return "IBV_WC_RDMA_READ";
    case IBV_WC_COMP_SWAP: return "IBV_WC_COMP_SWAP";
    case IBV_WC_FETCH_ADD: return "IBV_WC_FETCH_ADD";
    case IBV_WC_BIND_MW: return "IBV_WC_BIND_MW";
    case IBV_WC_LOCAL_INV: return "IBV_WC_LOCAL_INV";
    case IBV_WC_RECV: return "IBV_WC_RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM: return "IBV_WC_RECV_RDMA_WITH_IMM";
    default: return "ibv_wc_opcode " + std::to_string(static_cast<int>(opcode));
  }
}

std::string qp_state_name(ibv_qp_state state) {
  switch (state) {
    case IBV_QPS_RESET: return "IBV_QPS_RESET";
    case IBV_QPS_INIT: return "IBV_QPS_INIT";
    case IBV_QPS_RTR: return "IBV_QPS_RTR";
    case IBV_QPS_RTS: return "IBV_QPS_RTS";
    case IBV_QPS_SQD: return "IBV_QPS_SQD";
    case IBV_QPS_SQE: return "IBV_QPS_SQE";
    case IBV_QPS_ERR: return "IBV_QPS_ERR";
    case IBV_QPS_UNKNOWN: return "IBV_QPS_UNKNOWN";
    default: return "ibv_qp_state " + std::to_string(static_cast<int>(state));
  }
}

std::string errno_name(int err) {
  switch (err) {
    case 0: return "0";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EFAULT: return "EFAULT";
    case EBUSY: return "EBUSY";
    case EINVAL: return "EINVAL";
    case ENOSYS: return "ENOSYS";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    default: return "errno " + std::to_string(err);
  }
}

// ---- the fixture --------------------------------------------------------------------------------

void VerbsPair::open_endpoint(Endpoint& e, ibv_context* ctx, size_t buffer_bytes) {
  e.ctx = ctx;
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(ctx, kPort, &port), 0);
  ASSERT_EQ(port.state, IBV_PORT_ACTIVE);
  e.lid = port.lid;
  e.pd = ibv_alloc_pd(ctx);
  ASSERT_NE(e.pd, nullptr) << errno_name(errno);
  pds_.push_back(e.pd);
  e.cq = ibv_create_cq(ctx, 1024, nullptr, nullptr, 0);
  ASSERT_NE(e.cq, nullptr) << errno_name(errno);
  cqs_.push_back(e.cq);
  e.size = (buffer_bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  e.buf = static_cast<uint8_t*>(std::aligned_alloc(kPageBytes, e.size));
  ASSERT_NE(e.buf, nullptr);
  buffers_.push_back(e.buf);
  std::memset(e.buf, 0, e.size);
  e.mr = ibv_reg_mr(e.pd, e.buf, e.size, kAllAccess);
  ASSERT_NE(e.mr, nullptr) << errno_name(errno);
  mrs_.push_back(e.mr);
}

void VerbsPair::open(Topology topology, size_t buffer_bytes) {
  ibv_context* ctx0 = open_device_by_name("softhca_0");
  ASSERT_NE(ctx0, nullptr) << "softhca_0 not found";
  contexts_.push_back(ctx0);
  ibv_context* ctx1 = ctx0;
  if (topology == Topology::kTwoDevices) {
    ctx1 = open_device_by_name("softhca_1");
    ASSERT_NE(ctx1, nullptr) << "softhca_1 not found: run with SOFTHCA_NUM_DEVICES=2";
    contexts_.push_back(ctx1);
  }
  ASSERT_NO_FATAL_FAILURE(open_endpoint(a_, ctx0, buffer_bytes));
  ASSERT_NO_FATAL_FAILURE(open_endpoint(b_, ctx1, buffer_bytes));
  if (topology == Topology::kTwoDevices) {
    ASSERT_NE(a_.lid, b_.lid);
  } else {
    ASSERT_EQ(a_.lid, b_.lid);
  }
}

void VerbsPair::TearDown() {
  // Reverse dependency order: QPs, AHs and SRQs, then MRs, CQs, channels, PDs, contexts.
  for (ibv_qp* qp : qps_) EXPECT_EQ(ibv_destroy_qp(qp), 0);
  for (ibv_ah* ah : ahs_) EXPECT_EQ(ibv_destroy_ah(ah), 0);
  for (ibv_srq* srq : srqs_) EXPECT_EQ(ibv_destroy_srq(srq), 0);
  for (ibv_mr* mr : mrs_) EXPECT_EQ(ibv_dereg_mr(mr), 0);
  for (ibv_cq* cq : extra_cqs_) EXPECT_EQ(ibv_destroy_cq(cq), 0);
  for (ibv_cq* cq : cqs_) EXPECT_EQ(ibv_destroy_cq(cq), 0);
  for (ibv_comp_channel* ch : channels_) EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
  for (ibv_pd* pd : pds_) EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  for (ibv_context* ctx : contexts_) EXPECT_EQ(ibv_close_device(ctx), 0);
  for (uint8_t* buf : buffers_) std::free(buf);
  qps_.clear();
  ahs_.clear();
  srqs_.clear();
  mrs_.clear();
  extra_cqs_.clear();
  cqs_.clear();
  channels_.clear();
  pds_.clear();
  contexts_.clear();
  buffers_.clear();
}

ibv_qp* VerbsPair::create_qp(Endpoint& e, ibv_qp_type type, const QpOptions& o, ibv_srq* srq, ibv_cq* recv_cq,
                             ibv_qp_cap* caps) {
  ibv_qp_cap cap{};
  cap.max_send_wr = o.max_send_wr;
  cap.max_recv_wr = srq != nullptr ? 0 : o.max_recv_wr;
  cap.max_send_sge = o.max_send_sge;
  cap.max_recv_sge = srq != nullptr ? 0 : o.max_recv_sge;
  cap.max_inline_data = o.max_inline_data;
  ibv_qp* qp = nullptr;
  if (o.send_ops_flags != 0) {
    ibv_qp_init_attr_ex x{};
    x.qp_type = type;
    x.send_cq = e.cq;
    x.recv_cq = recv_cq != nullptr ? recv_cq : e.cq;
    x.srq = srq;
    x.cap = cap;
    x.sq_sig_all = o.sq_sig_all;
    x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    x.pd = e.pd;
    x.send_ops_flags = o.send_ops_flags;
    qp = ibv_create_qp_ex(e.ctx, &x);
    cap = x.cap;
  } else {
    ibv_qp_init_attr ia{};
    ia.qp_type = type;
    ia.send_cq = e.cq;
    ia.recv_cq = recv_cq != nullptr ? recv_cq : e.cq;
    ia.srq = srq;
    ia.cap = cap;
    ia.sq_sig_all = o.sq_sig_all;
    qp = ibv_create_qp(e.pd, &ia);
    cap = ia.cap;
  }
  if (qp != nullptr) {
    qps_.push_back(qp);
    if (caps != nullptr) *caps = cap;
  }
  return qp;
}

void VerbsPair::connect(ibv_qp_type type, const QpOptions& o, QpPair* out) {
  QpPair p;
  p.type = type;
  p.qkey = o.qkey;
  p.a = create_qp(a_, type, o);
  ASSERT_NE(p.a, nullptr) << "ibv_create_qp on A: " << errno_name(errno);
  p.b = create_qp(b_, type, o, o.srq_b, o.recv_cq_b);
  ASSERT_NE(p.b, nullptr) << "ibv_create_qp on B: " << errno_name(errno);
  ASSERT_EQ(modify_to_init(p.a, o), 0);
  ASSERT_EQ(modify_to_init(p.b, o), 0);
  ASSERT_EQ(modify_to_rtr(p.a, p.b->qp_num + o.dest_qpn_skew_a, b_.lid, kPsnB, o), 0);
  ASSERT_EQ(modify_to_rtr(p.b, p.a->qp_num + o.dest_qpn_skew_b, a_.lid, kPsnA, o), 0);
  ASSERT_EQ(modify_to_rts(p.a, kPsnA, o), 0);
  ASSERT_EQ(modify_to_rts(p.b, kPsnB, o), 0);
  if (type == IBV_QPT_UD) {
    p.ah_to_b = create_ah(a_, b_.lid);
    ASSERT_NE(p.ah_to_b, nullptr) << errno_name(errno);
    p.ah_to_a = create_ah(b_, a_.lid);
    ASSERT_NE(p.ah_to_a, nullptr) << errno_name(errno);
  }
  *out = p;
}

ibv_mr* VerbsPair::reg_mr(Endpoint& e, size_t offset, size_t length, unsigned int access) {
  ibv_mr* mr = ibv_reg_mr(e.pd, e.buf + offset, length, static_cast<int>(access));
  if (mr != nullptr) mrs_.push_back(mr);
  return mr;
}

ibv_cq* VerbsPair::create_cq(Endpoint& e, int cqe, ibv_comp_channel* channel, void* cq_context) {
  ibv_cq* cq = ibv_create_cq(e.ctx, cqe, cq_context, channel, 0);
  if (cq != nullptr) extra_cqs_.push_back(cq);
  return cq;
}

ibv_srq* VerbsPair::create_srq(Endpoint& e, uint32_t max_wr, uint32_t max_sge) {
  ibv_srq_init_attr attr{};
  attr.attr.max_wr = max_wr;
  attr.attr.max_sge = max_sge;
  ibv_srq* srq = ibv_create_srq(e.pd, &attr);
  if (srq != nullptr) srqs_.push_back(srq);
  return srq;
}

ibv_comp_channel* VerbsPair::create_channel(Endpoint& e) {
  ibv_comp_channel* ch = ibv_create_comp_channel(e.ctx);
  if (ch != nullptr) channels_.push_back(ch);
  return ch;
}

ibv_ah* VerbsPair::create_ah(Endpoint& e, uint16_t dlid) {
  ibv_ah_attr attr{};
  attr.dlid = dlid;
  attr.port_num = kPort;
  ibv_ah* ah = ibv_create_ah(e.pd, &attr);
  if (ah != nullptr) ahs_.push_back(ah);
  return ah;
}

int VerbsPair::post_recv(ibv_qp* qp, uint64_t wr_id, std::span<ibv_sge> sges) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<int>(sges.size());
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

int VerbsPair::post_srq_recv(ibv_srq* srq, uint64_t wr_id, std::span<ibv_sge> sges) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<int>(sges.size());
  ibv_recv_wr* bad = nullptr;
  return ibv_post_srq_recv(srq, &wr, &bad);
}

ibv_send_wr VerbsPair::make_wr(const SendArgs& args, std::span<ibv_sge> sges) {
  ibv_send_wr wr{};
  wr.wr_id = args.wr_id;
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<int>(sges.size());
  wr.opcode = args.opcode;
  wr.send_flags = args.flags;
  wr.imm_data = htobe32(args.imm_host);
  switch (args.opcode) {
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      wr.wr.atomic.remote_addr = args.remote_addr;
      wr.wr.atomic.rkey = args.rkey;
      wr.wr.atomic.compare_add = args.compare_add;
      wr.wr.atomic.swap = args.swap;
      break;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
      wr.wr.rdma.remote_addr = args.remote_addr;
      wr.wr.rdma.rkey = args.rkey;
      break;
    default:
      if (args.ah != nullptr) {
        wr.wr.ud.ah = args.ah;
        wr.wr.ud.remote_qpn = args.remote_qpn;
        wr.wr.ud.remote_qkey = args.remote_qkey;
      }
      break;
  }
  return wr;
}

int VerbsPair::post_send(ibv_qp* qp, const SendArgs& args, std::span<ibv_sge> sges) {
  ibv_send_wr wr = make_wr(args, sges);
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

}  // namespace softhca::conformance
