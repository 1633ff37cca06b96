// The stream workload and the one-post latency run (model_workload.h): softhca_0's CPU threads
// post closed-loop while their send queues have room, poll what has arrived, else wait; every post
// goes through ibv_post_send, its chain is recorded (model_recorder.h) and placed on the timing
// model. softhca_1's CPU is not modelled: its receives are re-posted untimed.
#include <infiniband/verbs.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <numeric>
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

constexpr uint32_t kRequesterHost = 0;
constexpr uint32_t kResponderHost = 1;
constexpr const char* kRequester = kHostName[kRequesterHost];
constexpr const char* kResponder = kHostName[kResponderHost];

class StreamGenerator final : public sim::ChainListener {
 public:
  StreamGenerator(const sim::MachineProfile& profile, const Workload& w, bool replay = false)
      : w_(w),
        params_(sim::derive_timing(profile)),
        model_(scheduler_, params_, kModelHosts),
        recorder_({model_.tag_pool(kRequesterHost), model_.tag_pool(kResponderHost)}) {
    if (auto err = validate(as_pattern(w, Pattern::kStream))) throw std::invalid_argument(*err);
    if (w.transport == Transport::kUd && w.size_bytes > profile.ib.mtu_bytes) {
      throw std::invalid_argument("a UD message is one packet: at most ib.mtu_bytes (" +
                                  std::to_string(profile.ib.mtu_bytes) + ")");
    }
    if (w.threads > profile.cpu.cores) {
      throw std::invalid_argument("threads must be at most the profile's cpu.cores (" +
                                  std::to_string(profile.cpu.cores) + "): each posting thread has a core");
    }
    ensure_sim_runtime(profile);
    recorder_.set_rq_prefetch(profile.hca.rq_prefetch);
    recorder_.set_cut_through(profile.hca.cut_through ? &params_ : nullptr);
    recorder_.set_completion_gap(params_.rc_completion_gap);
    stride_ = w.size_bytes;
    recv_stride_ = w.size_bytes + (w.transport == Transport::kUd ? kUdGrhBytes : 0);
    slot_named(kRequester).set_blueflame_mode(static_cast<uint8_t>(w.blueflame));
    slot_named(kResponder).set_blueflame_mode(static_cast<uint8_t>(w.blueflame));
    const unsigned int remote = remote_access_of(w.op);
    HostSideConfig rc;
    rc.transport = w.transport;
    rc.qps = w.qps;
    rc.send_depth = w.queue_depth;
    rc.recv_depth = 1;
    rc.max_inline = w.inline_data ? w.size_bytes : 0;
    rc.buffer_bytes = static_cast<size_t>(w.qps) * w.queue_depth * stride_;
    rc.access = IBV_ACCESS_LOCAL_WRITE;
    HostSideConfig pc = rc;
    pc.send_depth = 1;  // the responder never posts: its send queues are as small as they come
    pc.recv_depth = w.queue_depth;
    pc.max_inline = 0;
    pc.buffer_bytes = static_cast<size_t>(w.qps) * w.queue_depth * recv_stride_;
    pc.access = IBV_ACCESS_LOCAL_WRITE | remote;
    req_ = std::make_unique<HostSide>(kRequester);
    resp_ = std::make_unique<HostSide>(kResponder);
    req_->create(rc);
    resp_->create(pc);
    const ibv_mtu mtu = mtu_enum(profile.ib.mtu_bytes);
    threads_.resize(w.threads);
    for (uint32_t q = 0; q < w.qps; ++q) {
      req_->connect(q, *resp_, mtu, 0);
      resp_->connect(q, *req_, mtu, remote);
      Qp qp;
      qp.thread = q % w.threads;
      qp.target = w.messages / w.qps + (q < w.messages % w.qps ? 1 : 0);
      qp.slots = model_.add_pool(params_.qp_wqes_in_flight);
      qps_.push_back(qp);
      threads_[qp.thread].qps.push_back(q);
      if (w.op == Operation::kSend) post_receives(q, w.queue_depth);
    }
    wrs_.resize(w.postlist);
    sges_.resize(w.postlist);
    replay_ = replay;
    period_ = std::lcm(std::lcm(uint64_t{w.queue_depth}, uint64_t{w.signal_period}), uint64_t{w.postlist});
  }

