// cm_bench: rdma_cm connection set-up and tear-down on one host through softhca's librdmacm.so.1
// and libibverbs.so.1 (docs/rdma-cm.md). One process, one thread, two event channels: a listener
// on 127.0.0.1 and, per connection, an active id that resolves the address and route, connects
// (the passive side accepts), and disconnects; both ids are destroyed. By default the ids carry no
// QP and name one in rdma_conn_param.qp_num, as UCX does (then CONNECT_RESPONSE and rdma_establish):
// what is measured is the connection manager. --with-qps gives each side an RC QP of its own,
// created and destroyed with the id (librdmacm moves it to RTS). Reports connections per second
// (whole cycles) and the connect latency (rdma_connect to the active side's ESTABLISHED) as a
// table, or JSON with --json.
//   cm_bench [--connections N] [--port P] [--with-qps] [--json]
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

// The next event on ch, which must be `want` (anything else ends the run: a benchmark of a broken
// connection manager measures nothing).
rdma_cm_event* expect(rdma_event_channel* ch, rdma_cm_event_type want) {
  rdma_cm_event* ev = nullptr;
  if (std::getenv("DBG")) std::fprintf(stderr, "waiting %s on fd %d\n", rdma_event_str(want), ch->fd);
  if (rdma_get_cm_event(ch, &ev) != 0) die("rdma_get_cm_event");
  if (ev->event != want) {
    std::fprintf(stderr, "cm_bench: expected %s, got %s (status %d)\n", rdma_event_str(want), rdma_event_str(ev->event),
                 ev->status);
    std::exit(1);
  }
  return ev;
}

void ack(rdma_cm_event* ev) {
  if (rdma_ack_cm_event(ev) != 0) die("rdma_ack_cm_event");
}

struct Sides {
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
};

ibv_qp_init_attr qp_attr(ibv_cq* cq) {
  ibv_qp_init_attr a{};
  a.qp_type = IBV_QPT_RC;
  a.send_cq = a.recv_cq = cq;
  a.cap.max_send_wr = a.cap.max_recv_wr = 16;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  return a;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  int connections = 2000;
  int port = 18920;
  bool json = false;
  bool with_qps = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--connections" && i + 1 < argc) {
      connections = std::atoi(argv[++i]);
    } else if (a == "--port" && i + 1 < argc) {
      port = std::atoi(argv[++i]);
    } else if (a == "--json") {
      json = true;
    } else if (a == "--with-qps") {
      with_qps = true;
    } else {
      std::fprintf(stderr, "usage: cm_bench [--connections N] [--port P] [--with-qps] [--json]\n");
      return 2;
    }
  }
  rdma_event_channel* pch = rdma_create_event_channel();
  rdma_event_channel* ach = rdma_create_event_channel();
  if (pch == nullptr || ach == nullptr) die("rdma_create_event_channel");
  rdma_cm_id* listener = nullptr;
  if (rdma_create_id(pch, &listener, nullptr, RDMA_PS_TCP) != 0) die("rdma_create_id");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&addr)) != 0) die("rdma_bind_addr");
  if (rdma_listen(listener, 128) != 0) die("rdma_listen");

  int n = 0;
  ibv_context** devs = rdma_get_devices(&n);
  if (devs == nullptr || n == 0) die("rdma_get_devices");
  Sides s;
  s.pd = ibv_alloc_pd(devs[0]);
  s.cq = ibv_create_cq(devs[0], 1024, nullptr, nullptr, 0);
  if (s.pd == nullptr || s.cq == nullptr) die("ibv_alloc_pd/ibv_create_cq");

  std::vector<double> connect_us;
  connect_us.reserve(static_cast<size_t>(connections));
  const auto start = Clock::now();
  for (int i = 0; i < connections; ++i) {
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(ach, &id, nullptr, RDMA_PS_TCP) != 0) die("rdma_create_id");
    if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000) != 0) die("rdma_resolve_addr");
    ack(expect(ach, RDMA_CM_EVENT_ADDR_RESOLVED));
    if (rdma_resolve_route(id, 2000) != 0) die("rdma_resolve_route");
    ack(expect(ach, RDMA_CM_EVENT_ROUTE_RESOLVED));
    ibv_qp_init_attr a = qp_attr(s.cq);
    if (with_qps && rdma_create_qp(id, s.pd, &a) != 0) die("rdma_create_qp");
    rdma_conn_param cp{};
    cp.responder_resources = cp.initiator_depth = 1;
    cp.retry_count = cp.rnr_retry_count = 7;
    cp.qp_num = with_qps ? 0 : 0x100 + static_cast<uint32_t>(i);
    const auto t0 = Clock::now();
    if (rdma_connect(id, &cp) != 0) die("rdma_connect");
    rdma_cm_event* req = expect(pch, RDMA_CM_EVENT_CONNECT_REQUEST);
    rdma_cm_id* child = req->id;
    ack(req);
    ibv_qp_init_attr b = qp_attr(s.cq);
    if (with_qps && rdma_create_qp(child, s.pd, &b) != 0) die("rdma_create_qp (passive)");
    if (rdma_accept(child, &cp) != 0) die("rdma_accept");
    if (with_qps) {
      ack(expect(ach, RDMA_CM_EVENT_ESTABLISHED));
    } else {
      // The application's QP would go to RTR and RTS here; rdma_establish sends the RTU and the
      // active side gets no further event, as with the kernel's rdma_cm.
      ack(expect(ach, RDMA_CM_EVENT_CONNECT_RESPONSE));
      if (rdma_establish(id) != 0) die("rdma_establish");
    }
    connect_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    ack(expect(pch, RDMA_CM_EVENT_ESTABLISHED));
    if (rdma_disconnect(id) != 0) die("rdma_disconnect");
    ack(expect(pch, RDMA_CM_EVENT_DISCONNECTED));
    ack(expect(ach, RDMA_CM_EVENT_DISCONNECTED));
    if (with_qps) {
      rdma_destroy_qp(child);
      rdma_destroy_qp(id);
    }
    if (rdma_destroy_id(child) != 0 || rdma_destroy_id(id) != 0) die("rdma_destroy_id");
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  const double rate = connections / secs;
  const double p50 = percentile(connect_us, 0.5);
  const double p99 = percentile(connect_us, 0.99);
  if (json) {
    nlohmann::json j;
    j["benchmark"] = "cm_bench";
    j["connections"] = connections;
    j["with_qps"] = with_qps;
    j["connections_per_s"] = rate;
    j["connect_latency_us"] = {{"p50", p50}, {"p99", p99}, {"min", percentile(connect_us, 0.0)}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%-44s %12s\n", with_qps ? "rdma_cm on one host, QPs on the ids" : "rdma_cm on one host, no QPs on the ids", "value");
    std::printf("%-44s %12.0f\n", "connections set up and torn down per second", rate);
    std::printf("%-44s %12.1f\n", "connect latency p50 [us]", p50);
    std::printf("%-44s %12.1f\n", "connect latency p99 [us]", p99);
  }
  ibv_destroy_cq(s.cq);
  ibv_dealloc_pd(s.pd);
  rdma_free_devices(devs);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(ach);
  rdma_destroy_event_channel(pch);
  return 0;
}
