// observe_workload MANIFEST: a verbs program (public C API only) that exercises every operation
// softhca puts on the wire, for the capture and trace acceptance tests. Between softhca_0 (A) and
// softhca_1 (B) in this process (SOFTHCA_NUM_DEVICES=2), path MTU 1024:
//   RC: SEND (1 and 3 packets), SEND with immediate, RDMA WRITE (1 and 3 packets), RDMA WRITE with
//       immediate, RDMA READ (3-packet and 1-packet responses), atomic compare-and-swap, fetch-and-add
//   UC: SEND, RDMA WRITE (3 packets), RDMA WRITE with immediate
//   UD: SEND, SEND with immediate
// Every completion is polled with a deadline and checked (status, and the bytes that landed), so a
// capture of a run that exits 0 shows only successful traffic. At the end it writes MANIFEST, a JSON
// object with what a decoder must find: the QP numbers, rkeys and immediates used.
// Exit: 0 on success, 1 on any failure (with the reason on stderr), 2 on usage errors.
#include <infiniband/verbs.h>

#include <arpa/inet.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr uint8_t kPort = 1;
constexpr uint32_t kQkey = 0x11111111;
constexpr size_t kBufferBytes = 1 << 16;
constexpr size_t kGrhBytes = 40;  // UD receive buffers start with room for a GRH (ibv_post_recv(3))
constexpr auto kDeadline = std::chrono::seconds(5);
constexpr unsigned int kAllAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
// Immediates, host order; sent as htonl().
constexpr uint32_t kImmSend = 0x11223344;
constexpr uint32_t kImmWrite = 0x55667788;
constexpr uint32_t kImmUcWrite = 0x99aabbcc;
constexpr uint32_t kImmUd = 0xddeeff00;
// Where in each buffer things go: sources at 0, targets from kTarget on.
constexpr size_t kTarget = 0x8000;
constexpr size_t kAtomic = 0xf000;  // 8-byte aligned

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

struct Side {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* buf = nullptr;
  uint16_t lid = 0;
  [[nodiscard]] uint64_t addr(size_t off) const { return reinterpret_cast<uintptr_t>(buf + off); }
};

void open_side(Side& s, const char* name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) fail("ibv_get_device_list failed");
  for (int i = 0; i < n; ++i) {
    if (std::strcmp(ibv_get_device_name(list[i]), name) == 0) s.ctx = ibv_open_device(list[i]);
  }
  ibv_free_device_list(list);
  if (s.ctx == nullptr) fail(std::string("cannot open ") + name + " (SOFTHCA_NUM_DEVICES=2?)");
  s.pd = ibv_alloc_pd(s.ctx);
  s.cq = ibv_create_cq(s.ctx, 256, nullptr, nullptr, 0);
  s.buf = static_cast<uint8_t*>(std::aligned_alloc(4096, kBufferBytes));
  if (s.pd == nullptr || s.cq == nullptr || s.buf == nullptr) fail(std::string(name) + ": PD/CQ/buffer");
  std::memset(s.buf, 0, kBufferBytes);
  s.mr = ibv_reg_mr(s.pd, s.buf, kBufferBytes, static_cast<int>(kAllAccess));
  if (s.mr == nullptr) fail(std::string(name) + ": ibv_reg_mr");
  ibv_port_attr port{};
  if (ibv_query_port(s.ctx, kPort, &port) != 0) fail(std::string(name) + ": ibv_query_port");
  s.lid = port.lid;
}

void close_side(Side& s) {
  if (s.mr != nullptr) ibv_dereg_mr(s.mr);
  if (s.cq != nullptr) ibv_destroy_cq(s.cq);
  if (s.pd != nullptr) ibv_dealloc_pd(s.pd);
  if (s.ctx != nullptr) ibv_close_device(s.ctx);
  std::free(s.buf);
}

ibv_qp* create_qp(Side& s, ibv_qp_type type) {
  ibv_qp_init_attr init{};
  init.send_cq = s.cq;
  init.recv_cq = s.cq;
  init.qp_type = type;
  init.sq_sig_all = 1;
  init.cap.max_send_wr = 32;
  init.cap.max_recv_wr = 32;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(s.pd, &init);
  if (qp == nullptr) fail("ibv_create_qp");
  return qp;
}

