// The CM thread and the MAD agent's I/O (docs/rdma-cm.md): one thread per process waits on every
// device's agent CQ and on the earliest CM timer; received MADs and expired timers go through the
// connection tables of src/cm, and their actions come back here — MADs sent from the agent's QP to
// QP1 of the peer, CM events turned into rdma_cm events on the ids' channels (rdmacm.md §3.8).
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cm/cma_header.h"
#include "hca/mad_agents.h"
#include "rdmacm/library.h"
#include "verbs/softhca_ext.h"

namespace softhca::rdmacm {

Picoseconds now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Picoseconds((int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec) * 1000);
}

uint64_t sender_key_of(const PeerAddress& p) {
  uint64_t k = p.lid;
  for (int i = 0; i < 16; ++i) k = k * 131 + p.gid.raw[i];
  return k;
}

namespace {

void reap_sends(Device& d) {
  ibv_wc wc[16];
  int n;
  while ((n = ibv_poll_cq(d.send_cq, 16, wc)) > 0) d.sends_out -= std::min<uint32_t>(d.sends_out, n);
}

}  // namespace

ibv_ah* address_handle(Device& d, const PeerAddress& to) {
  if (auto it = d.ahs.find(to); it != d.ahs.end()) return it->second;
  ibv_ah_attr a{};
  a.dlid = to.lid;
  a.port_num = 1;
  a.is_global = to.global ? 1 : 0;
  if (to.global) {
    a.grh.dgid = to.gid;
    a.grh.sgid_index = 0;
    a.grh.hop_limit = 64;
  }
  ibv_ah* ah = ibv_create_ah(d.pd, &a);
  if (ah != nullptr) d.ahs.emplace(to, ah);
  return ah;
}

bool send_mad(Device& d, const PeerAddress& to, const cm::MadBytes& mad) {
  reap_sends(d);
  if (d.sends_out >= Device::kSendSlots) return false;  // the CM retransmits what could not go
  ibv_ah* ah = address_handle(d, to);
  if (ah == nullptr) return false;
  const uint32_t slot = Device::kRecvSlots + (d.next_send++ % Device::kSendSlots);
  uint8_t* p = d.buf + size_t{slot} * Device::kSlotBytes;
  std::memcpy(p, mad.data(), mad.size());
  ibv_sge s{reinterpret_cast<uintptr_t>(p), static_cast<uint32_t>(mad.size()), d.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = hca::kGsiQpn;
  wr.wr.ud.remote_qkey = hca::kGsiQkey;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(d.qp, &wr, &bad) != 0) return false;
  ++d.sends_out;
  return true;
}

void track(IdPriv& id) {
  if (id.dev == nullptr || id.comm_id == 0 || id.tracked) return;
  const cm::Connection* c = id.dev->table->find(cm::CommId(id.comm_id));
  const softhca_ext_ops* ext = softhca_ext_of(id.dev->ctx);
  if (c == nullptr || ext == nullptr) return;
  id.tracked = ext->track_connection(id.dev->qp, id.comm_id, c->remote_id().value(), id.peer_qpn, id.peer.lid,
                                     id.peer.global, id.peer.gid.raw) == 0;
}

void untrack(IdPriv& id) {
  if (!id.tracked || id.dev == nullptr) return;
  if (const softhca_ext_ops* ext = softhca_ext_of(id.dev->ctx)) ext->untrack_connection(id.dev->qp, id.comm_id);
  id.tracked = false;
}

