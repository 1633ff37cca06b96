// End to end through the public verbs API: two processes of one host (fork before any verbs use,
// each attaching to the host on its own, SOFTHCA_FABRIC unique to the test) connect RC QPs and move
// data: a SEND lands in the target's posted receive buffer, an RDMA WRITE lands in its registered
// memory with no receive and no CPU of the target (it spins on the last byte). Afterwards the host
// segment and the registry file are gone. And the target misusing its registered memory (issue 15):
// made read-only or unmapped, it still takes the initiator's WRITEs into its pinned pages, and
// once it deregisters, the initiator's next device entry unmaps its view of them. Asynchronous
// events reach the other process's async_fd. Every wait is bounded.
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "memfd_census.h"
#include "runtime/fabric_registry.h"
#include "runtime/host_segment.h"

namespace {

namespace test = softhca::test;

constexpr int kWaitMs = 30'000;
constexpr size_t kMsgBytes = 4096;
constexpr size_t kWriteOffset = 8192;
constexpr size_t kMrBytes = 16384;

// Set before fork: whether the two processes are on one host (one LID) or two (over UDP).
bool g_same_host = true;

// What each side tells the other (over a pipe, as ibv_rc_pingpong does over TCP).
struct Endpoint {
  uint16_t lid;
  uint32_t qpn;
  uint64_t addr;
  uint32_t rkey;
};

bool read_bounded(int fd, void* buf, size_t len) {
  auto* p = static_cast<uint8_t*>(buf);
  while (len > 0) {
    pollfd pf{fd, POLLIN, 0};
    if (::poll(&pf, 1, kWaitMs) != 1) return false;
    const ssize_t n = ::read(fd, p, len);
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool write_all(int fd, const void* buf, size_t len) { return ::write(fd, buf, len) == static_cast<ssize_t>(len); }

// One completion, polled with a deadline. Returns its status, or -1 on timeout.
int poll_one(ibv_cq* cq) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  ibv_wc wc{};
  while (std::chrono::steady_clock::now() < deadline) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return -2;
    if (n == 1) return wc.status;
  }
  return -1;
}

struct Side {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kMrBytes, 0);
  Side() = default;
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;
  ~Side() {
    if (mr != nullptr) ibv_dereg_mr(mr);
    if (qp != nullptr) ibv_destroy_qp(qp);
    if (cq != nullptr) ibv_destroy_cq(cq);
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
  }
};

// Opens softhca_0 and makes PD, CQ, RC QP and an MR over buf. 0 or a step number.
int open_side(Side& s) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n != 1) return 1;
  s.ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (s.ctx == nullptr) return 2;
  s.pd = ibv_alloc_pd(s.ctx);
  s.cq = s.pd != nullptr ? ibv_create_cq(s.ctx, 16, nullptr, nullptr, 0) : nullptr;
  if (s.cq == nullptr) return 3;
  ibv_qp_init_attr ia{};
  ia.send_cq = s.cq;
  ia.recv_cq = s.cq;
  ia.cap.max_send_wr = 8;
  ia.cap.max_recv_wr = 8;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  s.qp = ibv_create_qp(s.pd, &ia);
  if (s.qp == nullptr) return 4;
  s.mr = ibv_reg_mr(s.pd, s.buf.data(), s.buf.size(),
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  return s.mr == nullptr ? 5 : 0;
}

Endpoint local_endpoint(Side& s) {
  ibv_port_attr pa{};
  ibv_query_port(s.ctx, 1, &pa);
  return Endpoint{pa.lid, s.qp->qp_num, reinterpret_cast<uintptr_t>(s.buf.data()), s.mr->rkey};
}

// RESET -> INIT -> RTR -> RTS towards the peer (to RTR only without to_rts). 0 or a step number.
int connect(Side& s, const Endpoint& peer, bool to_rts = true) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (ibv_modify_qp(s.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) return 20;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = peer.lid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(s.qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    return 21;
  if (!to_rts) return 0;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(s.qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC) != 0)
    return 22;
  return 0;
}