void modify(ibv_qp* qp, ibv_qp_attr& a, int mask, const char* what) {
  if (int rc = ibv_modify_qp(qp, &a, mask); rc != 0) {
    fail(std::string("ibv_modify_qp to ") + what + ": " + std::strerror(rc));
  }
}

// RESET -> INIT -> RTR -> RTS with the attributes IBA 10.3.1 requires for the QP's type.
void connect(ibv_qp* qp, uint32_t dest_qpn, uint16_t dlid, uint32_t psn) {
  const ibv_qp_type type = qp->qp_type;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = kPort;
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  if (type == IBV_QPT_UD) {
    a.qkey = kQkey;
    mask |= IBV_QP_QKEY;
  } else {
    a.qp_access_flags = kAllAccess;
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  modify(qp, a, mask, "INIT");

  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  mask = IBV_QP_STATE;
  if (type != IBV_QPT_UD) {
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = psn;
    a.ah_attr.dlid = dlid;
    a.ah_attr.port_num = kPort;
    mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (type == IBV_QPT_RC) {
      a.max_dest_rd_atomic = 1;
      a.min_rnr_timer = 1;
      mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
  }
  modify(qp, a, mask, "RTR");

  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = psn;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (type == IBV_QPT_RC) {
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  modify(qp, a, mask, "RTS");
}

ibv_wc poll_one(ibv_cq* cq, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  ibv_wc wc{};
  for (;;) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) fail(what + ": ibv_poll_cq failed");
    if (n == 1) break;
    if (std::chrono::steady_clock::now() > deadline) fail(what + ": no completion within the deadline");
  }
  if (wc.status != IBV_WC_SUCCESS) fail(what + ": completion status " + ibv_wc_status_str(wc.status));
  return wc;
}

void post_recv(ibv_qp* qp, Side& s, size_t off, uint32_t len) {
  ibv_sge sge{s.addr(off), len, s.mr->lkey};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (ibv_post_recv(qp, &wr, &bad) != 0) fail("ibv_post_recv");
}

struct Op {
  ibv_wr_opcode opcode = IBV_WR_SEND;
  size_t local = 0;  // offset in the sender's buffer
  uint32_t length = 0;
  size_t remote = 0;  // offset in the peer's buffer (RDMA, atomics)
  uint32_t imm_host = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
};

// Posts one signaled WR from `from` on qp and waits for its completion.
void run_op(ibv_qp* qp, Side& from, const Side& to, const Op& op, const std::string& what, ibv_ah* ah = nullptr,
            uint32_t remote_qpn = 0) {
  ibv_sge sge{from.addr(op.local), op.length, from.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op.opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(op.imm_host);
  if (op.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || op.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = to.addr(op.remote);
    wr.wr.atomic.rkey = to.mr->rkey;
    wr.wr.atomic.compare_add = op.compare_add;
    wr.wr.atomic.swap = op.swap;
  } else if (ah != nullptr) {
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = remote_qpn;
    wr.wr.ud.remote_qkey = kQkey;
  } else {
    wr.wr.rdma.remote_addr = to.addr(op.remote);
    wr.wr.rdma.rkey = to.mr->rkey;
  }
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp, &wr, &bad); rc != 0) fail(what + ": ibv_post_send: " + std::strerror(rc));
  poll_one(from.cq, what);
}

void expect_bytes(const uint8_t* got, const uint8_t* want, size_t n, const std::string& what) {
  if (std::memcmp(got, want, n) != 0) fail(what + ": data did not land");
}

void expect_imm(const ibv_wc& wc, uint32_t imm_host, const std::string& what) {
  if ((wc.wc_flags & IBV_WC_WITH_IMM) == 0 || ntohl(wc.imm_data) != imm_host) fail(what + ": immediate lost");
}

void fill(Side& s) {
  for (size_t i = 0; i < kTarget; ++i) s.buf[i] = static_cast<uint8_t>(i * 7 + 3);
}

