// The ping-pong workload (model_workload.h, Pattern::kPingPong), perftest's _lat semantics: host 0
// posts a message; host 1's CPU polls for it (SEND: its receive CQE; WRITE: the last byte of its
// buffer, which the last payload write brings) and posts the same message back; host 0 polls for
// that and posts again. One QP per host, one CPU thread each; a round trip is from one of host 0's
// posts to its next. Every post goes through the device (no replay).
#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <memory>
#include <stdexcept>

#include "sim/scheduler.h"
#include "tools/model_host_side.h"
#include "tools/model_post.h"
#include "tools/model_recorder.h"
#include "tools/model_sim_runtime.h"
#include "tools/model_tag_window.h"
#include "tools/model_workload.h"

namespace softhca::tools {

namespace {

constexpr uint32_t kQp = 0;      // the one QP of each host
constexpr uint16_t kThread = 0;  // the one CPU thread of each host

class PingPong final : public sim::ChainListener {
 public:
  PingPong(const sim::MachineProfile& profile, const Workload& w)
      : w_(w),
        params_(sim::derive_timing(profile)),
        model_(scheduler_, params_, kModelHosts),
        recorder_({model_.tag_pool(0), model_.tag_pool(1)}) {
    if (auto err = validate(as_pattern(w, Pattern::kPingPong))) throw std::invalid_argument(*err);
    if (w.transport == Transport::kUd && w.size_bytes > profile.ib.mtu_bytes) {
      throw std::invalid_argument("a UD message is one packet: at most ib.mtu_bytes (" +
                                  std::to_string(profile.ib.mtu_bytes) + ")");
    }
    ensure_sim_runtime(profile);
    recorder_.set_rq_prefetch(profile.hca.rq_prefetch);
    recorder_.set_cut_through(profile.hca.cut_through ? &params_ : nullptr);
    recorder_.set_completion_gap(params_.rc_completion_gap);
    recv_bytes_ = w.size_bytes + (w.transport == Transport::kUd ? kUdGrhBytes : 0);
    const unsigned int remote = remote_access_of(w.op);
    const ibv_mtu mtu = mtu_enum(profile.ib.mtu_bytes);
    for (uint32_t h = 0; h < kModelHosts; ++h) {
      slot_named(kHostName[h]).set_blueflame_mode(static_cast<uint8_t>(w.blueflame));
      HostSideConfig c;
      c.transport = w.transport;
      c.qps = 1;
      c.send_depth = w.queue_depth;
      c.recv_depth = w.op == Operation::kSend ? w.queue_depth : 1;
      c.max_inline = w.inline_data ? w.size_bytes : 0;
      // The send buffer first, then the receive buffer the peer writes into.
      c.buffer_bytes = static_cast<size_t>(w.size_bytes) + recv_bytes_;
      c.access = IBV_ACCESS_LOCAL_WRITE | remote;
      hosts_[h].side = std::make_unique<HostSide>(kHostName[h]);
      hosts_[h].side->create(c);
      hosts_[h].slots = model_.add_pool(params_.qp_wqes_in_flight);
    }
    for (uint32_t h = 0; h < kModelHosts; ++h) hosts_[h].side->connect(kQp, *hosts_[1 - h].side, mtu, remote);
    if (w.op == Operation::kSend) {
      for (Host& h : hosts_) {
        for (uint32_t i = 0; i < w.queue_depth; ++i) post_receive(h);
      }
    }
    hosts_[0].may_post = 1;  // host 0 begins
  }

  RunResult run() {
    const SimRunScope scope(scheduler_, recorder_);
    const pcie::CounterSnapshot c0 = slot_named(kHostName[0]).counters().snapshot();
    const pcie::CounterSnapshot c1 = slot_named(kHostName[1]).counters().snapshot();
    for (uint32_t h = 0; h < kModelHosts; ++h) schedule_act(h, Picoseconds(0));
    model_.run();
    RunResult r;
    r.workload = w_;
    for (const Host& h : hosts_) {
      if (h.posted != w_.messages || h.retired != w_.messages || h.seen != w_.messages) {
        throw std::runtime_error("ping-pong ended with messages or completions missing");
      }
      r.elapsed = std::max(r.elapsed, h.done_at);
    }
    r.messages = w_.messages;
    r.requester = slot_named(kHostName[0]).counters().snapshot() - c0;
    r.responder = slot_named(kHostName[1]).counters().snapshot() - c1;
    const double seconds = static_cast<double>(r.elapsed.count()) * 1e-12;
    r.message_rate = seconds > 0 ? static_cast<double>(r.messages) / seconds : 0;
    r.goodput_gbps = r.message_rate * w_.size_bytes * 8 / 1e9;
    r.cpu_busy = hosts_[0].cpu_busy;
    for (uint32_t h = 0; h < hosts_.size(); ++h) r.cpu.push_back(CpuUse{h, 0, hosts_[h].cpu_busy});
    r.resources = model_.resource_use();
    r.scheduler_events = scheduler_.events_run();
    r.steps = model_.steps_placed();
    r.peak_pending_tags = tags_.peak();
    // perftest's t_typical: the sorted round trips' middle one (index n / 2), halved.
    uint64_t seen = 0;
    for (const auto& [rtt, count] : round_trips_) {
      if (seen <= r.messages / 2 && r.messages / 2 < seen + count) r.half_rtt = Picoseconds(rtt / 2);
      seen += count;
    }
    r.half_rtt_min = Picoseconds(round_trips_.begin()->first / 2);
    r.half_rtt_max = Picoseconds(round_trips_.rbegin()->first / 2);
    return r;
  }

