#include "tools/model_workload.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>

#include "runtime/runtime.h"
#include "sim/scheduler.h"
#include "tools/model_recorder.h"

namespace softhca::tools {

namespace {

constexpr uint32_t kMaxQueueDepth = 1u << 14;   // the device's max_qp_wr (R1)
constexpr uint32_t kMaxInlineBytes = 956;       // the device's max_inline_data (docs/device.md)
constexpr uint32_t kMaxQps = 4096;
constexpr uint32_t kAtomicBytes = 8;
constexpr uint32_t kMaxRdAtomic = 16;           // the device's max_qp_rd_atom
constexpr uint32_t kRequesterHost = 0;
constexpr uint32_t kResponderHost = 1;
// The seed of the sim devices' keys and QPNs (hca::DeviceConfig::seed): fixed, so a run is the
// same run every time (STYLE.md rule 4).
constexpr uint64_t kSimDeviceSeed = 0;
constexpr const char* kRequester = "softhca_0";
constexpr const char* kResponder = "softhca_1";

[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err) + " (errno " + std::to_string(err) + ")");
}

// ---- the process's sim runtime ------------------------------------------------------------------

// The devices' clock in sim mode: the current run's scheduler time. Timers are never run: the
// in-process fabric is lossless and every exchange completes inside its post (docs/decisions.md
// D1), so a retransmission or RNR timer can only fire on a broken run, which the generator
// detects (a completion that never comes).
class SimClock final : public hca::EngineClock {
 public:
  Picoseconds now() override { return scheduler_ != nullptr ? scheduler_->now() : Picoseconds(0); }
  void request_wakeup(Picoseconds) override {}
  void attach(const sim::Scheduler* s) { scheduler_ = s; }

 private:
  const sim::Scheduler* scheduler_ = nullptr;
};

// The runtime's taps, handed to the recorder of the run in progress (if any).
class TapForwarder final : public runtime::TlpTap, public runtime::PacketTap {
 public:
  void on_tlp(uint64_t seq, uint32_t device, const pcie::Tlp& tlp) override {
    if (target_ != nullptr) target_->on_tlp(seq, device, tlp);
  }
  void on_packet(uint64_t seq, uint32_t device, runtime::PacketDirection dir, std::span<const uint8_t> p) override {
    if (target_ != nullptr) target_->on_packet(seq, device, dir, p);
  }
  void attach(ChainRecorder* r) { target_ = r; }

 private:
  ChainRecorder* target_ = nullptr;
};

struct SimEnvironment {
  pcie::PcieConfig config;
  SimClock clock;
  TapForwarder taps;
};

// Created once, never destroyed: the process runtime refers to its clock and taps until exit.
SimEnvironment* g_sim_env = nullptr;

bool same_config(const pcie::PcieConfig& a, const pcie::PcieConfig& b) {
  return a.mps_bytes == b.mps_bytes && a.mrrs_bytes == b.mrrs_bytes && a.completion_bytes == b.completion_bytes &&
         a.mwr_overhead_bytes == b.mwr_overhead_bytes && a.mrd_overhead_bytes == b.mrd_overhead_bytes &&
         a.cpld_overhead_bytes == b.cpld_overhead_bytes && a.write_combine_bytes == b.write_combine_bytes;
}

ibv_mtu mtu_enum(uint32_t bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
  }
}

// ---- verbs objects of one run ---------------------------------------------------------------------

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// One host's side: a context, a PD, one registered buffer, and per QP a CQ and an RC QP.
class Side {
 public:
  explicit Side(const char* name) : name_(name) {}

