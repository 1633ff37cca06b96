// The many-host workloads (model_workload.h, Pattern::kIncast, kAllToAll): flows from a sender
// host to a receiver host, one QP each, every host's one CPU thread posting closed-loop on its
// flows in turn while their send queues have room, polling its completions, else waiting. The
// receivers' CPUs are not modelled (receives re-posted untimed). Every post goes through the
// device; the timing model places it between the flow's two hosts, through the switch's output
// queues and link-level credits (sim/timing_model.h).
//
// The runtime has two devices: every exchange runs on softhca_0 (the sender) and softhca_1 (the
// receiver), on one of a few QP pairs shared by the flows, and the recorder places its chain on
// the flow's hosts (PostInfo::hosts, docs/decisions.md D21). A pair is shared by as many flows as
// its send queue holds their unsignaled WRs, so a post never finds it full.
#include <infiniband/verbs.h>

#include <algorithm>
#include <memory>
#include <queue>
#include <stdexcept>
#include <vector>

#include "sim/scheduler.h"
#include "tools/model_host_side.h"
#include "tools/model_post.h"
#include "tools/model_recorder.h"
#include "tools/model_sim_runtime.h"
#include "tools/model_tag_window.h"
#include "tools/model_workload.h"

namespace softhca::tools {

namespace {

constexpr uint32_t kSender = 0;    // the runtime's device every exchange is sent from ...
constexpr uint32_t kReceiver = 1;  // ... and received on
constexpr uint16_t kThread = 0;    // each host's one posting thread

class Fanout final : public sim::ChainListener {
 public:
  Fanout(const sim::MachineProfile& profile, const Workload& w)
      : w_(w), params_(sim::derive_timing(profile)), model_(scheduler_, params_, w.hosts), recorder_(tag_pools(), kModelHosts) {
    if (auto err = validate(w)) throw std::invalid_argument(*err);
    if (!is_fanout(w.pattern)) throw std::invalid_argument("run_fanout runs incast or alltoall");
    if (w.transport == Transport::kUd && w.size_bytes > profile.ib.mtu_bytes) {
      throw std::invalid_argument("a UD message is one packet: at most ib.mtu_bytes (" +
                                  std::to_string(profile.ib.mtu_bytes) + ")");
    }
    ensure_sim_runtime(profile);
    recorder_.set_rq_prefetch(profile.hca.rq_prefetch);
    recorder_.set_cut_through(profile.hca.cut_through ? &params_ : nullptr);
    recorder_.set_completion_gap(params_.rc_completion_gap);
    make_flows();
    make_pairs(profile.ib.mtu_bytes);
    wrs_.resize(w.postlist);
    sges_.resize(w.postlist);
  }

  RunResult run() {
    const SimRunScope scope(scheduler_, recorder_);
    const pcie::CounterSnapshot c0 = slot_named(kHostName[kSender]).counters().snapshot();
    const pcie::CounterSnapshot c1 = slot_named(kHostName[kReceiver]).counters().snapshot();
    for (uint32_t h = 0; h < hosts_.size(); ++h) schedule_act(h, Picoseconds(0));
    model_.run();
    RunResult r;
    r.workload = w_;
    for (const Flow& f : flows_) {
      if (f.retired != w_.messages) throw std::runtime_error("the workload ended with completions missing");
      r.messages += f.posted;
    }
    for (const Host& h : hosts_) r.elapsed = std::max(r.elapsed, h.done_at);
    // Summed over every sender (softhca_0) and every receiver (softhca_1); per host: r.traffic.
    r.requester = slot_named(kHostName[kSender]).counters().snapshot() - c0;
    r.responder = slot_named(kHostName[kReceiver]).counters().snapshot() - c1;
    const double seconds = static_cast<double>(r.elapsed.count()) * 1e-12;
    r.message_rate = seconds > 0 ? static_cast<double>(r.messages) / seconds : 0;
    r.goodput_gbps = r.message_rate * w_.size_bytes * 8 / 1e9;
    for (uint32_t h = 0; h < hosts_.size(); ++h) {
      if (hosts_[h].flows.empty()) continue;  // an incast's receiver: its CPU is not modelled
      r.cpu.push_back(CpuUse{h, kThread, hosts_[h].cpu_busy});
      if (h == 0) r.cpu_busy = hosts_[h].cpu_busy;
    }
    r.resources = model_.resource_use();
    r.scheduler_events = scheduler_.events_run();
    r.steps = model_.steps_placed();
    r.peak_pending_tags = tags_.peak();
    r.traffic = traffic_;
    return r;
  }