// The target: posts a receive, waits for the SEND, then spins until the RDMA WRITE's last byte.
int run_target(int in, int out) {
  Side s;
  if (int e = open_side(s); e != 0) return e;
  ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf.data()), kMsgBytes, s.mr->lkey};
  ibv_recv_wr rwr{};
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  const Endpoint me = local_endpoint(s);
  Endpoint peer{};
  if (!write_all(out, &me, sizeof(me)) || !read_bounded(in, &peer, sizeof(peer))) return 31;
  if ((peer.lid == me.lid) != g_same_host) return 32;  // one host, one LID; two hosts, two
  if (int e = connect(s, peer); e != 0) return e;
  if (ibv_post_recv(s.qp, &rwr, &bad_r) != 0) return 30;  // before the initiator hears "ready"
  const uint8_t ready = 1;
  if (!write_all(out, &ready, 1)) return 33;
  if (poll_one(s.cq) != IBV_WC_SUCCESS) return 34;
  for (size_t i = 0; i < kMsgBytes; ++i) {
    if (s.buf[i] != static_cast<uint8_t>('S' + i)) return 35;
  }
  // The write needs nothing from this process: watch the memory only.
  volatile uint8_t* last = s.buf.data() + kWriteOffset + kMsgBytes - 1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  while (*last != static_cast<uint8_t>('W' + kMsgBytes - 1) && std::chrono::steady_clock::now() < deadline) {
  }
  for (size_t i = 0; i < kMsgBytes; ++i) {
    if (s.buf[kWriteOffset + i] != static_cast<uint8_t>('W' + i)) return 36;
  }
  uint8_t done = 0;
  if (!read_bounded(in, &done, 1)) return 37;  // the initiator saw its completions
  return 0;
}

int post_and_complete(Side& s, ibv_wr_opcode op, size_t offset, const Endpoint& peer) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf.data() + offset), kMsgBytes, s.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = peer.addr + kWriteOffset;
  wr.wr.rdma.rkey = peer.rkey;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(s.qp, &wr, &bad) != 0) return -3;
  return poll_one(s.cq);
}

// The initiator: SEND then RDMA WRITE, each completing successfully.
int run_initiator(int in, int out) {
  Side s;
  if (int e = open_side(s); e != 0) return 40 + e;
  for (size_t i = 0; i < kMsgBytes; ++i) {
    s.buf[i] = static_cast<uint8_t>('S' + i);
    s.buf[kWriteOffset + i] = static_cast<uint8_t>('W' + i);
  }
  const Endpoint me = local_endpoint(s);
  Endpoint peer{};
  if (!read_bounded(in, &peer, sizeof(peer)) || !write_all(out, &me, sizeof(me))) return 60;
  if (int e = connect(s, peer); e != 0) return 40 + e;
  uint8_t ready = 0;
  if (!read_bounded(in, &ready, 1)) return 61;
  if (post_and_complete(s, IBV_WR_SEND, 0, peer) != IBV_WC_SUCCESS) return 62;
  if (post_and_complete(s, IBV_WR_RDMA_WRITE, kWriteOffset, peer) != IBV_WC_SUCCESS) return 63;
  const uint8_t done = 1;
  return write_all(out, &done, 1) ? 0 : 64;
}

// ---- Misused registered memory (issue 15, rows 6 and 7) ---------------------------------------

constexpr size_t kPage = 4096;
constexpr size_t kBigBytes = size_t{64} << 20;

// What the target tells the initiator about its misused regions.
struct Regions {
  uint64_t ro_addr, gone_addr, big_addr;
  uint32_t ro_rkey, gone_rkey, big_rkey;
};