  // Opens the device and creates the objects; separate from the constructor so that the
  // destructor releases whatever was made when a step fails.
  void create(const Workload& w, size_t buffer_bytes, unsigned int access, bool requester) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) fail("ibv_get_device_list", errno);
    for (int i = 0; i < n && ctx_ == nullptr; ++i) {
      if (name_ == ibv_get_device_name(list[i])) ctx_ = ibv_open_device(list[i]);
    }
    ibv_free_device_list(list);
    if (ctx_ == nullptr) throw std::runtime_error("device " + name_ + " not found in the sim runtime");
    pd_ = ibv_alloc_pd(ctx_);
    if (pd_ == nullptr) fail(name_ + ": ibv_alloc_pd", errno);
    const size_t rounded = (buffer_bytes + 4095) / 4096 * 4096;
    buf_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, rounded)));
    if (!buf_) fail(name_ + ": buffer", ENOMEM);
    std::memset(buf_.get(), 0, rounded);
    mr_ = ibv_reg_mr(pd_, buf_.get(), rounded, static_cast<int>(access));
    if (mr_ == nullptr) fail(name_ + ": ibv_reg_mr", errno);
    for (uint32_t q = 0; q < w.qps; ++q) {
      ibv_cq* cq = ibv_create_cq(ctx_, static_cast<int>(w.queue_depth), nullptr, nullptr, 0);
      if (cq == nullptr) fail(name_ + ": ibv_create_cq", errno);
      cqs_.push_back(cq);
      ibv_qp_init_attr init{};
      init.send_cq = cq;
      init.recv_cq = cq;
      init.qp_type = IBV_QPT_RC;
      init.sq_sig_all = 0;
      init.cap.max_send_wr = w.queue_depth;
      init.cap.max_recv_wr = requester ? 1 : w.queue_depth;
      init.cap.max_send_sge = 1;
      init.cap.max_recv_sge = 1;
      init.cap.max_inline_data = requester && w.inline_data ? w.size_bytes : 0;
      ibv_qp* qp = ibv_create_qp(pd_, &init);
      if (qp == nullptr) fail(name_ + ": ibv_create_qp", errno);
      qps_.push_back(qp);
    }
    ibv_port_attr port{};
    if (int rc = ibv_query_port(ctx_, 1, &port); rc != 0) fail(name_ + ": ibv_query_port", rc);
    lid_ = port.lid;
  }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;
  ~Side() {
    for (ibv_qp* qp : qps_) ibv_destroy_qp(qp);
    for (ibv_cq* cq : cqs_) ibv_destroy_cq(cq);
    if (mr_ != nullptr) ibv_dereg_mr(mr_);
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (ctx_ != nullptr) ibv_close_device(ctx_);
  }

  // RESET -> INIT -> RTR -> RTS of QP q towards the peer's QP q.
  void connect(uint32_t q, const Side& peer, ibv_mtu mtu, unsigned int access) {
    ibv_qp* qp = qps_[q];
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = access;
    modify(qp, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = peer.qps_[q]->qp_num;
    a.max_dest_rd_atomic = kMaxRdAtomic;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = peer.lid_;
    a.ah_attr.port_num = 1;
    modify(qp, a,
           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
               IBV_QP_MIN_RNR_TIMER);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = kMaxRdAtomic;
    modify(qp, a,
           IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
               IBV_QP_MAX_QP_RD_ATOMIC);
  }

  [[nodiscard]] uint8_t* buffer() const { return buf_.get(); }
  [[nodiscard]] uint64_t addr() const { return reinterpret_cast<uintptr_t>(buf_.get()); }
  [[nodiscard]] ibv_mr* mr() const { return mr_; }
  [[nodiscard]] ibv_qp* qp(uint32_t q) const { return qps_[q]; }
  [[nodiscard]] ibv_cq* cq(uint32_t q) const { return cqs_[q]; }
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  void modify(ibv_qp* qp, ibv_qp_attr& a, int mask) {
    if (int rc = ibv_modify_qp(qp, &a, mask); rc != 0) fail(name_ + ": ibv_modify_qp", rc);
  }

  std::string name_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::unique_ptr<uint8_t, FreeDeleter> buf_;
  ibv_mr* mr_ = nullptr;
  std::vector<ibv_cq*> cqs_;
  std::vector<ibv_qp*> qps_;
  uint16_t lid_ = 0;
};

runtime::DeviceSlot& slot_named(const char* name) {
  for (runtime::DeviceSlot* s : runtime::Runtime::process().devices()) {
    if (s->name() == name) return *s;
  }
  throw std::runtime_error(std::string("device ") + name + " not found in the sim runtime");
}

// ---- the closed loop ------------------------------------------------------------------------------

