// The fixture of the rdma_cm API tests: softhca's librdmacm.so.1 and libibverbs.so.1 through the
// public C headers only (<rdma/rdma_cma.h>, <infiniband/verbs.h>), as an application links them.
// Every wait is bounded (kWaitMs): an event that does not come fails the test, it never hangs it.
// Addresses are IPv4, ports host order in the helpers' arguments.
#pragma once
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

namespace softhca::rdmacm_test {

// How long any test waits for an event or a completion before it fails [ms].
constexpr int kWaitMs = 10000;

inline sockaddr_in ipv4(uint32_t ip_host, uint16_t port_host) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = htonl(ip_host);
  s.sin_port = htons(port_host);
  return s;
}
inline sockaddr_in ipv4(const char* dotted, uint16_t port_host) {
  sockaddr_in s = ipv4(0u, port_host);
  EXPECT_EQ(inet_pton(AF_INET, dotted, &s.sin_addr), 1) << dotted;
  return s;
}
inline sockaddr* sa(sockaddr_in& s) { return reinterpret_cast<sockaddr*>(&s); }
inline uint16_t src_port(rdma_cm_id* id) { return ntohs(rdma_get_src_port(id)); }
inline uint32_t src_ip(rdma_cm_id* id) { return ntohl(id->route.addr.src_sin.sin_addr.s_addr); }

constexpr uint32_t kLoopback = 0x7f000001;  // 127.0.0.1

// n bytes counting up from `first`: private data a test can recognise.
inline std::vector<uint8_t> pattern(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// An event, acknowledged when it goes out of scope (so that a failing test does not leave an
// unacked event that makes rdma_destroy_id wait forever).
class Event {
 public:
  Event() = default;
  explicit Event(rdma_cm_event* ev) : ev_(ev) {}
  Event(Event&& o) noexcept : ev_(o.ev_) { o.ev_ = nullptr; }
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      ack();
      ev_ = o.ev_;
      o.ev_ = nullptr;
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { ack(); }

  void ack() {
    if (ev_ != nullptr) rdma_ack_cm_event(ev_);
    ev_ = nullptr;
  }
  explicit operator bool() const { return ev_ != nullptr; }
  rdma_cm_event* operator->() const { return ev_; }
  rdma_cm_event* get() const { return ev_; }

 private:
  rdma_cm_event* ev_ = nullptr;
};

// True when `ch` has an event to read within timeout_ms (poll on its fd).
inline bool readable(rdma_event_channel* ch, int timeout_ms) {
  pollfd p{ch->fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

// The next event of `ch`, waiting at most timeout_ms; empty when none came.
inline Event next_event(rdma_event_channel* ch, int timeout_ms = kWaitMs) {
  if (!readable(ch, timeout_ms)) return Event();
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev) != 0) return Event();
  return Event(ev);
}

// The next event of `ch`, which must be `type` with `status`: a test failure otherwise.
inline Event expect_event(rdma_event_channel* ch, rdma_cm_event_type type, int status = 0) {
  Event e = next_event(ch);
  EXPECT_TRUE(e) << "no event within " << kWaitMs << " ms; expected " << rdma_event_str(type);
  if (!e) return e;
  EXPECT_EQ(e->event, type) << "got " << rdma_event_str(e->event) << " (status " << e->status << "), expected "
                            << rdma_event_str(type);
  EXPECT_EQ(e->status, status) << rdma_event_str(e->event);
  return e;
}

// Polls `cq` for one completion, at most kWaitMs.
inline bool poll_one(ibv_cq* cq, ibv_wc* wc) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  while (std::chrono::steady_clock::now() < end) {
    const int n = ibv_poll_cq(cq, 1, wc);
    if (n != 0) return n == 1;
  }
  return false;
}

inline ibv_qp_state qp_state(ibv_qp* qp) {
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) != 0) return IBV_QPS_UNKNOWN;
  return a.qp_state;
}

// QP attributes for rdma_create_qp with the library's own CQs (no CQ given).
inline ibv_qp_init_attr qp_init_attr(ibv_qp_type type) {
  ibv_qp_init_attr a{};
  a.qp_type = type;
  a.cap.max_send_wr = 16;
  a.cap.max_recv_wr = 16;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.sq_sig_all = 1;
  return a;
}