uint8_t* map_region(size_t len) {
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

constexpr int kAllRights = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// The target: registers a region it then makes read-only, one it then unmaps, and a big one; checks
// that the initiator's WRITE shows in its read-only mapping; deregisters and unmaps the big one,
// after which it holds no more memfds than before it registered it.
int run_boundary_target(int in, int out) {
  Side s;
  if (int e = open_side(s); e != 0) return e;
  uint8_t* ro = map_region(kPage);
  uint8_t* gone = map_region(kPage);
  if (ro == nullptr || gone == nullptr) return 70;
  ibv_mr* ro_mr = ibv_reg_mr(s.pd, ro, kPage, kAllRights);
  ibv_mr* gone_mr = ibv_reg_mr(s.pd, gone, kPage, kAllRights);
  if (ro_mr == nullptr || gone_mr == nullptr) return 71;
  // The misuse: read-only, and unmapped, after registration.
  if (::mprotect(ro, kPage, PROT_READ) != 0 || ::munmap(gone, kPage) != 0) return 74;
  uint8_t* big = map_region(kBigBytes);
  const uint64_t held_before_big = test::held_memfd_bytes();
  ibv_mr* big_mr = big != nullptr ? ibv_reg_mr(s.pd, big, kBigBytes, kAllRights) : nullptr;
  if (big_mr == nullptr) return 72;
  if (test::held_memfd_bytes() < held_before_big + kBigBytes) return 69;  // converted: in a memfd now

  const Endpoint me = local_endpoint(s);
  Endpoint peer{};
  const Regions r{reinterpret_cast<uintptr_t>(ro), reinterpret_cast<uintptr_t>(gone), reinterpret_cast<uintptr_t>(big),
                  ro_mr->rkey, gone_mr->rkey, big_mr->rkey};
  if (!write_all(out, &me, sizeof(me)) || !write_all(out, &r, sizeof(r)) || !read_bounded(in, &peer, sizeof(peer)))
    return 73;
  if (int e = connect(s, peer); e != 0) return e;
  uint8_t step = 1;
  if (!write_all(out, &step, 1) || !read_bounded(in, &step, 1)) return 75;  // the initiator wrote
  for (size_t i = 0; i < kMsgBytes; ++i) {
    if (ro[i] != static_cast<uint8_t>('W' + i)) return 76;  // the WRITE landed in the pinned page
  }
  // Deregistered and unmapped: no memfd holds the big region's pages any more, although the
  // initiator still maps the arena chunk they were in (the kernel frees pages punched out of a
  // file whoever maps it).
  if (ibv_dereg_mr(big_mr) != 0 || ::munmap(big, kBigBytes) != 0) return 77;
  if (test::held_memfd_bytes() != held_before_big) return 79;
  if (!write_all(out, &step, 1) || !read_bounded(in, &step, 1)) return 80;  // the initiator checked
  ibv_dereg_mr(ro_mr);
  ibv_dereg_mr(gone_mr);
  ::munmap(ro, kPage);
  return 0;
}

// One signaled WRITE or READ of kMsgBytes between s.buf at `offset` and (addr, rkey): its status.
int one_sided(Side& s, ibv_wr_opcode op, size_t offset, uint64_t addr, uint32_t rkey) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf.data() + offset), kMsgBytes, s.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(s.qp, &wr, &bad) != 0) return -3;
  return poll_one(s.cq);
}

// The initiator: WRITEs into the target's read-only and unmapped regions (success; a READ finds
// the bytes in the unmapped one), and into the big one; once the target has deregistered it (and
// found its pages freed), the big region's key is refused.
int run_boundary_initiator(int in, int out) {
  Side s;
  if (int e = open_side(s); e != 0) return 40 + e;
  for (size_t i = 0; i < kMsgBytes; ++i) s.buf[kWriteOffset + i] = static_cast<uint8_t>('W' + i);
  const Endpoint me = local_endpoint(s);
  Endpoint peer{};
  Regions r{};
  if (!read_bounded(in, &peer, sizeof(peer)) || !read_bounded(in, &r, sizeof(r)) || !write_all(out, &me, sizeof(me)))
    return 81;
  if (int e = connect(s, peer); e != 0) return 40 + e;
  uint8_t step = 0;
  if (!read_bounded(in, &step, 1)) return 82;
  // A device entry towards the target's (still registered) main MR first: what this process maps
  // of the target from then on is the misused regions' pages.
  if (one_sided(s, IBV_WR_RDMA_WRITE, kWriteOffset, peer.addr, peer.rkey) != IBV_WC_SUCCESS) return 83;
  if (one_sided(s, IBV_WR_RDMA_WRITE, kWriteOffset, r.ro_addr, r.ro_rkey) != IBV_WC_SUCCESS) return 84;
  if (one_sided(s, IBV_WR_RDMA_WRITE, kWriteOffset, r.gone_addr, r.gone_rkey) != IBV_WC_SUCCESS) return 85;
  std::memset(s.buf.data(), 0, kMsgBytes);
  if (one_sided(s, IBV_WR_RDMA_READ, 0, r.gone_addr, r.gone_rkey) != IBV_WC_SUCCESS) return 86;
  if (std::memcmp(s.buf.data(), s.buf.data() + kWriteOffset, kMsgBytes) != 0) return 87;
  if (one_sided(s, IBV_WR_RDMA_WRITE, kWriteOffset, r.big_addr + kBigBytes - kMsgBytes, r.big_rkey) != IBV_WC_SUCCESS)
    return 88;
  if (!write_all(out, &step, 1) || !read_bounded(in, &step, 1)) return 90;  // the target deregistered it
  // Expect: the deregistered key is refused by the device (its pages are gone from the target).
  if (one_sided(s, IBV_WR_RDMA_WRITE, kWriteOffset, r.big_addr, r.big_rkey) != IBV_WC_REM_ACCESS_ERR) return 92;
  return write_all(out, &step, 1) ? 0 : 93;
}

