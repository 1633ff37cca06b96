// Event queues between the driver and the real device model (device_rig.h), single-threaded:
// the port's state changes reach every context's async EQ (a management command, as an SM's
// PortInfo Set), and a completion channel's EQ filled past its 1024 entries holds the events that
// find it full in the device until the driver's EQ doorbell frees room, every event delivered once
// and each EQE, interrupt and doorbell counted as a TLP.
#include <fcntl.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

#include "device_rig.h"
#include "driver/provider.h"
#include "hwif/cmd.h"

namespace softhca::driver::testing {
namespace {

using pcie::TlpCause;
using pcie::TlpType;

struct Contexts {
  explicit Contexts(Rig& r, int n) {
    DeviceLink link;
    link.host_port = &r.port;
    link.cmd = &r.dev;
    link.kernel = &r.kernel;
    for (int i = 0; i < n; ++i) {
      link.uar_index = static_cast<uint32_t>(i);
      verbs_context* v = open_context(&r.device, link, -1);
      EXPECT_NE(v, nullptr);
      if (v == nullptr) continue;
      ctx.push_back(&v->context);
      fcntl(v->context.async_fd, F_SETFL, fcntl(v->context.async_fd, F_GETFL) | O_NONBLOCK);
    }
  }
  ~Contexts() {
    for (ibv_context* c : ctx) EXPECT_EQ(close_context(c), 0);
  }
  std::vector<ibv_context*> ctx;
};

int set_port(Rig& r, bool active) {
  hwif::SetPortStateIn in;
  in.active = active;
  return hwif::exec_cmd(r.dev, in);
}

// The event waiting on ctx (its async_fd non-blocking), or -1 (EAGAIN).
int event_of(ibv_context* ctx, uint8_t* port = nullptr) {
  ibv_async_event ev{};
  if (get_async_event(ctx, &ev) != 0) return errno == EAGAIN ? -1 : -2;
  if (port != nullptr) *port = static_cast<uint8_t>(ev.element.port_num);
  ack_async_event(&ev);
  return ev.event_type;
}

TEST(PortEvents, APortSetDownAndUpRaisesPortErrThenPortActiveOnEveryContextOnce) {
  Rig r;
  Contexts c(r, 2);
  ASSERT_EQ(c.ctx.size(), 2u);
  for (ibv_context* x : c.ctx) EXPECT_EQ(event_of(x), -1);  // Expect: nothing at open

  ASSERT_EQ(set_port(r, false), 0);
  for (ibv_context* x : c.ctx) {
    uint8_t port = 0;
    EXPECT_EQ(event_of(x, &port), IBV_EVENT_PORT_ERR);
    EXPECT_EQ(port, 1);
    EXPECT_EQ(event_of(x), -1);
  }
  ibv_port_attr pa{};
  ASSERT_EQ(query_port(c.ctx[0], 1, &pa, sizeof(pa)), 0);
  EXPECT_EQ(pa.state, IBV_PORT_DOWN);
  EXPECT_EQ(pa.phys_state, hwif::kPhysStateDisabled);
  ASSERT_EQ(set_port(r, false), 0);  // Expect: no change, no event
  for (ibv_context* x : c.ctx) EXPECT_EQ(event_of(x), -1);

  ASSERT_EQ(set_port(r, true), 0);
  for (ibv_context* x : c.ctx) {
    EXPECT_EQ(event_of(x), IBV_EVENT_PORT_ACTIVE);
    EXPECT_EQ(event_of(x), -1);
  }
  ASSERT_EQ(query_port(c.ctx[1], 1, &pa, sizeof(pa)), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  hwif::SetPortStateIn bad;
  bad.port = 2;
  EXPECT_EQ(hwif::exec_cmd(r.dev, bad), EINVAL);
}

TEST(PortEvents, APortThatIsDownSendsAndTakesNothing) {
  Rig r;
  Contexts c(r, 1);
  ASSERT_EQ(c.ctx.size(), 1u);
  ibv_pd* pd = alloc_pd(c.ctx[0]);
  ibv_cq* cq = create_cq(c.ctx[0], 15, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp* a = rc_qp(pd, cq);
  ibv_qp* b = rc_qp(pd, cq);
  ASSERT_EQ(to_rts(a, b->qp_num, r.dev.lid()), 0);
  ASSERT_EQ(to_rts(b, a->qp_num, r.dev.lid()), 0);
  std::vector<uint8_t> src(256, 0x5a), dst(256, 0);
  ibv_mr* smr = reg_mr(pd, src.data(), src.size(), reinterpret_cast<uintptr_t>(src.data()), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dmr = reg_mr(pd, dst.data(), dst.size(), reinterpret_cast<uintptr_t>(dst.data()),
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(set_port(r, false), 0);
  ASSERT_EQ(event_of(c.ctx[0]), IBV_EVENT_PORT_ERR);
  ibv_sge sge{reinterpret_cast<uintptr_t>(src.data()), 256, smr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst.data());
  wr.wr.rdma.rkey = dmr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(a, &wr, &bad), 0);
  r.loop.pump(r.dev);
  EXPECT_EQ(dst, std::vector<uint8_t>(256, 0));  // Expect: nothing crossed the port
  EXPECT_GE(r.dev.stats().dropped[static_cast<size_t>(hca::DropReason::kPortDown)], 1u);
  EXPECT_TRUE(r.loop.queue.empty());
  ibv_wc wc{};
  EXPECT_EQ(poll_cq(cq, 1, &wc), 0);  // Expect: no ACK, no completion (the timer would retry)
  EXPECT_EQ(dereg_mr(smr), 0);
  EXPECT_EQ(dereg_mr(dmr), 0);
  EXPECT_EQ(destroy_qp(a), 0);
  EXPECT_EQ(destroy_qp(b), 0);
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
}

TEST(CompletionEq, EventsThatFindTheEqFullWaitInTheDeviceAndAreWrittenWhenItsDoorbellFreesRoom) {
  // 1026 armed CQs on one channel (a UD QP sending to itself completes into two of them: its send
  // CQ and its receive CQ): two more events than the channel's EQ holds.
  constexpr uint32_t kEqEntries = 1024;
  constexpr uint32_t kQps = kEqEntries / 2 + 1;
  Rig r;
  Contexts c(r, 1);
  ASSERT_EQ(c.ctx.size(), 1u);
  ibv_context* ctx = c.ctx[0];
  ibv_pd* pd = alloc_pd(ctx);
  ibv_comp_channel* ch = create_comp_channel(ctx);
  ASSERT_NE(ch, nullptr);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
  std::vector<uint8_t> buf(64, 0x11);
  ibv_mr* mr = reg_mr(pd, buf.data(), buf.size(), reinterpret_cast<uintptr_t>(buf.data()), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  std::vector<ibv_cq*> cqs;
  std::vector<ibv_qp*> qps;
  for (uint32_t i = 0; i < kQps; ++i) {
    ibv_cq* scq = create_cq(ctx, 1, ch, 0);
    ibv_cq* rcq = create_cq(ctx, 1, ch, 0);
    ASSERT_NE(scq, nullptr);
    ASSERT_NE(rcq, nullptr);
    cqs.push_back(scq);
    cqs.push_back(rcq);
    ibv_qp_init_attr qa{};
    qa.send_cq = scq;
    qa.recv_cq = rcq;
    qa.qp_type = IBV_QPT_UD;
    qa.cap.max_send_wr = 1;
    qa.cap.max_recv_wr = 1;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    ibv_qp* qp = create_qp(pd, &qa, 0);
    ASSERT_NE(qp, nullptr) << i;
    qps.push_back(qp);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = 7;
    ASSERT_EQ(modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
    a.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(modify_qp(qp, &a, IBV_QP_STATE), 0);
    a.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
    ASSERT_EQ(req_notify_cq(scq, 0), 0);
    ASSERT_EQ(req_notify_cq(rcq, 0), 0);
  }
  ibv_ah_attr aa{};
  aa.dlid = r.dev.lid();
  aa.port_num = 1;
  ibv_ah* ah = create_ah(pd, &aa);
  ASSERT_NE(ah, nullptr);
  const uint64_t eqes_before = r.counters.snapshot().tlps(TlpType::kMWr, TlpCause::kEqeWrite);
  for (ibv_qp* qp : qps) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), 64, mr->lkey};
    ibv_recv_wr rw{};
    rw.sg_list = &sge;
    rw.num_sge = 1;
    ibv_recv_wr* bad_r = nullptr;
    ASSERT_EQ(post_recv(qp, &rw, &bad_r), 0);
    ibv_sge ssge{reinterpret_cast<uintptr_t>(buf.data()), 8, mr->lkey};
    ibv_send_wr sw{};
    sw.sg_list = &ssge;
    sw.num_sge = 1;
    sw.opcode = IBV_WR_SEND;
    sw.send_flags = IBV_SEND_SIGNALED;
    sw.wr.ud.ah = ah;
    sw.wr.ud.remote_qpn = qp->qp_num;
    sw.wr.ud.remote_qkey = 7;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(post_send(qp, &sw, &bad), 0);
    r.loop.pump(r.dev);
  }
  // Expect: the ring took 1024 EQEs (one MWr and one interrupt each) and the device holds 2.
  EXPECT_EQ(r.counters.snapshot().tlps(TlpType::kMWr, TlpCause::kEqeWrite) - eqes_before, kEqEntries);
  EXPECT_EQ(r.bridge.msis, static_cast<int>(kEqEntries));
  std::map<ibv_cq*, int> seen;
  for (uint32_t i = 0; i < 2 * kQps; ++i) {
    ibv_cq* got = nullptr;
    void* cq_ctx = nullptr;
    ASSERT_EQ(get_cq_event(ch, &got, &cq_ctx), 0) << i;
    ++seen[got];
  }
  // Expect: half the ring taken published the consumer index; the held two were written then.
  EXPECT_EQ(r.counters.snapshot().tlps(TlpType::kMWr, TlpCause::kEqeWrite) - eqes_before, 2 * kQps);
  const uint64_t doorbells = r.counters.snapshot().tlps(TlpType::kMWr, TlpCause::kEqDoorbell);
  EXPECT_EQ(doorbells, 2u);  // at 512 and at 1024 taken
  EXPECT_EQ(seen.size(), cqs.size());
  for (const auto& [cq, n] : seen) EXPECT_EQ(n, 1);
  // Expect: the ring empty, the consumer index is published once before waiting, not again.
  ibv_cq* got = nullptr;
  void* cq_ctx = nullptr;
  errno = 0;
  EXPECT_EQ(get_cq_event(ch, &got, &cq_ctx), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(get_cq_event(ch, &got, &cq_ctx), -1);
  EXPECT_EQ(r.counters.snapshot().tlps(TlpType::kMWr, TlpCause::kEqDoorbell), doorbells + 1);

  for (ibv_cq* cq : cqs) ack_cq_events(cq, 1);
  EXPECT_EQ(destroy_ah(ah), 0);
  for (ibv_qp* qp : qps) EXPECT_EQ(destroy_qp(qp), 0);
  for (ibv_cq* cq : cqs) EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(destroy_comp_channel(ch), 0);
  EXPECT_EQ(dereg_mr(mr), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
}

}  // namespace
}  // namespace softhca::driver::testing