  void on_tagged_step(uint32_t tag, const sim::StepTimes& t) override {
    const TagInfo info = tags_.hear(tag);
    Host& h = hosts_[info.host];
    if (info.arrival) {
      h.arrivals.push_back(t.arrive);  // messages arrive in order on one QP
    } else {
      h.cqes.push_back(Cqe{t.arrive, info.wr});  // so do send completions
    }
    if (h.waiting && t.arrive < h.wake_at) schedule_act(info.host, t.arrive);
  }

 private:
  struct Cqe {
    Picoseconds visible;
    uint64_t wr;
  };
  struct Host {
    std::unique_ptr<HostSide> side;
    uint32_t slots = sim::kNoPool;
    uint64_t posted = 0;    // messages posted
    uint64_t retired = 0;   // WRs whose completion has been polled
    uint64_t seen = 0;      // peer messages polled
    uint64_t may_post = 0;  // messages it may post now (host 0: its first; then one per message seen)
    std::deque<Cqe> cqes;               // its send completions, by the time they are visible
    std::deque<Picoseconds> arrivals;   // the peer's messages, by the time they are visible
    uint64_t recv_posted = 0;
    Picoseconds cpu_busy{0};
    uint64_t token = 0;
    bool waiting = false;
    Picoseconds wake_at = Picoseconds::max();
    Picoseconds done_at{0};
    Picoseconds last_post{-1};  // host 0: when its previous post began
  };
  struct TagInfo {
    uint32_t host;
    uint64_t wr;
    bool arrival;  // the message is visible to host `host` (else: its WR's send completion)
  };

  void schedule_act(uint32_t h, Picoseconds at) {
    Host& host = hosts_[h];
    const uint64_t token = ++host.token;
    host.waiting = false;
    host.wake_at = at;
    scheduler_.schedule_at(at, [this, h, token] { act(h, token); });
  }

  void round_trip_ends(Picoseconds at) {
    Host& h0 = hosts_[0];
    if (h0.last_post >= Picoseconds(0)) ++round_trips_[(at - h0.last_post).count()];
    h0.last_post = at;
  }

  // The host's CPU is free now: post the answer it owes if its send queue has room, else poll what
  // has arrived (its send completions, the peer's message), else wait for the next of them.
  void act(uint32_t hi, uint64_t token) {
    Host& h = hosts_[hi];
    if (token != h.token) return;
    h.wake_at = Picoseconds::max();
    const Picoseconds now = scheduler_.now();
    if (h.may_post > 0 && h.posted < w_.messages && h.posted - h.retired < w_.queue_depth) {
      if (hi == 0) round_trip_ends(now);
      --h.may_post;
      const Picoseconds cost = post(hi);
      h.cpu_busy += cost;
      schedule_act(hi, now + cost);
      return;
    }
    // One poll: the send CQEs visible (ibv_poll_cq), and the peer's message (SEND: a receive CQE
    // in the same poll; WRITE: the load that sees the buffer's last byte change, assumed to cost
    // what one more CQE does).
    uint32_t cqes = 0;
    while (!h.cqes.empty() && h.cqes.front().visible <= now) {
      h.retired = h.cqes.front().wr + 1;
      h.cqes.pop_front();
      ++cqes;
    }
    uint32_t messages = 0;
    while (!h.arrivals.empty() && h.arrivals.front() <= now) {
      h.arrivals.pop_front();
      ++messages;
    }
    if (cqes + messages > 0) {
      h.seen += messages;
      hosts_[hi].may_post += messages;
      const Picoseconds cost = params_.poll + params_.poll_cqe * (cqes + messages);
      h.cpu_busy += cost;
      schedule_act(hi, now + cost);
      return;
    }
    if (h.seen == w_.messages && h.retired == w_.messages && h.posted == w_.messages) {
      h.done_at = now;
      if (hi == 0) round_trip_ends(now);
      return;
    }
    Picoseconds next = Picoseconds::max();
    if (!h.cqes.empty()) next = h.cqes.front().visible;
    if (!h.arrivals.empty()) next = std::min(next, h.arrivals.front());
    if (next != Picoseconds::max()) {
      schedule_act(hi, next);
    } else {
      h.waiting = true;  // on_tagged_step wakes it
    }
  }