// ---- Asynchronous events across processes ------------------------------------------------------
// The target's QP stays in RTR: the initiator's SEND raises COMM_EST there, and its RDMA WRITE with
// a wrong rkey QP_ACCESS_ERR, each written into the target's async EQ by whichever process runs the
// device and announced by the target's vector, which wakes its blocking ibv_get_async_event.

// The next async event: blocks in ibv_get_async_event once async_fd polls readable (bounded).
// 0, or a step number.
int next_async(ibv_context* ctx, ibv_event_type type, ibv_qp* qp) {
  pollfd pf{ctx->async_fd, POLLIN, 0};
  if (::poll(&pf, 1, kWaitMs) != 1) return 1;
  ibv_async_event ev{};
  if (ibv_get_async_event(ctx, &ev) != 0) return 2;
  const bool right = ev.event_type == type && ev.element.qp == qp;
  ibv_ack_async_event(&ev);
  if (!right) return 3;
  return ::poll(&pf, 1, 0) == 0 ? 0 : 4;  // nothing else waits
}

int run_async_target(int in, int out) {
  Side s;
  if (int e = open_side(s); e != 0) return e;
  ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf.data()), kMsgBytes, s.mr->lkey};
  ibv_recv_wr rwr{};
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  const Endpoint me = local_endpoint(s);
  Endpoint peer{};
  if (!write_all(out, &me, sizeof(me)) || !read_bounded(in, &peer, sizeof(peer))) return 31;
  if (int e = connect(s, peer, /*to_rts=*/false); e != 0) return e;
  if (ibv_post_recv(s.qp, &rwr, &bad_r) != 0) return 30;
  const uint8_t ready = 1;
  if (!write_all(out, &ready, 1)) return 33;
  if (int e = next_async(s.ctx, IBV_EVENT_COMM_EST, s.qp); e != 0) return 70 + e;
  if (poll_one(s.cq) != IBV_WC_SUCCESS) return 34;
  if (!write_all(out, &ready, 1)) return 35;  // the initiator may send its bad WRITE now
  if (int e = next_async(s.ctx, IBV_EVENT_QP_ACCESS_ERR, s.qp); e != 0) return 80 + e;
  uint8_t done = 0;
  return read_bounded(in, &done, 1) ? 0 : 37;
}

int run_async_initiator(int in, int out) {
  Side s;
  if (int e = open_side(s); e != 0) return 40 + e;
  const Endpoint me = local_endpoint(s);
  Endpoint peer{};
  if (!read_bounded(in, &peer, sizeof(peer)) || !write_all(out, &me, sizeof(me))) return 60;
  if (int e = connect(s, peer); e != 0) return 40 + e;
  uint8_t ready = 0;
  if (!read_bounded(in, &ready, 1)) return 61;
  if (post_and_complete(s, IBV_WR_SEND, 0, peer) != IBV_WC_SUCCESS) return 62;
  if (!read_bounded(in, &ready, 1)) return 63;
  Endpoint wrong = peer;
  wrong.rkey ^= 0x100;
  if (post_and_complete(s, IBV_WR_RDMA_WRITE, kWriteOffset, wrong) != IBV_WC_REM_ACCESS_ERR) return 64;
  const uint8_t done = 1;
  return write_all(out, &done, 1) ? 0 : 65;
}