class Generator final : public sim::ChainListener {
 public:
  Generator(const sim::MachineProfile& profile, const Workload& w, bool replay = false)
      : w_(w),
        params_(sim::derive_timing(profile)),
        model_(scheduler_, params_, 2),
        recorder_({model_.tag_pool(kRequesterHost), model_.tag_pool(kResponderHost)}) {
    if (auto err = validate(w)) throw std::invalid_argument(*err);
    ensure_sim_runtime(profile);
    stride_ = w.size_bytes;
    slot_named(kRequester).set_blueflame_mode(static_cast<uint8_t>(w.blueflame));
    slot_named(kResponder).set_blueflame_mode(static_cast<uint8_t>(w.blueflame));
    const size_t bytes = static_cast<size_t>(w.qps) * w.queue_depth * stride_;
    const unsigned int remote = w.op == Operation::kRead     ? IBV_ACCESS_REMOTE_READ
                                : w.op == Operation::kAtomic ? IBV_ACCESS_REMOTE_ATOMIC
                                                             : IBV_ACCESS_REMOTE_WRITE;
    req_ = std::make_unique<Side>(kRequester);
    resp_ = std::make_unique<Side>(kResponder);
    req_->create(w, bytes, IBV_ACCESS_LOCAL_WRITE, true);
    resp_->create(w, bytes, IBV_ACCESS_LOCAL_WRITE | remote, false);
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
    g_sim_env->clock.attach(&scheduler_);
    g_sim_env->taps.attach(&recorder_);
    const pcie::CounterSnapshot req0 = slot_named(kRequester).counters().snapshot();
    const pcie::CounterSnapshot resp0 = slot_named(kResponder).counters().snapshot();
    try {
      for (uint32_t t = 0; t < threads_.size(); ++t) schedule_act(t, Picoseconds(0));
      model_.run();
    } catch (...) {
      detach();
      throw;
    }
    detach();
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
    r.resources = model_.resource_use();
    r.scheduler_events = scheduler_.events_run();
    r.steps = model_.steps_placed();
    return r;
  }

  LatencyBreakdown latency() {
    g_sim_env->clock.attach(&scheduler_);
    g_sim_env->taps.attach(&recorder_);
    latency_mode_ = true;
    try {
      Qp& q = qps_[0];
      q.target = w_.postlist;
      post(threads_[0], q, w_.postlist);
      model_.run();
    } catch (...) {
      detach();
      throw;
    }
    detach();
    if (latency_cqe_step_ == sim::kNoStep) throw std::runtime_error("latency run: no completion recorded");
    return breakdown();
  }
  // After latency(): the chain it placed.
  [[nodiscard]] LatencyTrace latency_trace() const { return LatencyTrace{latency_chain_, latency_times_}; }

  void on_tagged_step(uint32_t tag, const sim::StepTimes& t) override {
    const TagInfo& info = tags_.at(tag - 1);
    Qp& q = qps_[info.qp];
    // RC completes in order: a CQE is never visible before the CQE of an earlier WR.
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
    uint64_t wr;  // the WR it completes; RC completes in order, so it retires every WR up to it
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
  };
  struct TagInfo {
    uint32_t qp;
    uint64_t wr;
    bool functional;
  };

  void detach() {
    g_sim_env->taps.attach(nullptr);
    g_sim_env->clock.attach(nullptr);
  }

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

  static void add_counts(pcie::CounterSnapshot& into, const pcie::CounterSnapshot& d) {
    for (int t = 0; t < pcie::kTlpTypeCount; ++t) {
      for (int c = 0; c < pcie::kTlpCauseCount; ++c) {
        into.at(static_cast<pcie::TlpType>(t), static_cast<pcie::TlpCause>(c)) +=
            d.at(static_cast<pcie::TlpType>(t), static_cast<pcie::TlpCause>(c));
      }
    }
  }