  void on_tagged_step(uint32_t tag, const sim::StepTimes& t) override {
    const TagInfo info = tags_.hear(tag);
    Host& h = hosts_[flows_[info.flow].src];
    h.cqes.push(Cqe{t.arrive, info.flow, info.wr});
    if (h.waiting && t.arrive < h.wake_at) schedule_act(flows_[info.flow].src, t.arrive);
  }

 private:
  struct Flow {
    uint32_t src = 0;
    uint32_t dst = 0;
    uint32_t pair = 0;   // the runtime's QP pair its exchanges run on
    uint32_t slots = sim::kNoPool;
    uint64_t posted = 0;
    uint64_t retired = 0;  // WRs whose completion has been polled
  };
  struct Cqe {
    Picoseconds visible;
    uint32_t flow;
    uint64_t wr;
    bool operator>(const Cqe& o) const { return visible != o.visible ? visible > o.visible : flow > o.flow; }
  };
  struct Host {
    std::vector<uint32_t> flows;  // the flows it sends, in the order it serves them
    size_t next = 0;              // the flow it tries first
    std::priority_queue<Cqe, std::vector<Cqe>, std::greater<>> cqes;  // by the time they are visible
    Picoseconds cpu_busy{0};
    uint64_t token = 0;
    bool waiting = false;
    Picoseconds wake_at = Picoseconds::max();
    Picoseconds done_at{0};
  };
  struct TagInfo {
    uint32_t flow;
    uint64_t wr;
  };

  std::vector<uint32_t> tag_pools() const {
    std::vector<uint32_t> pools;
    for (uint32_t h = 0; h < w_.hosts; ++h) pools.push_back(model_.tag_pool(h));
    return pools;
  }

  // incast: hosts 1..N-1 to host 0; alltoall: host h to 0, 1, ... (skipping itself), or shifted to
  // h+1, h+2, ... (mod N), in that order.
  void make_flows() {
    hosts_.resize(w_.hosts);
    traffic_.resize(w_.hosts);
    auto add = [this](uint32_t src, uint32_t dst) {
      Flow f;
      f.src = src;
      f.dst = dst;
      f.slots = model_.add_pool(params_.qp_wqes_in_flight);
      hosts_[src].flows.push_back(static_cast<uint32_t>(flows_.size()));
      flows_.push_back(f);
    };
    if (w_.pattern == Pattern::kIncast) {
      for (uint32_t s = 1; s < w_.hosts; ++s) add(s, 0);
      return;
    }
    for (uint32_t h = 0; h < w_.hosts; ++h) {
      for (uint32_t k = 1; k < w_.hosts; ++k) add(h, w_.shifted ? (h + k) % w_.hosts : (k - 1 < h ? k - 1 : k));
    }
  }

  // The runtime's QP pairs: a pair's send queue holds the postlist being posted next to the
  // unsignaled WRs of every flow sharing it (each at most signal_period - 1), so it never fills.
  void make_pairs(uint32_t mtu_bytes) {
    const uint64_t unsignaled = w_.signal_period - 1;
    const uint64_t share =
        unsignaled == 0 ? flows_.size() : std::max<uint64_t>(1, (w_.queue_depth - w_.postlist) / unsignaled);
    const auto pairs = static_cast<uint32_t>((flows_.size() + share - 1) / share);
    if (pairs > kMaxPairs) {
      throw std::invalid_argument("too many flows with unsignaled WRs for the runtime's QPs: raise --depth or lower "
                                  "--signal-period");
    }
    for (uint32_t f = 0; f < flows_.size(); ++f) flows_[f].pair = f % pairs;
    recv_bytes_ = w_.size_bytes + (w_.transport == Transport::kUd ? kUdGrhBytes : 0);
    const unsigned int remote = remote_access_of(w_.op);
    for (uint32_t d : {kSender, kReceiver}) slot_named(kHostName[d]).set_blueflame_mode(static_cast<uint8_t>(w_.blueflame));
    HostSideConfig sc;
    sc.transport = w_.transport;
    sc.qps = pairs;
    sc.send_depth = w_.queue_depth;
    sc.recv_depth = 1;
    sc.max_inline = w_.inline_data ? w_.size_bytes : 0;
    sc.buffer_bytes = w_.size_bytes;  // every message from the same page-aligned bytes: cut alike
    sc.access = IBV_ACCESS_LOCAL_WRITE;
    HostSideConfig rc = sc;
    rc.send_depth = 1;  // the receiver never posts
    rc.recv_depth = w_.op == Operation::kSend ? w_.queue_depth : 1;
    rc.max_inline = 0;
    rc.buffer_bytes = recv_bytes_;
    rc.access = IBV_ACCESS_LOCAL_WRITE | remote;
    sender_ = std::make_unique<HostSide>(kHostName[kSender]);
    receiver_ = std::make_unique<HostSide>(kHostName[kReceiver]);
    sender_->create(sc);
    receiver_->create(rc);
    const ibv_mtu mtu = mtu_enum(mtu_bytes);
    for (uint32_t q = 0; q < pairs; ++q) {
      sender_->connect(q, *receiver_, mtu, 0);
      receiver_->connect(q, *sender_, mtu, remote);
      if (w_.op == Operation::kSend) {
        for (uint32_t i = 0; i < w_.queue_depth; ++i) post_receive(q);
      }
    }
  }