// `softhca port down` and `up` from a third process reach a process that has the device open: its
// blocking ibv_get_async_event returns PORT_ERR, then PORT_ACTIVE, and ibv_query_port follows.
int next_port_event(ibv_context* ctx, ibv_event_type type) {
  pollfd pf{ctx->async_fd, POLLIN, 0};
  if (::poll(&pf, 1, kWaitMs) != 1) return 1;
  ibv_async_event ev{};
  if (ibv_get_async_event(ctx, &ev) != 0) return 2;
  const bool right = ev.event_type == type && ev.element.port_num == 1;
  ibv_ack_async_event(&ev);
  return right ? 0 : 3;
}

int run_port_target(int in, int out) {
  Side s;
  if (int e = open_side(s); e != 0) return e;
  const uint8_t ready = 1;
  if (!write_all(out, &ready, 1)) return 30;
  if (int e = next_port_event(s.ctx, IBV_EVENT_PORT_ERR); e != 0) return 40 + e;
  ibv_port_attr pa{};
  if (ibv_query_port(s.ctx, 1, &pa) != 0 || pa.state != IBV_PORT_DOWN) return 50;
  if (!write_all(out, &ready, 1)) return 31;
  if (int e = next_port_event(s.ctx, IBV_EVENT_PORT_ACTIVE); e != 0) return 60 + e;
  if (ibv_query_port(s.ctx, 1, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) return 70;
  uint8_t done = 0;
  return read_bounded(in, &done, 1) ? 0 : 32;
}

// Runs `softhca port <state> --fabric F --host H`; its exit status.
int run_port_tool(const std::string& state, const std::string& fabric, const std::string& host) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(SOFTHCA_TOOL, "softhca", "port", state.c_str(), "--fabric", fabric.c_str(), "--host", host.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

pid_t spawn(const std::string& fabric, const std::string& host, int (*role)(int, int), int in, int out) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("SOFTHCA_FABRIC", fabric.c_str(), 1);
    ::setenv("SOFTHCA_HOST", host.c_str(), 1);
    ::unsetenv("SOFTHCA_NUM_DEVICES");
    std::exit(role(in, out));  // exit, not _exit: the runtime detaches at exit
  }
  return pid;
}