  // Places a recorded post's chain again, for the WRs q.posted.. (replay mode).
  Picoseconds replay(Qp& q, uint32_t qi, const CachedPost& c) {
    const auto tag_base = static_cast<uint32_t>(tags_.size());
    for (uint32_t j = 0; j < w_.postlist; ++j) {
      const uint64_t i = q.posted + j;
      if (signaled(q, i)) tags_.push_back(TagInfo{qi, i, false});
    }
    if (tags_.size() - tag_base != c.tags) throw std::logic_error("replay: the signaled pattern does not repeat");
    add_counts(replayed_requester_, c.requester);
    add_counts(replayed_responder_, c.responder);
    cpu_busy_ += c.cost;
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
    if (replay_ && n == w_.postlist && !latency_mode_) {
      const uint64_t period = q.posted / period_;
      const size_t slot = static_cast<size_t>((q.posted % period_) / w_.postlist);
      if (q.cache.empty()) q.cache.resize(static_cast<size_t>(period_ / w_.postlist));
      if (period >= 1 && (period + 1) * period_ <= q.target && q.cache[slot].valid) return replay(q, qi, q.cache[slot]);
    }
    const bool record = replay_ && n == w_.postlist && !latency_mode_ && q.posted < period_ &&
                        period_ <= q.target && !q.cache.empty();
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
        if (signaled_wrs == 0) info.first_cqe_tag = static_cast<uint32_t>(tags_.size() + 1);
        tags_.push_back(TagInfo{qi, i, true});
        ++signaled_wrs;
      }
      wr.send_flags = flags;
      const uint64_t remote = resp_->addr() + slot * stride_;
      switch (w_.op) {
        case Operation::kWrite:
          wr.opcode = IBV_WR_RDMA_WRITE;
          wr.wr.rdma = {remote, resp_->mr()->rkey};
          break;
        case Operation::kRead:
          wr.opcode = IBV_WR_RDMA_READ;
          wr.wr.rdma = {remote, resp_->mr()->rkey};
          break;
        case Operation::kSend: wr.opcode = IBV_WR_SEND; break;
        case Operation::kAtomic:
          wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
          wr.wr.atomic = {remote, 1, 0, resp_->mr()->rkey};
          break;
      }
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
    // Step 0's CPU time: the call, building each WQE (and copying inline data), then the doorbell
    // or the BlueFlame lines.
    const int64_t inline_lines = w_.inline_data ? (w_.size_bytes + 63) / 64 : 0;
    Picoseconds cost = params_.post_call + (params_.wqe_build + params_.inline_per_64b * inline_lines) * n;
    cost += recorder_.blueflame_lines() > 0 ? params_.blueflame_line * recorder_.blueflame_lines()
                                            : params_.doorbell * recorder_.doorbells();
    chain_.at(0).cost = cost;
    cpu_busy_ += cost;
    if (record) {
      CachedPost& c = q.cache[static_cast<size_t>(q.posted / w_.postlist)];
      sim::ChainBuilder copy;
      copy.steps() = chain_.steps();
      c.tags = 0;
      for (sim::Step& st : copy.steps()) {
        if (st.tag != 0) st.tag = ++c.tags;  // relative: the k-th CQE of the post
      }
      c.chain = model_.compile(copy);
      c.cost = cost;
      c.requester = slot_named(kRequester).counters().snapshot() - req0;
      c.responder = slot_named(kResponder).counters().snapshot() - resp0;
      c.valid = true;
    }
    if (latency_mode_) {
      latency_chain_ = chain_.steps();
      for (uint32_t s = 0; s < latency_chain_.size(); ++s) {
        if (latency_chain_[s].tag != 0) latency_cqe_step_ = s;
      }
      model_.submit(chain_, scheduler_.now(), this, &latency_times_);
    } else {
      model_.submit(chain_, scheduler_.now(), this);
    }
    q.posted += n;
    if (w_.op == Operation::kSend) drain_receives(qi);
    return cost;
  }

  // SEND: the responder's receives (its CPU is not modelled: re-posting is untimed).
  void post_receives(uint32_t qi, uint32_t n) {
    for (uint32_t j = 0; j < n; ++j) {
      const uint64_t slot = static_cast<uint64_t>(qi) * w_.queue_depth + (recv_posted_ + j) % w_.queue_depth;
      ibv_sge sge{resp_->addr() + slot * stride_, w_.size_bytes, resp_->mr()->lkey};
      ibv_recv_wr wr{};
      wr.wr_id = slot;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      if (int rc = ibv_post_recv(resp_->qp(qi), &wr, &bad); rc != 0) fail(resp_->name() + ": ibv_post_recv", rc);
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
    auto result = [&](uint32_t pred, uint32_t succ) { return sim::result_time(steps[pred], times[pred], steps[succ]); };
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
  std::unique_ptr<Side> req_;
  std::unique_ptr<Side> resp_;
  uint64_t stride_ = 8;
  std::vector<Qp> qps_;
  std::vector<Thread> threads_;
  std::vector<TagInfo> tags_;  // tag k + 1 -> its WR
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

std::string_view to_string(Operation op) {
  switch (op) {
    case Operation::kWrite: return "write";
    case Operation::kRead: return "read";
    case Operation::kSend: return "send";
    case Operation::kAtomic: return "atomic";
  }
  return "?";
}

std::optional<Operation> operation_from_string(std::string_view s) {
  if (s == "write") return Operation::kWrite;
  if (s == "read") return Operation::kRead;
  if (s == "send") return Operation::kSend;
  if (s == "atomic") return Operation::kAtomic;
  return std::nullopt;
}

std::optional<std::string> validate(const Workload& w) {
  if (w.messages == 0) return "the workload needs at least one message";
  if (w.size_bytes == 0) return "message size must be at least 1 byte";
  if (w.size_bytes > (1u << 30)) return "message size must be at most 1 GiB";
  if (w.op == Operation::kAtomic && w.size_bytes != kAtomicBytes) return "atomics are 8 bytes (use --size 8)";
  if (w.inline_data && (w.op == Operation::kRead || w.op == Operation::kAtomic)) {
    return "inline data applies to write and send only";
  }
  if (w.inline_data && w.size_bytes > kMaxInlineBytes) {
    return "inline messages are at most " + std::to_string(kMaxInlineBytes) + " bytes";
  }
  if (w.qps == 0 || w.qps > kMaxQps) return "QPs must be 1.." + std::to_string(kMaxQps);
  if (w.threads == 0 || w.threads > w.qps) return "threads must be 1..QPs (each thread owns its QPs)";
  if (w.threads > 255) return "at most 255 threads";
  if (w.queue_depth == 0 || w.queue_depth > kMaxQueueDepth) {
    return "queue depth must be 1.." + std::to_string(kMaxQueueDepth);
  }
  if (w.postlist == 0 || w.signal_period == 0) return "postlist and signal period must be at least 1";
  // A post must fit next to the unsignaled WRs no completion has retired yet.
  if (w.postlist + w.signal_period - 1 > w.queue_depth) {
    return "postlist + signal period - 1 must not exceed the queue depth, or the closed loop stalls";
  }
  const uint64_t buffer = static_cast<uint64_t>(w.qps) * w.queue_depth * w.size_bytes;
  if (buffer > (uint64_t{1} << 32)) return "QPs x queue depth x size must stay within 4 GiB of buffers";
  return std::nullopt;
}

pcie::PcieConfig pcie_config_of(const sim::MachineProfile& p) {
  pcie::PcieConfig c;
  c.mps_bytes = p.pcie.mps_bytes;
  c.mrrs_bytes = p.pcie.mrrs_bytes;
  c.completion_bytes = p.pcie.completion_bytes;
  // P2-P4: 8 bytes of framing; request headers of 3 DW (32-bit addresses) or 4 DW; completion
  // headers 3 DW; ECRC 4 more.
  const uint32_t framing = 8;
  const uint32_t ecrc = p.pcie.ecrc ? 4 : 0;
  const uint32_t request_header = p.pcie.address_bits == 64 ? 16 : 12;
  c.mwr_overhead_bytes = framing + request_header + ecrc;
  c.mrd_overhead_bytes = framing + request_header + ecrc;
  c.cpld_overhead_bytes = framing + 12 + ecrc;
  c.write_combine_bytes = 64;  // K2
  return c;
}

void ensure_sim_runtime(const sim::MachineProfile& p) {
  const pcie::PcieConfig config = pcie_config_of(p);
  if (g_sim_env != nullptr) {
    if (!same_config(config, g_sim_env->config)) {
      throw std::runtime_error(
          "this process's sim runtime was created with another PCIe byte model (MPS, MRRS, completion "
          "size, header sizes); run profiles that differ in those in separate processes");
    }
    return;
  }
  auto* env = new SimEnvironment();
  env->config = config;
  runtime::RuntimeOptions options;
  options.num_devices = 2;
  options.pcie = config;
  options.clock = &env->clock;
  options.device_seed = kSimDeviceSeed;  // the same keys and QPNs in every run
  options.tlp_tap = &env->taps;
  options.packet_tap = &env->taps;
  if (!runtime::Runtime::install_process(runtime::Runtime::create(options))) {
    delete env;
    throw std::runtime_error("the timing model needs its own runtime, but this process already uses a live one");
  }
  g_sim_env = env;
  runtime::Runtime::process();
}

RunResult run_closed_loop(const sim::MachineProfile& p, const Workload& w, const RunOptions& options) {
  Generator g(p, w, options.replay);
  return g.run();
}

LatencyBreakdown measure_latency(const sim::MachineProfile& p, const Workload& w) {
  LatencyTrace unused;
  return measure_latency(p, w, unused);
}

LatencyBreakdown measure_latency(const sim::MachineProfile& p, const Workload& w, LatencyTrace& trace) {
  Workload one = w;
  one.qps = 1;
  one.threads = 1;
  one.messages = w.postlist;
  Generator g(p, one);
  const LatencyBreakdown b = g.latency();
  trace = g.latency_trace();
  return b;
}

}  // namespace softhca::tools