  void schedule_act(uint32_t h, Picoseconds at) {
    Host& host = hosts_[h];
    const uint64_t token = ++host.token;
    host.waiting = false;
    host.wake_at = at;
    scheduler_.schedule_at(at, [this, h, token] { act(h, token); });
  }

  // WRs the flow may post now (0: none): the rest of its messages, at most a postlist, if its
  // send queue has room for them.
  [[nodiscard]] uint32_t room(const Flow& f) const {
    const uint64_t n = std::min<uint64_t>(w_.postlist, w_.messages - f.posted);
    if (n == 0 || f.posted + n - f.retired > w_.queue_depth) return 0;
    return static_cast<uint32_t>(n);
  }

  // The host's CPU is free now: post on the next of its flows with room, else poll the
  // completions visible, else wait for the next to become visible.
  void act(uint32_t hi, uint64_t token) {
    Host& h = hosts_[hi];
    if (token != h.token) return;
    h.wake_at = Picoseconds::max();
    const Picoseconds now = scheduler_.now();
    for (size_t k = 0; k < h.flows.size(); ++k) {
      const size_t at = (h.next + k) % h.flows.size();
      const uint32_t n = room(flows_[h.flows[at]]);
      if (n == 0) continue;
      h.next = at + 1;
      const Picoseconds cost = post(h.flows[at], n);
      h.cpu_busy += cost;
      schedule_act(hi, now + cost);
      return;
    }
    uint32_t cqes = 0;
    while (!h.cqes.empty() && h.cqes.top().visible <= now) {
      Flow& f = flows_[h.cqes.top().flow];
      f.retired = std::max(f.retired, h.cqes.top().wr + 1);  // a CQE retires its QP's WRs up to it
      h.cqes.pop();
      ++cqes;
    }
    if (cqes > 0) {
      const Picoseconds cost = params_.poll + params_.poll_cqe * cqes;
      h.cpu_busy += cost;
      schedule_act(hi, now + cost);
      return;
    }
    const bool done = std::all_of(h.flows.begin(), h.flows.end(),
                                  [this](uint32_t f) { return flows_[f].retired == w_.messages; });
    if (done) {
      h.done_at = now;
      return;
    }
    if (!h.cqes.empty()) {
      schedule_act(hi, h.cqes.top().visible);
    } else {
      h.waiting = true;  // on_tagged_step wakes it
    }
  }

