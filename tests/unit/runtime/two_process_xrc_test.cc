// XRC between two processes of one host through the public verbs API (fork before any verbs use,
// SOFTHCA_FABRIC unique to the test; ibv_open_xrcd(3), ibv_open_qp(3)): the creator opens an XRC
// domain by a file and makes a TGT QP in it; the user opens the same file without O_CREAT (so it
// finds the creator's domain or fails), takes a handle on the TGT QP by its number, and the
// creator dies without destroying anything. The QP outlives it (the user's handle holds it): the
// user connects it to an INI QP of its own, and a message through it lands in the user's XRC SRQ;
// the creator's other TGT QP, which nobody else held, went with it.
// When the user drops its handle the QP is gone. Every wait is bounded.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "child_process.h"

namespace {

namespace test = softhca::test;

constexpr int kWaitMs = 30'000;
constexpr uint32_t kBytes = 4096;
std::string g_domain_file;  // set before fork

ibv_context* open_only_device() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = list != nullptr && n == 1 ? ibv_open_device(list[0]) : nullptr;
  if (list != nullptr) ibv_free_device_list(list);
  return ctx;
}

ibv_xrcd* open_domain(ibv_context* ctx, int oflags) {
  const int fd = ::open(g_domain_file.c_str(), O_RDONLY);
  if (fd < 0) return nullptr;
  ibv_xrcd_init_attr a{};
  a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  a.fd = fd;
  a.oflags = oflags;
  ibv_xrcd* x = ibv_open_xrcd(ctx, &a);
  ::close(fd);  // the domain is the file's, not the descriptor's
  return x;
}

// The creator: a domain for the file, two TGT QPs in it; tells the user their QPNs, waits until
// the user holds a handle on the first, and dies (SIGKILL) with every object still alive: the
// device reclaims what a dead process held.
int run_creator(int in, int out) {
  ibv_context* ctx = open_only_device();
  if (ctx == nullptr) return 1;
  ibv_xrcd* xrcd = open_domain(ctx, O_CREAT);
  if (xrcd == nullptr) return 2;
  ibv_qp_init_attr_ex a{};
  a.qp_type = IBV_QPT_XRC_RECV;
  a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  a.xrcd = xrcd;
  ibv_qp* tgt = ibv_create_qp_ex(ctx, &a);
  ibv_qp* unshared = ibv_create_qp_ex(ctx, &a);  // nobody opens this one: it goes with the creator
  if (tgt == nullptr || unshared == nullptr) return 3;
  const uint32_t qpns[2] = {tgt->qp_num, unshared->qp_num};
  if (!test::write_all(out, qpns, sizeof qpns)) return 4;
  uint8_t opened = 0;
  if (!test::read_bounded(in, &opened, 1, kWaitMs)) return 5;
  ::raise(SIGKILL);
  return 6;
}

int modify(ibv_qp* qp, ibv_qp_attr a, int mask) { return ibv_modify_qp(qp, &a, mask); }