int reap(pid_t pid) {
  for (int i = 0; i < kWaitMs / 10; ++i) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    ::usleep(10'000);  // polling a child's exit, not synchronising with it
  }
  ::kill(pid, SIGKILL);
  return -1;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Runs the target on target_host and the initiator on initiator_host; checks both exit 0 (a
// non-zero status names the step that failed, see run_*) and that nothing is left in /dev/shm.
void run_pair(const std::string& fabric, const std::string& target_host, const std::string& initiator_host,
              int (*target_role)(int, int) = run_target, int (*initiator_role)(int, int) = run_initiator) {
  int a_to_b[2];
  int b_to_a[2];
  ASSERT_EQ(::pipe(a_to_b), 0);
  ASSERT_EQ(::pipe(b_to_a), 0);
  g_same_host = target_host == initiator_host;
  const pid_t target = spawn(fabric, target_host, target_role, b_to_a[0], a_to_b[1]);
  const pid_t initiator = spawn(fabric, initiator_host, initiator_role, a_to_b[0], b_to_a[1]);
  for (int fd : {a_to_b[0], a_to_b[1], b_to_a[0], b_to_a[1]}) ::close(fd);
  EXPECT_EQ(reap(initiator), 0);
  EXPECT_EQ(reap(target), 0);
  using softhca::runtime::segment_path;
  EXPECT_FALSE(file_exists(segment_path("/dev/shm", ::geteuid(), fabric, target_host)));
  EXPECT_FALSE(file_exists(segment_path("/dev/shm", ::geteuid(), fabric, initiator_host)));
  EXPECT_FALSE(file_exists(softhca::runtime::FabricRegistry("/dev/shm", fabric).path()));
}

// A process with verbs objects forks (after ibv_fork_init or not, as rdma-core 44 allows both).
// The child: its parent's context refuses it (the parent's objects stay the parent's), yet it
// opens the device anew and, as the initiator, connects a QP of its own to one the parent makes
// after the fork, as the target. The parent's objects from before the fork still work after.
bool g_fork_init = false;
int g_to_target[2];     // the initiator (child) writes, the target (parent) reads
int g_to_initiator[2];  // the other way
int run_forking_target(int, int) {
  if (g_fork_init && ibv_fork_init() != 0) return 80;
  Side before;
  if (int e = open_side(before); e != 0) return 80 + e;
  const pid_t child = ::fork();
  if (child < 0) return 86;
  if (child == 0) {
    ibv_pd* pd = ibv_alloc_pd(before.ctx);
    if (pd != nullptr) std::_Exit(87);  // the parent's context must refuse the child
    std::exit(run_initiator(g_to_initiator[0], g_to_target[1]));
  }
  const int target = run_target(g_to_target[0], g_to_initiator[1]);
  int status = 0;
  if (::waitpid(child, &status, 0) != child || !WIFEXITED(status)) return 88;
  if (WEXITSTATUS(status) != 0) return 100 + WEXITSTATUS(status);
  if (target != 0) return target;
  ibv_pd* pd = ibv_alloc_pd(before.ctx);
  if (pd == nullptr) return 89;
  ibv_dealloc_pd(pd);
  return 0;
}

void run_fork(const std::string& fabric) {
  ASSERT_EQ(::pipe(g_to_target), 0);
  ASSERT_EQ(::pipe(g_to_initiator), 0);
  g_same_host = true;
  const pid_t pid = spawn(fabric, "host0", run_forking_target, -1, -1);
  for (int fd : {g_to_target[0], g_to_target[1], g_to_initiator[0], g_to_initiator[1]}) ::close(fd);
  EXPECT_EQ(reap(pid), 0);
}

TEST(TwoProcessVerbs, RcSendAndRdmaWriteBetweenTwoProcessesOfOneHost) {
  run_pair("hce2e-" + std::to_string(::getpid()), "host0", "host0");
}

TEST(TwoProcessVerbs, RcSendAndRdmaWriteBetweenTwoHostsOverUdp) {
  run_pair("hce2eudp-" + std::to_string(::getpid()), "a", "b");
}

TEST(TwoProcessVerbs, CommEstAndQpAccessErrReachTheBlockedAsyncWaiterOfTheOtherProcessOfOneHost) {
  run_pair("hcasync-" + std::to_string(::getpid()), "host0", "host0", run_async_target, run_async_initiator);
}

TEST(TwoProcessVerbs, CommEstAndQpAccessErrReachTheBlockedAsyncWaiterOfAProcessOnAnotherHost) {
  run_pair("hcasyncudp-" + std::to_string(::getpid()), "a", "b", run_async_target, run_async_initiator);
}

TEST(TwoProcessVerbs, SofthcaPortDownAndUpReachAnotherProcessOfTheHostAsPortErrAndPortActive) {
  const std::string fabric = "hcport-" + std::to_string(::getpid());
  int to_target[2];
  int from_target[2];
  ASSERT_EQ(::pipe(to_target), 0);
  ASSERT_EQ(::pipe(from_target), 0);
  const pid_t target = spawn(fabric, "host0", run_port_target, to_target[0], from_target[1]);
  uint8_t step = 0;
  EXPECT_TRUE(read_bounded(from_target[0], &step, 1));  // its context is open
  EXPECT_EQ(run_port_tool("down", fabric, "host0"), 0);
  EXPECT_TRUE(read_bounded(from_target[0], &step, 1));  // it saw PORT_ERR and PORT_DOWN
  EXPECT_EQ(run_port_tool("up", fabric, "host0"), 0);
  EXPECT_TRUE(write_all(to_target[1], &step, 1));
  EXPECT_EQ(reap(target), 0);
  for (int fd : {to_target[0], to_target[1], from_target[0], from_target[1]}) ::close(fd);
}

TEST(TwoProcessVerbs, WritesIntoRegionsTheTargetMadeReadOnlyOrUnmappedLandInItsPinnedPagesAndDeregistrationReachesThePeer) {
  run_pair("hcbound-" + std::to_string(::getpid()), "host0", "host0", run_boundary_target, run_boundary_initiator);
}

}  // namespace

namespace {
TEST(TwoProcessVerbs, AForkChildOpensTheDeviceForItsOwnObjectsWhileItsParentKeepsItsOwn) {
  g_fork_init = false;
  run_fork("hcfork-" + std::to_string(::getpid()));
}

TEST(TwoProcessVerbs, AForkChildAfterIbvForkInitOpensTheDeviceForItsOwnObjects) {
  g_fork_init = true;
  run_fork("hcforkinit-" + std::to_string(::getpid()));
}
}  // namespace

// ---- job-control stops and the device lock (runtime/stop_deferral.h) --------------------------
namespace {

// Writes between two QPs of its own on its host, forever: most of its time is spent holding the
// host's device lock.
int run_busy_writer(int, int out) {
  ::setpgid(0, 0);  // not an orphaned group, so SIGTSTP stops it (see stop_deferral_test.cc)
  Side a;
  Side b;
  if (int e = open_side(a); e != 0) return e;
  if (int e = open_side(b); e != 0) return 10 + e;
  const Endpoint ea = local_endpoint(a);
  const Endpoint eb = local_endpoint(b);
  if (connect(a, eb) != 0 || connect(b, ea) != 0) return 20;
  const uint8_t ready = 1;
  if (!write_all(out, &ready, 1)) return 21;
  for (;;) {
    if (post_and_complete(a, IBV_WR_RDMA_WRITE, 0, eb) != IBV_WC_SUCCESS) return 22;
  }
}

// Answers each byte it reads with the result of a command that takes the device lock, until 0xff.
constexpr uint8_t kQuit = 0xff;
int run_prober(int in, int out) {
  Side s;
  if (int e = open_side(s); e != 0) return e;
  uint8_t round = 0;
  while (read_bounded(in, &round, 1) && round != kQuit) {
    ibv_pd* pd = ibv_alloc_pd(s.ctx);
    const uint8_t ok = pd != nullptr ? 1 : 0;
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (!write_all(out, &ok, 1)) return 31;
  }
  return 0;
}

// Waits until pid is stopped by a signal (waitpid WUNTRACED), at most kWaitMs. The stop signal.
int wait_stopped(pid_t pid) {
  for (int i = 0; i < kWaitMs / 10; ++i) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG | WUNTRACED);
    if (r == pid && WIFSTOPPED(status)) return WSTOPSIG(status);
    if (r == pid) return -1;  // it ended
    ::usleep(10'000);  // polling another process's state, not synchronising with it
  }
  return 0;
}

}  // namespace