// Ids and channels made by a test, destroyed (QPs first) at its end whatever it did.
class RdmaCmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    active_ch_ = rdma_create_event_channel();
    passive_ch_ = rdma_create_event_channel();
    ASSERT_NE(active_ch_, nullptr) << strerror(errno);
    ASSERT_NE(passive_ch_, nullptr) << strerror(errno);
  }

  void TearDown() override {
    // Events left queued are read and acknowledged first: an id waits for its events' acks.
    for (rdma_event_channel* ch : {active_ch_, passive_ch_}) {
      while (ch != nullptr && readable(ch, 0)) {
        rdma_cm_event* ev = nullptr;
        if (rdma_get_cm_event(ch, &ev) != 0) break;
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) ids_.push_back(ev->id);
        rdma_ack_cm_event(ev);
      }
    }
    for (auto it = ids_.rbegin(); it != ids_.rend(); ++it) destroy(*it);
    ids_.clear();
    for (ibv_mr* mr : mrs_) ibv_dereg_mr(mr);
    if (active_ch_ != nullptr) rdma_destroy_event_channel(active_ch_);
    if (passive_ch_ != nullptr) rdma_destroy_event_channel(passive_ch_);
  }

  static void destroy(rdma_cm_id* id) {
    if (id == nullptr) return;
    if (id->qp != nullptr) rdma_destroy_qp(id);
    rdma_destroy_id(id);
  }

  // A new id on `ch` (nullptr: synchronous), destroyed at the test's end unless forget()-ten.
  rdma_cm_id* create_id(rdma_event_channel* ch, rdma_port_space ps = RDMA_PS_TCP) {
    rdma_cm_id* id = nullptr;
    EXPECT_EQ(rdma_create_id(ch, &id, nullptr, ps), 0) << strerror(errno);
    if (id != nullptr) ids_.push_back(id);
    return id;
  }
  void track(rdma_cm_id* id) {
    if (id != nullptr) ids_.push_back(id);
  }
  void forget(rdma_cm_id* id) { std::erase(ids_, id); }

  // A listener on 0.0.0.0 and an ephemeral port of `ps`; its port in *port.
  rdma_cm_id* listen_any(uint16_t* port, rdma_port_space ps = RDMA_PS_TCP, uint32_t ip = 0) {
    rdma_cm_id* l = create_id(passive_ch_, ps);
    if (l == nullptr) return nullptr;
    sockaddr_in any = ipv4(ip, 0);
    EXPECT_EQ(rdma_bind_addr(l, sa(any)), 0) << strerror(errno);
    EXPECT_EQ(rdma_listen(l, 8), 0) << strerror(errno);
    *port = src_port(l);
    return l;
  }

  // resolve_addr and resolve_route of `id` toward dst, with their events.
  void resolve(rdma_cm_id* id, sockaddr_in dst) {
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, sa(dst), 2000), 0) << strerror(errno);
    Event a = expect_event(id->channel, RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_TRUE(a && a->event == RDMA_CM_EVENT_ADDR_RESOLVED);
    EXPECT_EQ(a->id, id);
    a.ack();
    ASSERT_EQ(rdma_resolve_route(id, 2000), 0) << strerror(errno);
    Event r = expect_event(id->channel, RDMA_CM_EVENT_ROUTE_RESOLVED);
    ASSERT_TRUE(r && r->event == RDMA_CM_EVENT_ROUTE_RESOLVED);
  }

  // A QP on `id` from rdma_create_qp with the library's CQs.
  void create_qp(rdma_cm_id* id, ibv_qp_type type = IBV_QPT_RC) {
    ibv_qp_init_attr a = qp_init_attr(type);
    ASSERT_EQ(rdma_create_qp(id, nullptr, &a), 0) << strerror(errno);
    ASSERT_NE(id->qp, nullptr);
  }

  ibv_mr* reg(ibv_pd* pd, void* buf, size_t len) {
    ibv_mr* mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    EXPECT_NE(mr, nullptr) << strerror(errno);
    if (mr != nullptr) mrs_.push_back(mr);
    return mr;
  }

  // One RC connection: a listener on 0.0.0.0, an active id toward dst:port, both with QPs,
  // accepted and ESTABLISHED on both sides. `dst` 0: 127.0.0.1.
  struct Connected {
    rdma_cm_id* listener = nullptr;
    rdma_cm_id* active = nullptr;
    rdma_cm_id* passive = nullptr;
  };
  void connect_rc(Connected* c, uint32_t dst_ip = kLoopback) {
    uint16_t port = 0;
    c->listener = listen_any(&port);
    ASSERT_NE(c->listener, nullptr);
    c->active = create_id(active_ch_);
    ASSERT_NE(c->active, nullptr);
    ASSERT_NO_FATAL_FAILURE(resolve(c->active, ipv4(dst_ip, port)));
    ASSERT_NO_FATAL_FAILURE(create_qp(c->active));
    rdma_conn_param p{};
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    ASSERT_EQ(rdma_connect(c->active, &p), 0) << strerror(errno);
    Event req = expect_event(passive_ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_TRUE(req && req->event == RDMA_CM_EVENT_CONNECT_REQUEST);
    c->passive = req->id;
    track(c->passive);
    ASSERT_NO_FATAL_FAILURE(create_qp(c->passive));
    req.ack();
    ASSERT_EQ(rdma_accept(c->passive, &p), 0) << strerror(errno);
    Event est = expect_event(active_ch_, RDMA_CM_EVENT_ESTABLISHED);
    ASSERT_TRUE(est && est->event == RDMA_CM_EVENT_ESTABLISHED);
    Event pest = expect_event(passive_ch_, RDMA_CM_EVENT_ESTABLISHED);
    ASSERT_TRUE(pest && pest->event == RDMA_CM_EVENT_ESTABLISHED);
  }

  // Both QPs in RTS, each aimed at the other, each sending with the PSN the other expects.
  static void expect_rts_pair(ibv_qp* a, ibv_qp* b) {
    ibv_qp_attr qa{}, qb{};
    ibv_qp_init_attr ia{};
    const int m = IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_SQ_PSN | IBV_QP_RQ_PSN;
    ASSERT_EQ(ibv_query_qp(a, &qa, m, &ia), 0);
    ASSERT_EQ(ibv_query_qp(b, &qb, m, &ia), 0);
    EXPECT_EQ(qa.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(qb.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(qa.dest_qp_num, b->qp_num);
    EXPECT_EQ(qb.dest_qp_num, a->qp_num);
    EXPECT_EQ(qa.sq_psn, qb.rq_psn);
    EXPECT_EQ(qb.sq_psn, qa.rq_psn);
  }

  // A SEND from `from` arrives in a RECV posted on `to` (the ids' library CQs), byte for byte.
  void expect_send_recv(rdma_cm_id* from, rdma_cm_id* to) {
    std::vector<uint8_t> out(64), in(64, 0);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(0xa0 + i);
    ibv_mr* smr = reg(from->pd, out.data(), out.size());
    ibv_mr* rmr = reg(to->pd, in.data(), in.size());
    ASSERT_TRUE(smr && rmr);
    ibv_sge rs{reinterpret_cast<uintptr_t>(in.data()), static_cast<uint32_t>(in.size()), rmr->lkey};
    ibv_recv_wr rwr{};
    rwr.wr_id = 2;
    rwr.sg_list = &rs;
    rwr.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    ASSERT_EQ(ibv_post_recv(to->qp, &rwr, &rbad), 0);
    ibv_sge ss{reinterpret_cast<uintptr_t>(out.data()), static_cast<uint32_t>(out.size()), smr->lkey};
    ibv_send_wr swr{};
    swr.wr_id = 1;
    swr.sg_list = &ss;
    swr.num_sge = 1;
    swr.opcode = IBV_WR_SEND;
    swr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* sbad = nullptr;
    ASSERT_EQ(ibv_post_send(from->qp, &swr, &sbad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(poll_one(from->send_cq, &wc)) << "no send completion";
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    ASSERT_TRUE(poll_one(to->recv_cq, &wc)) << "no receive completion";
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.byte_len, out.size());
    EXPECT_EQ(in, out);
  }

  // An RDMA WRITE from `from` lands in a buffer of `to` (rkey and address given out of band).
  void expect_rdma_write(rdma_cm_id* from, rdma_cm_id* to) {
    std::vector<uint8_t> out(128), target(128, 0);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(0x30 + i);
    ibv_mr* smr = reg(from->pd, out.data(), out.size());
    ibv_mr* tmr = reg(to->pd, target.data(), target.size());
    ASSERT_TRUE(smr && tmr);
    ibv_sge ss{reinterpret_cast<uintptr_t>(out.data()), static_cast<uint32_t>(out.size()), smr->lkey};
    ibv_send_wr swr{};
    swr.wr_id = 3;
    swr.sg_list = &ss;
    swr.num_sge = 1;
    swr.opcode = IBV_WR_RDMA_WRITE;
    swr.send_flags = IBV_SEND_SIGNALED;
    swr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(target.data());
    swr.wr.rdma.rkey = tmr->rkey;
    ibv_send_wr* sbad = nullptr;
    ASSERT_EQ(ibv_post_send(from->qp, &swr, &sbad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(poll_one(from->send_cq, &wc)) << "no write completion";
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(target, out);
  }

  rdma_event_channel* active_ch_ = nullptr;
  rdma_event_channel* passive_ch_ = nullptr;
  std::vector<rdma_cm_id*> ids_;
  std::vector<ibv_mr*> mrs_;
};

}  // namespace softhca::rdmacm_test
