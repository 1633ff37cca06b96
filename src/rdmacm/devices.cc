// The library's devices (rdmacm.md §3.18): every softhca device opened once per process, with its
// default PD and its MAD agent (docs/cm.md), and rdma_get_devices / rdma_free_devices.
#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>

#include "hca/mad_agents.h"
#include "hwif/cmd.h"
#include "rdmacm/library.h"
#include "verbs/softhca_ext.h"

namespace softhca::rdmacm {

namespace {

// Opens the MAD agent of a device: a UD QP with the GSI's Q_Key, its CQs, buffers and receives.
bool open_agent(Device& d) {
  const softhca_ext_ops* ext = softhca_ext_of(d.ctx);
  if (ext == nullptr) return false;
  d.channel = ibv_create_comp_channel(d.ctx);
  // Non-blocking: the CM thread reads it after epoll says so, with the library's lock held, and
  // must never wait there for the next completion.
  if (d.channel != nullptr) ::fcntl(d.channel->fd, F_SETFL, ::fcntl(d.channel->fd, F_GETFL) | O_NONBLOCK);
  d.cq = d.channel ? ibv_create_cq(d.ctx, Device::kRecvSlots, nullptr, d.channel, 0) : nullptr;
  d.send_cq = ibv_create_cq(d.ctx, Device::kSendSlots, nullptr, nullptr, 0);
  if (d.cq == nullptr || d.send_cq == nullptr) return false;
  const size_t bytes = size_t{Device::kRecvSlots + Device::kSendSlots} * Device::kSlotBytes;
  d.buf = static_cast<uint8_t*>(std::calloc(1, bytes));
  d.mr = d.buf ? ibv_reg_mr(d.pd, d.buf, bytes, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  if (d.mr == nullptr) return false;
  ibv_qp_init_attr ia{};
  ia.qp_type = IBV_QPT_UD;
  ia.send_cq = d.send_cq;
  ia.recv_cq = d.cq;
  ia.cap.max_send_wr = Device::kSendSlots;
  ia.cap.max_recv_wr = Device::kRecvSlots;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  d.qp = ibv_create_qp(d.pd, &ia);
  if (d.qp == nullptr) return false;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = hca::kGsiQkey;
  if (ibv_modify_qp(d.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) != 0) return false;
  a.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(d.qp, &a, IBV_QP_STATE) != 0) return false;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if (ibv_modify_qp(d.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) != 0) return false;
  if (const int err = ext->set_mad_agent(d.qp, &d.agent)) {
    errno = err;
    return false;
  }
  for (uint32_t i = 0; i < Device::kRecvSlots; ++i) {
    if (!post_agent_recv(d, i)) return false;
  }
  if (ibv_req_notify_cq(d.cq, 0) != 0) return false;
  // Comm ids: this agent's number in the top bits, the rest from a random start so that a restarted
  // process does not reuse the ids of its predecessor's connections still in a peer's timewait.
  std::random_device rd;
  cm::ConnectionConfig cfg;
  cfg.local_ca_guid = be64toh(d.attr.node_guid);
  cfg.tid_high = d.agent;
  d.table = std::make_unique<cm::ConnectionTable>(cfg, d.agent, static_cast<uint8_t>(hwif::kMadAgentIdShift), rd());
  return true;
}

// verbs.h's inline ibv_close_xrcd calls verbs_get_ctx()'s op without a NULL check, which GCC's
// -Wnull-dereference sees once inlined; a softhca context is always extended.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
void close_xrcd(ibv_xrcd* x) { (void)ibv_close_xrcd(x); }
#pragma GCC diagnostic pop

void close_device(Device& d) {
  if (d.xrcd) close_xrcd(d.xrcd);  // EBUSY while the application still holds XRC objects in it
  if (d.qp) ibv_destroy_qp(d.qp);
  for (auto& [addr, ah] : d.ahs) ibv_destroy_ah(ah);
  if (d.mr) ibv_dereg_mr(d.mr);
  std::free(d.buf);
  if (d.cq) ibv_destroy_cq(d.cq);
  if (d.send_cq) ibv_destroy_cq(d.send_cq);
  if (d.channel) ibv_destroy_comp_channel(d.channel);
  if (d.pd) ibv_dealloc_pd(d.pd);
  if (d.ctx) ibv_close_device(d.ctx);
}

}  // namespace

bool post_agent_recv(Device& d, uint32_t slot) {
  ibv_sge s{reinterpret_cast<uintptr_t>(d.buf + size_t{slot} * Device::kSlotBytes), Device::kSlotBytes, d.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &s;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(d.qp, &wr, &bad) == 0;
}

bool PeerAddress::operator<(const PeerAddress& o) const {
  if (lid != o.lid) return lid < o.lid;
  if (global != o.global) return global < o.global;
  return std::memcmp(gid.raw, o.gid.raw, 16) < 0;
}

namespace {
// The process's library. A child of fork() starts without it: the parent's CM thread is not
// there, and its device objects (agent QPs, PDs) belong to the parent on the device; the child
// opens its own on first use, as its libibverbs attaches anew. The parent's object is left as is.
std::mutex g_init_lock;
Library* g_lib = nullptr;
void forget_in_child() {
  new (&g_init_lock) std::mutex;  // it may have been held by a thread the child does not have
  g_lib = nullptr;
}
}  // namespace

Library* Library::get() {
  std::lock_guard<std::mutex> g(g_init_lock);
  if (g_lib == nullptr) {
    static const bool registered = [] { return ::pthread_atfork(nullptr, nullptr, forget_in_child) == 0; }();
    (void)registered;
    auto* l = new Library;
    if (l->init()) {
      g_lib = l;
    } else {
      delete l;  // no softhca device: ENODEV, as the real library without a kernel rdma_cm
    }
  }
  if (g_lib == nullptr) errno = ENODEV;
  return g_lib;
}

bool Library::init() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return false;
  for (int i = 0; i < n; ++i) {
    auto d = std::make_unique<Device>();
    d->ctx = ibv_open_device(list[i]);
    if (d->ctx == nullptr || softhca_ext_of(d->ctx) == nullptr) {
      if (d->ctx) ibv_close_device(d->ctx);
      continue;
    }
    const softhca_ext_ops* ext = softhca_ext_of(d->ctx);
    d->pd = ibv_alloc_pd(d->ctx);
    if (d->pd == nullptr || ibv_query_device(d->ctx, &d->attr) != 0 || ibv_query_port(d->ctx, 1, &d->port) != 0 ||
        ibv_query_gid(d->ctx, 1, 0, &d->gid) != 0 || ext->host_ipv4(d->ctx, &d->ipv4_be) != 0 || !open_agent(*d)) {
      close_device(*d);
      continue;
    }
    d->ethernet = d->port.link_layer == IBV_LINK_LAYER_ETHERNET;
    devices.push_back(std::move(d));
  }
  ibv_free_device_list(list);
  if (devices.empty()) return false;
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return false;
  thread_ = std::thread([this] { thread_main(); });
  // Stopped at exit before libibverbs detaches from the host (atexit handlers run in reverse:
  // libibverbs registered its own while the devices were opened above), so that no CM work runs
  // against a device being torn down.
  std::atexit([] {
    if (g_lib != nullptr) g_lib->stop();
  });
  return true;
}

Device* Library::device_of(ibv_context* ctx) {
  for (auto& d : devices) {
    if (d->ctx == ctx) return d.get();
  }
  return nullptr;
}

Device* Library::device_with_ipv4(uint32_t ipv4_be) {
  for (auto& d : devices) {
    if (d->ipv4_be == ipv4_be) return d.get();
  }
  return nullptr;
}

Device* Library::device_with_lid(uint16_t lid) {
  for (auto& d : devices) {
    if (!d->ethernet && d->port.lid == lid) return d.get();
  }
  return nullptr;
}

void Library::stop() {
  if (!thread_.joinable() || thread_.get_id() == std::this_thread::get_id()) return;
  stopping_.store(true);
  kick();
  thread_.join();
}

void Library::kick() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

}  // namespace softhca::rdmacm

using namespace softhca::rdmacm;
namespace cm = softhca::cm;

extern "C" {

ibv_context** rdma_get_devices(int* num_devices) {
  if (num_devices) *num_devices = 0;
  Library* lib = Library::get();
  if (lib == nullptr) return nullptr;
  auto** out = static_cast<ibv_context**>(std::calloc(lib->devices.size() + 1, sizeof(ibv_context*)));
  if (out == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < lib->devices.size(); ++i) out[i] = lib->devices[i]->ctx;
  if (num_devices) *num_devices = static_cast<int>(lib->devices.size());
  return out;
}

void rdma_free_devices(ibv_context** list) { std::free(list); }

}  // extern "C"