  // Posts n WRs of flow fi through ibv_post_send on its runtime pair, records the chain, places it
  // between the flow's hosts. Returns the post's CPU time.
  Picoseconds post(uint32_t fi, uint32_t n) {
    Flow& f = flows_[fi];
    PostInfo info;
    info.requester = kSender;
    info.hosts = {f.src, f.dst};
    info.thread = kThread;
    info.wqes = n;
    info.qp_slots = f.slots;
    const uint32_t tag_base = tags_.next() - 1;
    uint32_t signaled = 0;
    for (uint32_t k = 0; k < n; ++k) {
      const uint64_t i = f.posted + k;
      const bool sig = (i + 1) % w_.signal_period == 0 || i + 1 == w_.messages;
      ibv_send_wr& wr = wrs_[k];
      wr = ibv_send_wr{};
      sges_[k] = ibv_sge{sender_->addr(), w_.size_bytes, sender_->mr()->lkey};
      wr.wr_id = i;
      wr.sg_list = &sges_[k];
      wr.num_sge = 1;
      wr.send_flags = (w_.inline_data ? IBV_SEND_INLINE : 0) | (sig ? IBV_SEND_SIGNALED : 0);
      wr.next = k + 1 < n ? &wrs_[k + 1] : nullptr;
      set_operation(wr, w_, *sender_, f.pair, receiver_->addr(), receiver_->mr()->rkey);
      if (sig) {
        tags_.issue(TagInfo{fi, i});
        ++signaled;
      }
    }
    if (signaled > 0) info.first_cqe_tag = 1;
    recorder_.begin(chain_, info);
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(sender_->qp(f.pair), wrs_.data(), &bad);
    const uint32_t cqes = recorder_.end();
    if (rc != 0) fail(sender_->name() + ": ibv_post_send", rc);
    if (cqes != signaled) throw std::runtime_error("a post did not complete inside its post");
    const Picoseconds cost = post_cpu_cost(params_, w_, recorder_, n);
    chain_.at(0).cost = cost;
    count(chain_);
    traffic_[f.src].messages_sent += n;
    traffic_[f.dst].messages_received += n;
    f.posted += n;
    model_.submit(model_.compile(chain_), scheduler_.now(), this, tag_base);
    drain(*sender_, f.pair, false);
    drain(*receiver_, f.pair, true);
    return cost;
  }

  // Each host's TLPs and packets, from the chain's steps.
  void count(const sim::ChainBuilder& chain) {
    for (const sim::Step& s : chain.steps()) {
      if (s.kind == sim::StepKind::kTlp) {
        HostTraffic& t = traffic_[s.host];
        ++t.tlps[static_cast<size_t>(s.dir)][static_cast<size_t>(s.tlp_class)];
        t.tlp_wire_bytes[static_cast<size_t>(s.dir)] += s.bytes;
      } else if (s.kind == sim::StepKind::kPacket) {
        ++traffic_[s.host].packets_sent;
        traffic_[s.host].packet_bytes_sent += s.bytes;
        ++traffic_[s.index].packets_received;
      }
    }
  }

  // The functional side: every completion the device wrote is taken out of the CQ at once (the
  // model decides when the CPU sees it), each receive re-posted untimed.
  void drain(HostSide& side, uint32_t q, bool receiver) {
    ibv_wc wc[16];
    for (;;) {
      const int got = ibv_poll_cq(side.cq(q), 16, wc);
      if (got < 0) fail(side.name() + ": ibv_poll_cq", -got);
      if (got == 0) return;
      for (int k = 0; k < got; ++k) {
        if (wc[k].status != IBV_WC_SUCCESS) {
          throw std::runtime_error(std::string("a completion failed: ") + ibv_wc_status_str(wc[k].status));
        }
        if (receiver && wc[k].opcode == IBV_WC_RECV) post_receive(q);
      }
    }
  }

  void post_receive(uint32_t q) { receiver_->post_receive(q, receiver_->addr(), recv_bytes_, recv_posted_++); }

  static constexpr uint32_t kMaxPairs = 4096;  // the runtime's QP pairs at most (assumed bound)

  Workload w_;
  sim::TimingParams params_;
  sim::Scheduler scheduler_;
  sim::TimingModel model_;
  ChainRecorder recorder_;
  std::vector<Flow> flows_;
  std::vector<Host> hosts_;
  std::vector<HostTraffic> traffic_;
  std::unique_ptr<HostSide> sender_;
  std::unique_ptr<HostSide> receiver_;
  uint32_t recv_bytes_ = 0;
  uint64_t recv_posted_ = 0;
  TagWindow<TagInfo> tags_;
  sim::ChainBuilder chain_;
  std::vector<ibv_send_wr> wrs_;
  std::vector<ibv_sge> sges_;
};

}  // namespace

RunResult run_fanout(const sim::MachineProfile& p, const Workload& w) {
  Fanout g(p, w);
  return g.run();
}

}  // namespace softhca::tools