void Library::thread_main() {
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  ::epoll_ctl(ep, EPOLL_CTL_ADD, wake_fd_, &ev);
  for (auto& d : devices) {
    ev.data.ptr = d.get();
    ::epoll_ctl(ep, EPOLL_CTL_ADD, d->channel->fd, &ev);
  }
  // The thread never waits for the library's lock: when an API call holds it, that call takes
  // what arrived before it returns (pump()), and the thread comes back in a millisecond for what it
  // may have missed. Until then the agents' CQs stay unarmed, so same-process traffic raises no
  // interrupt the thread would wake for in vain.
  std::vector<bool> rearm(devices.size(), false);
  int timeout_ms = -1;
  constexpr Picoseconds kTimerGrain = std::chrono::milliseconds(10);
  constexpr Picoseconds kIdleScan = std::chrono::seconds(1);  // no timer: look again now and then
  Picoseconds next_scan{0};
  while (true) {
    epoll_event got[8];
    const int n = ::epoll_wait(ep, got, 8, timeout_ms);
    if (stopping_.load()) break;
    for (int i = 0; i < n; ++i) {
      if (got[i].data.ptr == nullptr) {
        uint64_t v;
        while (::read(wake_fd_, &v, sizeof v) > 0) {
        }
        continue;
      }
      Device& d = *static_cast<Device*>(got[i].data.ptr);
      ibv_cq* cq = nullptr;
      void* ctx = nullptr;
      if (ibv_get_cq_event(d.channel, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        for (size_t k = 0; k < devices.size(); ++k) {
          if (devices[k].get() == &d) rearm[k] = true;
        }
      }
    }
    std::unique_lock<std::mutex> g(mutex, std::try_to_lock);
    if (!g.owns_lock()) {
      timeout_ms = 1;
      continue;
    }
    // A call may have started a connection whose first timer is earlier than the next scan.
    if (rescan_.exchange(false)) next_scan = Picoseconds{0};
    for (size_t k = 0; k < devices.size(); ++k) {
      if (!rearm[k]) continue;
      ibv_req_notify_cq(devices[k]->cq, 0);
      rearm[k] = false;
    }
    pump();  // after arming: what arrived before it is taken here, what arrives after interrupts
    // The CM's timers (hundreds of ms and more) at a 10 ms grain: the tables are scanned at most
    // every kTimerGrain, not on every MAD's wake-up (thousands of connections sit in timewait
    // under a connection storm).
    const Picoseconds t = now();
    if (t >= next_scan) {
      std::optional<Picoseconds> earliest;
      for (auto& d : devices) {
        for (const cm::Actions& a : d->table->on_timer(t)) run(*d, a);
        if (const auto dl = d->table->next_deadline(); dl && (!earliest || *dl < *earliest)) earliest = dl;
      }
      next_scan = std::max(earliest.value_or(t + kIdleScan), t + kTimerGrain);
    }
    timeout_ms = static_cast<int>(std::max<int64_t>(0, (next_scan.count() - t.count() + 999'999'999) / 1'000'000'000));
  }
  ::close(ep);
}

void Library::pump() {
  if (pumping_) return;  // a MAD handled by pump() sent another: the loop below takes it
  pumping_ = true;
  bool more = true;
  while (more) {
    more = false;
    for (auto& d : devices) {
      ibv_wc wc[16];
      const int n = ibv_poll_cq(d->cq, 16, wc);
      for (int i = 0; i < n; ++i) {
        if (wc[i].status == IBV_WC_SUCCESS) on_mad(*d, wc[i]);
        post_agent_recv(*d, static_cast<uint32_t>(wc[i].wr_id));
      }
      more = more || n > 0;
    }
  }
  pumping_ = false;
}

void Library::on_mad(Device& d, const ibv_wc& wc) {
  if (wc.byte_len < 40 + cm::kMadBytes) return;
  const uint8_t* slot = d.buf + size_t{static_cast<uint32_t>(wc.wr_id)} * Device::kSlotBytes;
  PeerAddress from;
  from.lid = wc.slid;
  if (wc.wc_flags & IBV_WC_GRH) {
    from.global = true;
    std::memcpy(from.gid.raw, slot + 8, 16);  // the GRH's SGID
  }
  if (d.ethernet) from.lid = 0;
  const std::span<const uint8_t> mad(slot + 40, cm::kMadBytes);
  run(d, d.table->receive(now(), mad, sender_key_of(from)), &from);
}

void Library::run(Device& dev, const cm::Actions& actions, const PeerAddress* sender) {
  // Events first: a REQ's event makes the id whose peer its answers go to.
  for (const cm::Event& e : actions.events) on_cm_event(dev, e, sender);
  // A connection that ended needs its peer no more (its MADs of this call aside).
  std::vector<uint32_t> ended;
  for (const cm::Event& e : actions.events) {
    using T = cm::EventType;
    if (e.type == T::kTimewaitExit || e.type == T::kUnreachable || e.type == T::kRejected) {
      ended.push_back(e.comm_id.value());
    }
  }
  for (const cm::MadToSend& m : actions.mads) {
    auto it = peers.find(m.comm_id.value());
    if (m.to == cm::Destination::kPeer && it != peers.end()) {
      send_mad(dev, it->second, m.mad);
    } else if (sender != nullptr) {
      send_mad(dev, *sender, m.mad);  // to whoever sent what is being answered
    }
  }
  for (uint32_t c : ended) peers.erase(c);
}

}  // namespace softhca::rdmacm