  RunResult run() {
    const SimRunScope scope(scheduler_, recorder_);
    const pcie::CounterSnapshot req0 = slot_named(kRequester).counters().snapshot();
    const pcie::CounterSnapshot resp0 = slot_named(kResponder).counters().snapshot();
    for (uint32_t t = 0; t < threads_.size(); ++t) schedule_act(t, Picoseconds(0));
    model_.run();
    RunResult r;
    r.workload = w_;
    for (const Qp& q : qps_) {
      if (q.retired != q.target) throw std::runtime_error("closed loop ended with completions missing");
      r.messages += q.target;
    }
    for (const Thread& t : threads_) r.elapsed = std::max(r.elapsed, t.done_at);
    r.requester = slot_named(kRequester).counters().snapshot() - req0;
    r.responder = slot_named(kResponder).counters().snapshot() - resp0;
    add_counts(r.requester, replayed_requester_);
    add_counts(r.responder, replayed_responder_);
    r.replayed_posts = replayed_posts_;
    const double seconds = static_cast<double>(r.elapsed.count()) * 1e-12;
    r.message_rate = seconds > 0 ? static_cast<double>(r.messages) / seconds : 0;
    r.goodput_gbps = r.message_rate * w_.size_bytes * 8 / 1e9;
    r.cpu_busy = cpu_busy_;
    for (uint32_t t = 0; t < threads_.size(); ++t) r.cpu.push_back(CpuUse{kRequesterHost, t, threads_[t].cpu_busy});
    r.resources = model_.resource_use();
    r.scheduler_events = scheduler_.events_run();
    r.steps = model_.steps_placed();
    r.peak_pending_tags = tags_.peak();
    return r;
  }

  LatencyBreakdown latency() {
    {
      const SimRunScope scope(scheduler_, recorder_);
      latency_mode_ = true;
      Qp& q = qps_[0];
      q.target = w_.postlist;
      post(threads_[0], q, w_.postlist);
      model_.run();
    }
    if (latency_cqe_step_ == sim::kNoStep) throw std::runtime_error("latency run: no completion recorded");
    return breakdown();
  }
  // After latency(): the chain it placed.
  [[nodiscard]] LatencyTrace latency_trace() const { return LatencyTrace{latency_chain_, latency_times_}; }

  void on_tagged_step(uint32_t tag, const sim::StepTimes& t) override {
    const TagInfo info = tags_.hear(tag);
    Qp& q = qps_[info.qp];
    // A send queue completes in order: a CQE is never visible before the CQE of an earlier WR.
    Cqe c{t.arrive, info.wr, info.functional};
    auto it = q.cqes.end();
    while (it != q.cqes.begin() && std::prev(it)->wr > c.wr) --it;
    if (it != q.cqes.begin() && std::prev(it)->visible > c.visible) c.visible = std::prev(it)->visible;
    q.cqes.insert(it, c);
    Thread& th = threads_[q.thread];
    if (th.waiting && t.arrive < th.wake_at) schedule_act(q.thread, t.arrive);
  }

 private:
  struct Cqe {
    Picoseconds visible;
    uint64_t wr;  // the WR it completes; completions are in order, so it retires every WR up to it
    bool functional = true;  // the device wrote it (false: a replayed post's)
  };
  // A post recorded in the first period of a QP, replayed in later periods (replay mode).
  struct CachedPost {
    std::shared_ptr<const sim::ChainTemplate> chain;  // tags relative: 1..tags
    uint32_t tags = 0;
    Picoseconds cost{0};
    pcie::CounterSnapshot requester;  // the post's TLPs
    pcie::CounterSnapshot responder;
    bool valid = false;
  };
  struct Qp {
    uint32_t thread = 0;
    uint64_t target = 0;
    uint64_t posted = 0;
    uint64_t retired = 0;
    uint32_t slots = sim::kNoPool;
    std::deque<Cqe> cqes;
    std::vector<CachedPost> cache;  // by (posted mod period) / postlist
  };
  struct Thread {
    std::vector<uint32_t> qps;
    size_t next = 0;         // round robin over its QPs
    uint64_t token = 0;      // the pending act() that counts; older ones are stale
    bool waiting = false;    // idle until a completion arrives
    Picoseconds wake_at = Picoseconds::max();
    Picoseconds done_at{0};
    Picoseconds cpu_busy{0};  // its posts and polls
  };
  struct TagInfo {
    uint32_t qp;
    uint64_t wr;
    bool functional;
  };

  void schedule_act(uint32_t t, Picoseconds at) {
    Thread& th = threads_[t];
    const uint64_t token = ++th.token;
    th.waiting = false;
    th.wake_at = at;
    scheduler_.schedule_at(at, [this, t, token] { act(t, token); });
  }