  // Posts host hi's next message through ibv_post_send, records its chain and places it; the
  // chain tells the model when the peer can see the message. Returns the post's CPU time.
  Picoseconds post(uint32_t hi) {
    Host& h = hosts_[hi];
    HostSide& self = *h.side;
    const HostSide& peer = *hosts_[1 - hi].side;
    const uint64_t i = h.posted;
    const bool signaled = (i + 1) % w_.signal_period == 0 || i + 1 == w_.messages;
    PostInfo info;
    info.requester = hi;
    info.thread = kThread;
    info.wqes = 1;
    info.qp_slots = h.slots;
    const uint32_t tag_base = tags_.next() - 1;
    if (signaled) {
      info.first_cqe_tag = 1;
      tags_.issue(TagInfo{hi, i, false});
    }
    info.arrival_tag = signaled ? 2 : 1;
    tags_.issue(TagInfo{1 - hi, i, true});
    ibv_sge sge{self.addr(), w_.size_bytes, self.mr()->lkey};
    ibv_send_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = (w_.inline_data ? IBV_SEND_INLINE : 0) | (signaled ? IBV_SEND_SIGNALED : 0);
    // A WRITE lands in the peer's receive buffer, after its send buffer.
    set_operation(wr, w_, self, kQp, peer.addr() + w_.size_bytes, peer.mr()->rkey);
    recorder_.begin(chain_, info);
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(self.qp(kQp), &wr, &bad);
    const uint32_t cqes = recorder_.end();
    if (rc != 0) fail(self.name() + ": ibv_post_send", rc);
    if (cqes != (signaled ? 1u : 0u) || !recorder_.arrival_tagged()) {
      throw std::runtime_error("ping-pong: a post did not complete, or its message did not arrive, inside the post");
    }
    const Picoseconds cost = post_cpu_cost(params_, w_, recorder_, 1);
    chain_.at(0).cost = cost;
    model_.submit(model_.compile(chain_), scheduler_.now(), this, tag_base);
    ++h.posted;
    drain(hosts_[0]);
    drain(hosts_[1]);
    return cost;
  }

  // The functional side of what the chain models: every completion the device wrote is taken out
  // of the CQ at once (the model decides when the CPU sees it) and each receive is re-posted
  // untimed (ibv_post_recv writes host memory only: no PCIe).
  void drain(Host& h) {
    ibv_wc wc[16];
    for (;;) {
      const int got = ibv_poll_cq(h.side->cq(kQp), 16, wc);
      if (got < 0) fail(h.side->name() + ": ibv_poll_cq", -got);
      if (got == 0) return;
      for (int k = 0; k < got; ++k) {
        if (wc[k].status != IBV_WC_SUCCESS) {
          throw std::runtime_error(std::string("ping-pong: a completion failed: ") + ibv_wc_status_str(wc[k].status));
        }
        if (wc[k].opcode == IBV_WC_RECV) post_receive(h);
      }
    }
  }

  void post_receive(Host& h) {
    h.side->post_receive(kQp, h.side->addr() + w_.size_bytes, recv_bytes_, h.recv_posted++);
  }

  Workload w_;
  sim::TimingParams params_;
  sim::Scheduler scheduler_;
  sim::TimingModel model_;
  ChainRecorder recorder_;
  std::array<Host, kModelHosts> hosts_;
  uint32_t recv_bytes_ = 0;  // a receive buffer: the message, and for UD the GRH before it
  TagWindow<TagInfo> tags_;
  sim::ChainBuilder chain_;
  std::map<int64_t, uint64_t> round_trips_;  // [ps] -> how many: few distinct values in a steady state
};

}  // namespace

RunResult run_pingpong(const sim::MachineProfile& p, const Workload& w) {
  Workload pp = w;
  pp.pattern = Pattern::kPingPong;
  PingPong g(p, pp);
  return g.run();
}

}  // namespace softhca::tools