// The user: the creator's domain (no O_CREAT), a handle on its TGT QP; once the creator is gone,
// an XRC SRQ and an INI QP of its own, and one message through the creator's QP.
int run_user(int in, int out, pid_t creator) {
  ibv_context* ctx = open_only_device();
  if (ctx == nullptr) return 20;
  uint32_t qpns[2] = {};
  if (!test::read_bounded(in, qpns, sizeof qpns, kWaitMs)) return 21;
  const uint32_t qpn = qpns[0];
  ibv_xrcd* xrcd = open_domain(ctx, 0);
  if (xrcd == nullptr) return 22;  // the creator's domain is not found by its file
  ibv_qp_open_attr oa{};
  oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  oa.qp_num = qpn;
  oa.xrcd = xrcd;
  oa.qp_type = IBV_QPT_XRC_RECV;
  ibv_qp* tgt = ibv_open_qp(ctx, &oa);
  if (tgt == nullptr) return 23;
  const uint8_t opened = 1;
  if (!test::write_all(out, &opened, 1)) return 24;
  if (test::reap_bounded(creator, kWaitMs) != 128 + SIGKILL) return 25;
  // The runtime's sweep reclaims the dead creator's objects (within its period): the other TGT
  // QP, which only the creator held, goes; a handle taken meanwhile is dropped again to let it.
  oa.qp_num = qpns[1];
  bool reclaimed = false;
  for (int i = 0; i < kWaitMs / 10 && !reclaimed; ++i) {
    ibv_qp* probe = ibv_open_qp(ctx, &oa);
    if (probe == nullptr) {
      if (errno != EINVAL) return 43;
      reclaimed = true;
    } else {
      if (ibv_destroy_qp(probe) != 0) return 44;
      ::usleep(10'000);  // polling the sweep, not synchronising with it
    }
  }
  if (!reclaimed) return 45;
  oa.qp_num = qpn;

  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* scq = ibv_create_cq(ctx, 8, nullptr, nullptr, 0);
  ibv_cq* rcq = ibv_create_cq(ctx, 8, nullptr, nullptr, 0);
  if (pd == nullptr || scq == nullptr || rcq == nullptr) return 26;
  std::vector<uint8_t> buf(2 * kBytes);
  for (uint32_t i = 0; i < kBytes; ++i) buf[i] = static_cast<uint8_t>(i * 13 + 5);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_srq_init_attr_ex sa{};
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
  sa.srq_type = IBV_SRQT_XRC;
  sa.xrcd = xrcd;
  sa.cq = rcq;
  sa.pd = pd;
  ibv_srq* srq = ibv_create_srq_ex(ctx, &sa);
  ibv_qp_init_attr_ex ia{};
  ia.qp_type = IBV_QPT_XRC_SEND;
  ia.send_cq = scq;
  ia.cap.max_send_wr = 4;
  ia.cap.max_send_sge = 1;
  ia.comp_mask = IBV_QP_INIT_ATTR_PD;
  ia.pd = pd;
  ibv_qp* ini = ibv_create_qp_ex(ctx, &ia);
  uint32_t srqn = 0;
  if (mr == nullptr || srq == nullptr || ini == nullptr || ibv_get_srq_num(srq, &srqn) != 0) return 27;

  ibv_port_attr port{};
  if (ibv_query_port(ctx, 1, &port) != 0) return 28;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  constexpr int kInit = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  if (modify(tgt, a, kInit) != 0 || modify(ini, a, kInit) != 0) return 29;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.min_rnr_timer = 1;
  a.ah_attr.dlid = port.lid;
  a.ah_attr.port_num = 1;
  a.dest_qp_num = ini->qp_num;
  constexpr int kRtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (modify(tgt, a, kRtr | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) return 30;
  a.dest_qp_num = qpn;
  if (modify(ini, a, kRtr) != 0) return 31;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  if (modify(tgt, a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN) != 0) return 32;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  if (modify(ini, a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                         IBV_QP_MAX_QP_RD_ATOMIC) != 0)
    return 33;

  ibv_sge rs{reinterpret_cast<uintptr_t>(buf.data() + kBytes), kBytes, mr->lkey};
  ibv_recv_wr rw{};
  rw.wr_id = 77;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  if (ibv_post_srq_recv(srq, &rw, &bad_r) != 0) return 34;
  ibv_sge ss{reinterpret_cast<uintptr_t>(buf.data()), kBytes, mr->lkey};
  ibv_send_wr sw{};
  sw.wr_id = 1;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.opcode = IBV_WR_SEND;
  sw.send_flags = IBV_SEND_SIGNALED;
  sw.qp_type.xrc.remote_srqn = srqn;
  ibv_send_wr* bad_s = nullptr;
  if (ibv_post_send(ini, &sw, &bad_s) != 0) return 35;
  if (test::poll_one(scq, kWaitMs) != IBV_WC_SUCCESS) return 36;
  ibv_wc wc{};
  for (int i = 0; i < 1000 && ibv_poll_cq(rcq, 1, &wc) == 0; ++i) ::usleep(1000);
  if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 77 || wc.qp_num != qpn || wc.byte_len != kBytes) return 37;
  if (std::memcmp(buf.data(), buf.data() + kBytes, kBytes) != 0) return 38;

  // The last handle: the QP goes with it.
  if (ibv_destroy_qp(tgt) != 0) return 39;
  if (ibv_open_qp(ctx, &oa) != nullptr || errno != EINVAL) return 40;
  if (ibv_destroy_qp(ini) != 0 || ibv_destroy_srq(srq) != 0) return 41;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"  // verbs.h's ibv_close_xrcd, inlined
  if (ibv_close_xrcd(xrcd) != 0) return 42;
#pragma GCC diagnostic pop
  ibv_dereg_mr(mr);
  ibv_destroy_cq(scq);
  ibv_destroy_cq(rcq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return 0;
}

pid_t g_creator = 0;
int run_user_of_creator(int in, int out) { return run_user(in, out, g_creator); }

pid_t spawn(const std::string& fabric, int (*role)(int, int), int in, int out) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("SOFTHCA_FABRIC", fabric.c_str(), 1);
    ::setenv("SOFTHCA_HOST", "host0", 1);
    ::unsetenv("SOFTHCA_NUM_DEVICES");
    std::exit(role(in, out));  // exit, not _exit: the runtime detaches at exit
  }
  return pid;
}

TEST(TwoProcessXrc, ATgtQpOpenedByAnotherProcessOfTheSameFilesDomainOutlivesItsCreator) {
  char name[] = "/tmp/softhca-xrc-2p-XXXXXX";
  const int fd = ::mkstemp(name);
  ASSERT_GE(fd, 0);
  ::close(fd);
  g_domain_file = name;
  int to_user[2];
  int to_creator[2];
  ASSERT_EQ(::pipe(to_user), 0);
  ASSERT_EQ(::pipe(to_creator), 0);
  const std::string fabric = "hcxrc-" + std::to_string(::getpid());
  // The user forks the creator (before either uses verbs) so that it can reap it: it waits for
  // the creator's exit before it uses the QP.
  g_creator = 0;
  const pid_t user = ::fork();
  ASSERT_GE(user, 0);
  if (user == 0) {
    ::setenv("SOFTHCA_FABRIC", fabric.c_str(), 1);
    ::setenv("SOFTHCA_HOST", "host0", 1);
    ::unsetenv("SOFTHCA_NUM_DEVICES");
    g_creator = spawn(fabric, run_creator, to_creator[0], to_user[1]);
    std::exit(run_user_of_creator(to_user[0], to_creator[1]));
  }
  EXPECT_EQ(test::reap_bounded(user, 2 * kWaitMs), 0);
  for (int p : {to_user[0], to_user[1], to_creator[0], to_creator[1]}) ::close(p);
  ::unlink(name);
}

}  // namespace