  // The thread's CPU is free now: post if a QP can, else poll completions that have arrived,
  // else wait for the next one.
  void act(uint32_t t, uint64_t token) {
    Thread& th = threads_[t];
    if (token != th.token) return;
    th.wake_at = Picoseconds::max();
    for (size_t i = 0; i < th.qps.size(); ++i) {
      Qp& q = qps_[th.qps[(th.next + i) % th.qps.size()]];
      const uint64_t left = q.target - q.posted;
      if (left == 0) continue;
      const auto n = static_cast<uint32_t>(std::min<uint64_t>(left, w_.postlist));
      if (q.posted + n - q.retired > w_.queue_depth) continue;
      th.next = (th.next + i + 1) % th.qps.size();
      const Picoseconds cost = post(th, q, n);
      schedule_act(t, scheduler_.now() + cost);
      return;
    }
    Picoseconds poll_cost{0};
    Picoseconds next_visible = Picoseconds::max();
    bool outstanding = false;
    for (uint32_t qi : th.qps) {
      Qp& q = qps_[qi];
      if (q.retired < q.target) outstanding = true;
      uint32_t ready = 0;
      while (ready < q.cqes.size() && q.cqes[ready].visible <= scheduler_.now()) ++ready;
      if (ready < q.cqes.size()) next_visible = std::min(next_visible, q.cqes[ready].visible);
      if (ready == 0) continue;
      poll_cost += params_.poll + params_.poll_cqe * ready;
      reap(qi, ready);
    }
    if (poll_cost > Picoseconds(0)) {
      cpu_busy_ += poll_cost;
      th.cpu_busy += poll_cost;
      schedule_act(t, scheduler_.now() + poll_cost);
      return;
    }
    if (!outstanding) {
      th.done_at = scheduler_.now();
      return;
    }
    if (next_visible != Picoseconds::max()) {
      schedule_act(t, next_visible);
    } else {
      th.waiting = true;  // on_tagged_step wakes it
    }
  }