// Ctrl-Z (SIGTSTP) lands on a process that spends most of its time inside the host's device: it
// stops, but only once it has let go of the device lock, so another process of the host still gets
// the lock while it is stopped, round after round.
TEST(TwoProcessVerbs, AProcessStoppedByCtrlZNeverHoldsTheDeviceLockOfItsHost) {
  const std::string fabric = "hcstop-" + std::to_string(::getpid());
  int writer_out[2];
  int to_prober[2];
  int from_prober[2];
  ASSERT_EQ(::pipe(writer_out), 0);
  ASSERT_EQ(::pipe(to_prober), 0);
  ASSERT_EQ(::pipe(from_prober), 0);
  const pid_t writer = spawn(fabric, "host0", run_busy_writer, -1, writer_out[1]);
  const pid_t prober = spawn(fabric, "host0", run_prober, to_prober[0], from_prober[1]);
  uint8_t byte = 0;
  ASSERT_TRUE(read_bounded(writer_out[0], &byte, 1)) << "the writer never started";
  constexpr int kRounds = 20;
  int answered = 0;
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_EQ(::kill(writer, SIGTSTP), 0);
    ASSERT_EQ(wait_stopped(writer), SIGTSTP) << "round " << round;  // Expect: the writer stops
    byte = static_cast<uint8_t>(round);
    ASSERT_TRUE(write_all(to_prober[1], &byte, 1));
    // Expect: the prober gets the lock while the writer is stopped (a stopped holder would block it).
    uint8_t ok = 0;
    pollfd pf{from_prober[0], POLLIN, 0};
    if (::poll(&pf, 1, 5'000) == 1 && ::read(from_prober[0], &ok, 1) == 1 && ok == 1) ++answered;
    ::kill(writer, SIGCONT);
    if (answered != round + 1) break;
    ::usleep(2'000);  // let the writer run a while before the next stop
  }
  EXPECT_EQ(answered, kRounds) << "a process of the host waited on the lock of a stopped one";
  ::kill(writer, SIGCONT);
  ::kill(writer, SIGKILL);
  byte = kQuit;
  EXPECT_TRUE(write_all(to_prober[1], &byte, 1));
  EXPECT_EQ(reap(prober), 0);
  reap(writer);
  for (int fd : {writer_out[0], writer_out[1], to_prober[0], to_prober[1], from_prober[0], from_prober[1]}) ::close(fd);
}