void run(const char* manifest_path) {
  Side a;
  Side b;
  try {
    open_side(a, "softhca_0");
    open_side(b, "softhca_1");
    fill(a);
    fill(b);

    ibv_qp* rc_a = create_qp(a, IBV_QPT_RC);
    ibv_qp* rc_b = create_qp(b, IBV_QPT_RC);
    ibv_qp* uc_a = create_qp(a, IBV_QPT_UC);
    ibv_qp* uc_b = create_qp(b, IBV_QPT_UC);
    ibv_qp* ud_a = create_qp(a, IBV_QPT_UD);
    ibv_qp* ud_b = create_qp(b, IBV_QPT_UD);
    connect(rc_a, rc_b->qp_num, b.lid, 100);
    connect(rc_b, rc_a->qp_num, a.lid, 100);
    connect(uc_a, uc_b->qp_num, b.lid, 200);
    connect(uc_b, uc_a->qp_num, a.lid, 200);
    connect(ud_a, 0, 0, 300);
    connect(ud_b, 0, 0, 300);

    // ---- RC ----
    post_recv(rc_b, b, kTarget, 4096);
    run_op(rc_a, a, b, {IBV_WR_SEND, 0, 64}, "RC SEND");
    expect_bytes(b.buf + kTarget, a.buf, 64, "RC SEND");
    poll_one(b.cq, "RC SEND receive");

    post_recv(rc_b, b, kTarget, 4096);
    run_op(rc_a, a, b, {IBV_WR_SEND, 0, 2500}, "RC SEND 3 packets");
    expect_bytes(b.buf + kTarget, a.buf, 2500, "RC SEND 3 packets");
    poll_one(b.cq, "RC SEND 3 packets receive");

    post_recv(rc_b, b, kTarget, 4096);
    run_op(rc_a, a, b, {IBV_WR_SEND_WITH_IMM, 64, 32, 0, kImmSend}, "RC SEND with immediate");
    expect_imm(poll_one(b.cq, "RC SEND with immediate receive"), kImmSend, "RC SEND with immediate");

    run_op(rc_a, a, b, {IBV_WR_RDMA_WRITE, 128, 8, kTarget + 0x1000}, "RC RDMA WRITE");
    expect_bytes(b.buf + kTarget + 0x1000, a.buf + 128, 8, "RC RDMA WRITE");

    run_op(rc_a, a, b, {IBV_WR_RDMA_WRITE, 256, 2500, kTarget + 0x2000}, "RC RDMA WRITE 3 packets");
    expect_bytes(b.buf + kTarget + 0x2000, a.buf + 256, 2500, "RC RDMA WRITE 3 packets");

    post_recv(rc_b, b, kTarget, 64);
    run_op(rc_a, a, b, {IBV_WR_RDMA_WRITE_WITH_IMM, 512, 16, kTarget + 0x3000, kImmWrite},
           "RC RDMA WRITE with immediate");
    expect_imm(poll_one(b.cq, "RC RDMA WRITE with immediate receive"), kImmWrite, "RC RDMA WRITE with immediate");
    expect_bytes(b.buf + kTarget + 0x3000, a.buf + 512, 16, "RC RDMA WRITE with immediate");

    run_op(rc_a, a, b, {IBV_WR_RDMA_READ, kTarget + 0x4000, 3000, 1024}, "RC RDMA READ 3 packets");
    expect_bytes(a.buf + kTarget + 0x4000, b.buf + 1024, 3000, "RC RDMA READ 3 packets");

    run_op(rc_a, a, b, {IBV_WR_RDMA_READ, kTarget + 0x5000, 16, 32}, "RC RDMA READ");
    expect_bytes(a.buf + kTarget + 0x5000, b.buf + 32, 16, "RC RDMA READ");

    uint64_t target = 0x0102030405060708;
    std::memcpy(b.buf + kAtomic, &target, 8);
    run_op(rc_a, a, b, {IBV_WR_ATOMIC_CMP_AND_SWP, kTarget + 0x6000, 8, kAtomic, 0, target, 0xaaaa5555aaaa5555},
           "RC compare and swap");
    uint64_t got = 0;
    std::memcpy(&got, a.buf + kTarget + 0x6000, 8);
    if (got != target) fail("RC compare and swap: wrong original value");
    run_op(rc_a, a, b, {IBV_WR_ATOMIC_FETCH_AND_ADD, kTarget + 0x6008, 8, kAtomic, 0, 5}, "RC fetch and add");
    std::memcpy(&got, b.buf + kAtomic, 8);
    if (got != 0xaaaa5555aaaa5555 + 5) fail("RC fetch and add: wrong result");

    // ---- UC ----
    post_recv(uc_b, b, kTarget, 4096);
    run_op(uc_a, a, b, {IBV_WR_SEND, 0, 64}, "UC SEND");
    poll_one(b.cq, "UC SEND receive");
    expect_bytes(b.buf + kTarget, a.buf, 64, "UC SEND");
    run_op(uc_a, a, b, {IBV_WR_RDMA_WRITE, 256, 2500, kTarget + 0x2000}, "UC RDMA WRITE 3 packets");
    expect_bytes(b.buf + kTarget + 0x2000, a.buf + 256, 2500, "UC RDMA WRITE 3 packets");
    post_recv(uc_b, b, kTarget, 64);
    run_op(uc_a, a, b, {IBV_WR_RDMA_WRITE_WITH_IMM, 512, 16, kTarget + 0x3000, kImmUcWrite},
           "UC RDMA WRITE with immediate");
    expect_imm(poll_one(b.cq, "UC RDMA WRITE with immediate receive"), kImmUcWrite, "UC RDMA WRITE with immediate");

    // ---- UD ----
    ibv_ah_attr ah_attr{};
    ah_attr.dlid = b.lid;
    ah_attr.port_num = kPort;
    ibv_ah* ah = ibv_create_ah(a.pd, &ah_attr);
    if (ah == nullptr) fail("ibv_create_ah");
    post_recv(ud_b, b, kTarget, 1024 + kGrhBytes);
    run_op(ud_a, a, b, {IBV_WR_SEND, 0, 100}, "UD SEND", ah, ud_b->qp_num);
    poll_one(b.cq, "UD SEND receive");
    expect_bytes(b.buf + kTarget + kGrhBytes, a.buf, 100, "UD SEND");
    post_recv(ud_b, b, kTarget, 1024 + kGrhBytes);
    run_op(ud_a, a, b, {IBV_WR_SEND_WITH_IMM, 0, 16, 0, kImmUd}, "UD SEND with immediate", ah, ud_b->qp_num);
    expect_imm(poll_one(b.cq, "UD SEND with immediate receive"), kImmUd, "UD SEND with immediate");

    std::ofstream out(manifest_path);
    out << "{\n"
        << "  \"qpns\": [" << rc_a->qp_num << ", " << rc_b->qp_num << ", " << uc_a->qp_num << ", " << uc_b->qp_num
        << ", " << ud_a->qp_num << ", " << ud_b->qp_num << "],\n"
        << "  \"ud_qpns\": [" << ud_a->qp_num << ", " << ud_b->qp_num << "],\n"
        << "  \"qkey\": " << kQkey << ",\n"
        << "  \"rkeys\": [" << a.mr->rkey << ", " << b.mr->rkey << "],\n"
        << "  \"imms\": [" << kImmSend << ", " << kImmWrite << ", " << kImmUcWrite << ", " << kImmUd << "]\n"
        << "}\n";
    if (!out) fail(std::string("cannot write ") + manifest_path);

    ibv_destroy_ah(ah);
    for (ibv_qp* qp : {rc_a, rc_b, uc_a, uc_b, ud_a, ud_b}) ibv_destroy_qp(qp);
  } catch (...) {
    close_side(b);
    close_side(a);
    throw;
  }
  close_side(b);
  close_side(a);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MANIFEST.json\n", argv[0]);
    return 2;
  }
  try {
    run(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "observe_workload: %s\n", e.what());
    return 1;
  }
  return 0;
}