  // Polls `n` completions of QP qi (they are in its CQ: the post that made them has completed).
  void reap(uint32_t qi, uint32_t n) {
    Qp& q = qps_[qi];
    ibv_wc wc[16];
    uint32_t left = 0;  // only CQEs of posts the device executed are in the CQ (not replayed ones)
    for (uint32_t i = 0; i < n; ++i) left += q.cqes[i].functional ? 1 : 0;
    while (left > 0) {
      const int want = static_cast<int>(std::min<uint32_t>(left, 16));
      const int got = ibv_poll_cq(req_->cq(qi), want, wc);
      if (got != want) throw std::runtime_error("closed loop: a modeled completion is missing from the CQ");
      for (int i = 0; i < got; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) {
          throw std::runtime_error(std::string("closed loop: a completion failed: ") + ibv_wc_status_str(wc[i].status));
        }
      }
      left -= static_cast<uint32_t>(got);
    }
    q.retired = std::max(q.retired, q.cqes[n - 1].wr + 1);
    q.cqes.erase(q.cqes.begin(), q.cqes.begin() + n);
  }

  // Places a recorded post's chain again, for the WRs q.posted.. (replay mode).
  Picoseconds replay(Qp& q, uint32_t qi, const CachedPost& c) {
    const uint32_t tag_base = tags_.next() - 1;
    uint32_t issued = 0;
    for (uint32_t j = 0; j < w_.postlist; ++j) {
      const uint64_t i = q.posted + j;
      if (signaled(q, i)) {
        tags_.issue(TagInfo{qi, i, false});
        ++issued;
      }
    }
    if (issued != c.tags) throw std::logic_error("replay: the signaled pattern does not repeat");
    add_counts(replayed_requester_, c.requester);
    add_counts(replayed_responder_, c.responder);
    cpu_busy_ += c.cost;
    threads_[q.thread].cpu_busy += c.cost;
    model_.submit(c.chain, scheduler_.now(), this, tag_base);
    q.posted += w_.postlist;
    ++replayed_posts_;
    return c.cost;
  }

  bool signaled(const Qp& q, uint64_t wr) const {
    if (latency_mode_) return wr + 1 == q.target;
    return (wr + 1) % w_.signal_period == 0 || wr + 1 == q.target;
  }

  // Posts n WRs on q through ibv_post_send, records the chain it makes and places it. Returns the
  // post's CPU time.
  Picoseconds post(Thread& th, Qp& q, uint32_t n) {
    const auto qi = static_cast<uint32_t>(&q - qps_.data());
    const auto ti = static_cast<uint16_t>(&th - threads_.data());
    // Replay: a closed loop of one shape repeats itself every `period_` WRs of a QP (the ring
    // offset, payload slot and signaled pattern all repeat), so a post in a later whole period
    // makes the chain the same post of the first period made. The tail after the last whole
    // period runs on the device again, which is then exactly where a full run would have it.
    // A QP whose target is less than two periods never replays: it keeps no cache (with thousands
    // of QPs of a few messages each, the cache would be most of the run's memory).
    if (replay_ && n == w_.postlist && !latency_mode_ && q.target >= 2 * period_) {
      const uint64_t period = q.posted / period_;
      const size_t slot = static_cast<size_t>((q.posted % period_) / w_.postlist);
      if (q.cache.empty()) q.cache.resize(static_cast<size_t>(period_ / w_.postlist));
      if (period >= 1 && (period + 1) * period_ <= q.target && q.cache[slot].valid) return replay(q, qi, q.cache[slot]);
    }
    const bool record = replay_ && n == w_.postlist && !latency_mode_ && q.posted < period_ && !q.cache.empty();
    pcie::CounterSnapshot req0;
    pcie::CounterSnapshot resp0;
    if (record) {
      req0 = slot_named(kRequester).counters().snapshot();
      resp0 = slot_named(kResponder).counters().snapshot();
    }
    PostInfo info;
    info.requester = kRequesterHost;
    info.thread = ti;
    info.wqes = n;
    info.qp_slots = q.slots;
    // The chain's CQE steps carry tags 1..k; placed with the window's base, they are the k tags
    // issued here.
    const uint32_t tag_base = tags_.next() - 1;
    uint32_t signaled_wrs = 0;
    for (uint32_t j = 0; j < n; ++j) {
      const uint64_t i = q.posted + j;
      const uint64_t slot = static_cast<uint64_t>(qi) * w_.queue_depth + i % w_.queue_depth;
      sges_[j] = ibv_sge{req_->addr() + slot * stride_, w_.size_bytes, req_->mr()->lkey};
      ibv_send_wr& wr = wrs_[j];
      wr = ibv_send_wr{};
      wr.wr_id = i;
      wr.next = j + 1 < n ? &wrs_[j + 1] : nullptr;
      wr.sg_list = &sges_[j];
      wr.num_sge = 1;
      unsigned int flags = w_.inline_data ? IBV_SEND_INLINE : 0;
      if (signaled(q, i)) {
        flags |= IBV_SEND_SIGNALED;
        info.first_cqe_tag = 1;
        tags_.issue(TagInfo{qi, i, true});
        ++signaled_wrs;
      }
      wr.send_flags = flags;
      set_operation(wr, w_, *req_, qi, resp_->addr() + slot * stride_, resp_->mr()->rkey);
    }
    recorder_.begin(chain_, info);
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(req_->qp(qi), wrs_.data(), &bad);
    const uint32_t cqes = recorder_.end();
    if (rc != 0) fail(req_->name() + ": ibv_post_send", rc);
    if (cqes != signaled_wrs) {
      throw std::runtime_error("closed loop: a post completed " + std::to_string(cqes) + " of its " +
                               std::to_string(signaled_wrs) + " signaled WRs inside the post");
    }
    const Picoseconds cost = post_cpu_cost(params_, w_, recorder_, n);
    chain_.at(0).cost = cost;
    cpu_busy_ += cost;
    th.cpu_busy += cost;
    if (latency_mode_) {
      latency_chain_ = chain_.steps();
      for (uint32_t s = 0; s < latency_chain_.size(); ++s) {
        if (latency_chain_[s].tag != 0) latency_cqe_step_ = s;
      }
    }
    const std::shared_ptr<const sim::ChainTemplate> tpl = model_.compile(chain_);
    if (record) {
      CachedPost& c = q.cache[static_cast<size_t>(q.posted / w_.postlist)];
      c.chain = tpl;
      c.tags = signaled_wrs;
      c.cost = cost;
      c.requester = slot_named(kRequester).counters().snapshot() - req0;
      c.responder = slot_named(kResponder).counters().snapshot() - resp0;
      c.valid = true;
    }
    model_.submit(tpl, scheduler_.now(), this, tag_base, latency_mode_ ? &latency_times_ : nullptr);
    q.posted += n;
    if (w_.op == Operation::kSend) drain_receives(qi);
    return cost;
  }

  // SEND: the responder's receives (its CPU is not modelled: re-posting is untimed).
  void post_receives(uint32_t qi, uint32_t n) {
    for (uint32_t j = 0; j < n; ++j) {
      const uint64_t slot = static_cast<uint64_t>(qi) * w_.queue_depth + (recv_posted_ + j) % w_.queue_depth;
      resp_->post_receive(qi, resp_->addr() + slot * recv_stride_, recv_stride_, slot);
    }
    recv_posted_ += n;
  }
  void drain_receives(uint32_t qi) {
    ibv_wc wc[16];
    for (;;) {
      const int got = ibv_poll_cq(resp_->cq(qi), 16, wc);
      if (got < 0) fail(resp_->name() + ": ibv_poll_cq", -got);
      if (got == 0) return;
      for (int i = 0; i < got; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) throw std::runtime_error("closed loop: a receive completion failed");
      }
      post_receives(qi, static_cast<uint32_t>(got));
    }
  }

  // The critical path from the signaled CQE back to the CPU's post: each step is charged the time
  // from its latest predecessor's result to its own.
  LatencyBreakdown breakdown() const {
    LatencyBreakdown b;
    const auto& steps = latency_chain_;
    const auto& times = latency_times_;
    auto result = [&](uint32_t pred, uint32_t succ) {
      return sim::result_time(steps[pred], times[pred], steps[succ], params_);
    };
    uint32_t cur = latency_cqe_step_;
    Picoseconds end = times[cur].arrive;  // the CQE is in host memory
    for (;;) {
      uint32_t best = sim::kNoStep;
      for (uint32_t p : steps[cur].preds) {
        if (p != sim::kNoStep && (best == sim::kNoStep || result(p, cur) > result(best, cur))) best = p;
      }
      const Picoseconds from = best == sim::kNoStep ? Picoseconds(0) : result(best, cur);
      b.phase[static_cast<size_t>(steps[cur].phase)] += end - from;
      if (best == sim::kNoStep) break;
      end = from;
      cur = best;
    }
    b.phase[static_cast<size_t>(sim::Phase::kPoll)] += params_.poll + params_.poll_cqe;
    for (Picoseconds p : b.phase) b.total += p;
    return b;
  }

  Workload w_;
  sim::TimingParams params_;
  sim::Scheduler scheduler_;
  sim::TimingModel model_;
  ChainRecorder recorder_;
  std::unique_ptr<HostSide> req_;
  std::unique_ptr<HostSide> resp_;
  uint64_t stride_ = 8;       // bytes per message slot of the requester's buffer (and the target's)
  uint64_t recv_stride_ = 8;  // per receive slot: UD adds the GRH
  std::vector<Qp> qps_;
  std::vector<Thread> threads_;
  TagWindow<TagInfo> tags_;
  std::vector<ibv_send_wr> wrs_;
  std::vector<ibv_sge> sges_;
  sim::ChainBuilder chain_;
  Picoseconds cpu_busy_{0};
  uint64_t recv_posted_ = 0;
  bool latency_mode_ = false;
  bool replay_ = false;
  uint64_t period_ = 1;  // WRs after which a QP's posts repeat: lcm(depth, signal period, postlist)
  uint64_t replayed_posts_ = 0;
  pcie::CounterSnapshot replayed_requester_;
  pcie::CounterSnapshot replayed_responder_;
  std::vector<sim::Step> latency_chain_;
  std::vector<sim::StepTimes> latency_times_;
  uint32_t latency_cqe_step_ = sim::kNoStep;
};

}  // namespace

RunResult run_closed_loop(const sim::MachineProfile& p, const Workload& w, const RunOptions& options) {
  Workload stream = w;
  stream.pattern = Pattern::kStream;
  StreamGenerator g(p, stream, options.replay);
  return g.run();
}

LatencyBreakdown measure_latency(const sim::MachineProfile& p, const Workload& w) {
  LatencyTrace unused;
  return measure_latency(p, w, unused);
}

LatencyBreakdown measure_latency(const sim::MachineProfile& p, const Workload& w, LatencyTrace& trace) {
  Workload one = w;
  one.pattern = Pattern::kStream;
  one.qps = 1;
  one.threads = 1;
  one.messages = w.postlist;
  StreamGenerator g(p, one);
  const LatencyBreakdown b = g.latency();
  trace = g.latency_trace();
  return b;
}

}  // namespace softhca::tools
