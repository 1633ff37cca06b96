#include "sim/timing_model.h"

#include <array>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

namespace softhca::sim {

namespace {
constexpr uint64_t kDataCreditBytes = 16;  // one PCIe data credit covers 16 bytes (4 DW)
constexpr int kLinkDirs = 2;
constexpr int kTlpClasses = 3;

std::string_view unit_resource_name(HcaUnit u) {
  switch (u) {
    case HcaUnit::kDoorbell: return "hca_doorbell";
    case HcaUnit::kWqe: return "hca_wqe";
    case HcaUnit::kTx: return "hca_tx";
    case HcaUnit::kRx: return "hca_rx";
    case HcaUnit::kCompletion: return "hca_completion";
  }
  return "hca";
}
}  // namespace

std::string_view to_string(Phase p) {
  switch (p) {
    case Phase::kCpuBuild: return "CPU build";
    case Phase::kDoorbell: return "doorbell";
    case Phase::kWqeFetch: return "WQE fetch";
    case Phase::kPayloadFetch: return "payload fetch";
    case Phase::kWire: return "wire";
    case Phase::kRemoteWrite: return "remote write";
    case Phase::kAck: return "ACK";
    case Phase::kCqeWrite: return "CQE write";
    case Phase::kPoll: return "poll";
  }
  return "?";
}

std::string_view to_string(HcaUnit u) {
  switch (u) {
    case HcaUnit::kDoorbell: return "doorbell";
    case HcaUnit::kWqe: return "wqe";
    case HcaUnit::kTx: return "tx";
    case HcaUnit::kRx: return "rx";
    case HcaUnit::kCompletion: return "completion";
  }
  return "?";
}

Picoseconds result_time(const Step& pred, const StepTimes& t, const Step& succ) {
  if (succ.kind == StepKind::kSwitchEgress) return t.start + (t.arrive - t.done);
  if (pred.kind == StepKind::kTlp && pred.dir == LinkDir::kUp && pred.tlp_class == TlpClass::kPosted) return t.done;
  return t.arrive;
}

struct TimingModel::HostResources {
  std::vector<Server> cpu;  // by thread
  std::array<Server, kLinkDirs> pcie;
  std::array<Server, kHcaUnitCount> hca;
  Server ib_port;        // this host's IB port, towards the switch (or the peer)
  Server switch_egress;  // the switch port towards this host
  std::array<std::array<uint32_t, kTlpClasses>, kLinkDirs> credit_pools{};
  uint32_t tags = 0;
};

// A chain's steps and their successors (CSR), checked once; shared by every placement of it.
struct ChainTemplate {
  std::vector<Step> steps;
  std::vector<uint32_t> succ_begin;  // successors of i: succ[succ_begin[i] .. succ_begin[i+1])
  std::vector<uint32_t> succ;
  std::vector<uint16_t> pending;     // predecessors of each step
  std::vector<uint32_t> roots;       // steps with no predecessor
};

// A chain being placed: its template and per-step placement state.
struct TimingModel::Chain {
  struct State {
    Picoseconds ready{0};  // latest predecessor result so far
    uint16_t pending = 0;  // predecessors not yet placed
    bool has_pool = false;
    bool has_credits = false;
    StepTimes t;
  };
  std::shared_ptr<const ChainTemplate> tpl;
  std::vector<State> state;
  size_t remaining = 0;
  ChainListener* listener = nullptr;
  std::vector<StepTimes>* times = nullptr;
  uint32_t tag_base = 0;
};

TimingModel::TimingModel(Scheduler& scheduler, const TimingParams& params, uint32_t hosts)
    : scheduler_(scheduler), params_(params), hosts_(hosts) {
  const TimingParams& p = params_;
  for (HostResources& h : hosts_) {
    auto& cp = h.credit_pools;
    const auto up = static_cast<size_t>(LinkDir::kUp);
    const auto down = static_cast<size_t>(LinkDir::kDown);
    const auto posted = static_cast<size_t>(TlpClass::kPosted);
    const auto nonposted = static_cast<size_t>(TlpClass::kNonPosted);
    const auto completion = static_cast<size_t>(TlpClass::kCompletion);
    // Device -> root complex: the root complex's receive buffers bound what the device may send.
    cp[up][posted] = add_pool(Pool::kUnlimited);
    pools_[cp[up][posted]] = Pool(p.rc_posted_hdr_credits, p.rc_posted_data_credits);
    cp[up][nonposted] = add_pool(Pool::kUnlimited);
    pools_[cp[up][nonposted]] = Pool(p.rc_nonposted_hdr_credits, Pool::kUnlimited);
    cp[up][completion] = add_pool(Pool::kUnlimited);
    // Root complex -> device: MMIO writes into the device's posted buffers; completions are
    // always accepted (an endpoint advertises infinite completion credits).
    cp[down][posted] = add_pool(Pool::kUnlimited);
    pools_[cp[down][posted]] = Pool(p.dev_posted_hdr_credits, p.dev_posted_data_credits);
    cp[down][nonposted] = add_pool(Pool::kUnlimited);
    cp[down][completion] = add_pool(Pool::kUnlimited);
    h.tags = add_pool(p.max_outstanding_reads);
  }
}

TimingModel::~TimingModel() = default;

uint32_t TimingModel::add_pool(uint64_t units) {
  pools_.emplace_back(units, Pool::kUnlimited);
  waiters_.emplace_back();
  return static_cast<uint32_t>(pools_.size() - 1);
}

uint32_t TimingModel::tag_pool(uint32_t host) const { return hosts_.at(host).tags; }

uint32_t TimingModel::credit_pool(uint32_t host, LinkDir dir, TlpClass cls) const {
  return hosts_[host].credit_pools[static_cast<size_t>(dir)][static_cast<size_t>(cls)];
}

uint32_t TimingModel::take_chain() {
  if (!free_chains_.empty()) {
    const uint32_t c = free_chains_.back();
    free_chains_.pop_back();
    return c;
  }
  chains_.push_back(std::make_unique<Chain>());
  return static_cast<uint32_t>(chains_.size() - 1);
}

std::shared_ptr<const ChainTemplate> TimingModel::compile(ChainBuilder& builder) {
  auto tpl = std::make_shared<ChainTemplate>();
  ChainTemplate& c = *tpl;
  c.steps.swap(builder.steps());
  builder.clear();
  const size_t n = c.steps.size();
  c.pending.assign(n, 0);
  c.succ_begin.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const Step& s = c.steps[i];
    if (s.host >= hosts_.size()) throw std::out_of_range("sim::TimingModel: step on an unknown host");
    if (s.kind == StepKind::kCpu && s.index >= hosts_[s.host].cpu.size()) hosts_[s.host].cpu.resize(s.index + 1u);
    if (s.kind == StepKind::kPacket && hosts_.size() > 2) {
      throw std::invalid_argument("sim::TimingModel: packet steps assume two hosts (split them per resource)");
    }
    for (uint32_t p : s.preds) {
      if (p == kNoStep) continue;
      if (p >= i) throw std::invalid_argument("sim::TimingModel: a step waits for a later step");
      ++c.succ_begin[p + 1];
      ++c.pending[i];
    }
    if (c.pending[i] == 0) c.roots.push_back(static_cast<uint32_t>(i));
  }
  for (size_t i = 0; i < n; ++i) c.succ_begin[i + 1] += c.succ_begin[i];
  c.succ.assign(c.succ_begin[n], 0);
  std::vector<uint32_t> fill(c.succ_begin.begin(), c.succ_begin.end() - 1);
  for (size_t i = 0; i < n; ++i) {
    for (uint32_t p : c.steps[i].preds) {
      if (p != kNoStep) c.succ[fill[p]++] = static_cast<uint32_t>(i);
    }
  }
  return tpl;
}

void TimingModel::submit(ChainBuilder& builder, Picoseconds start, ChainListener* listener,
                         std::vector<StepTimes>* times) {
  if (builder.empty()) return;
  submit(compile(builder), start, listener, 0, times);
}

void TimingModel::submit(const std::shared_ptr<const ChainTemplate>& tpl, Picoseconds start,
                         ChainListener* listener, uint32_t tag_base, std::vector<StepTimes>* times) {
  const size_t n = tpl->steps.size();
  if (n == 0) return;
  const uint32_t id = take_chain();
  Chain& c = *chains_[id];
  c.tpl = tpl;
  c.state.resize(n);
  for (size_t i = 0; i < n; ++i) c.state[i] = Chain::State{Picoseconds(0), tpl->pending[i], false, false, StepTimes{}};
  c.remaining = n;
  c.listener = listener;
  c.times = times;
  c.tag_base = tag_base;
  if (times != nullptr) times->assign(n, StepTimes{});
  ++active_;
  for (uint32_t i : tpl->roots) {
    c.state[i].ready = start;
    schedule_step(id, i, start + tpl->steps[i].lead);
  }
}

void TimingModel::schedule_step(uint32_t chain, uint32_t step, Picoseconds at) {
  if (at < now_) throw std::logic_error("sim::TimingModel: a step scheduled in the past");
  queue_push((static_cast<Key>(static_cast<uint64_t>(at.count())) << 64) | (static_cast<Key>(chain) << 32) | step);
}

namespace {
constexpr size_t kArity = 4;
}

void TimingModel::queue_push(Key k) {
  size_t i = queue_.size();
  queue_.push_back(k);
  while (i > 0) {
    const size_t parent = (i - 1) / kArity;
    if (!(k < queue_[parent])) break;
    queue_[i] = queue_[parent];
    i = parent;
  }
  queue_[i] = k;
}

void TimingModel::queue_pop() {
  const Key last = queue_.back();
  queue_.pop_back();
  const size_t n = queue_.size();
  if (n == 0) return;
  size_t i = 0;
  for (;;) {
    const size_t first = i * kArity + 1;
    if (first >= n) break;
    // The earliest child, chosen without branches (the comparisons are unpredictable).
    size_t best = first;
    Key best_key = queue_[first];
    const size_t end = first + kArity < n ? first + kArity : n;
    for (size_t c = first + 1; c < end; ++c) {
      const Key k = queue_[c];
      const bool earlier = k < best_key;
      best = earlier ? c : best;
      best_key = earlier ? k : best_key;
    }
    if (!(best_key < last)) break;
    queue_[i] = best_key;
    i = best;
  }
  queue_[i] = last;
}

Picoseconds TimingModel::next_time() const { return Picoseconds(static_cast<int64_t>(queue_.front() >> 64)); }

void TimingModel::run_next() {
  const Key k = queue_.front();
  queue_pop();
  now_ = Picoseconds(static_cast<int64_t>(k >> 64));
  run_step(static_cast<uint32_t>(static_cast<uint64_t>(k) >> 32), static_cast<uint32_t>(static_cast<uint64_t>(k)));
}

void TimingModel::run() {
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  for (;;) {
    const int64_t s = scheduler_.next_event_ps();
    if (!queue_.empty() && static_cast<int64_t>(queue_.front() >> 64) < s) {
      run_next();
    } else if (s != kNone) {
      scheduler_.run_one();
    } else {
      return;
    }
  }
}

Server& TimingModel::server_for(const Step& s) {
  HostResources& h = hosts_[s.host];
  switch (s.kind) {
    case StepKind::kCpu: return h.cpu[s.index];
    case StepKind::kTlp: return h.pcie[static_cast<size_t>(s.dir)];
    case StepKind::kHcaUnit: return h.hca[static_cast<size_t>(s.unit)];
    case StepKind::kIbLink: return h.ib_port;
    case StepKind::kSwitchEgress: return h.switch_egress;
    case StepKind::kPacket:
    case StepKind::kJoin: break;
  }
  throw std::logic_error("sim::TimingModel: a join or packet step has no single server");
}

Picoseconds TimingModel::service_of(const Step& s) const {
  switch (s.kind) {
    case StepKind::kCpu: return s.cost;
    case StepKind::kTlp: return Picoseconds(static_cast<int64_t>((s.bytes * params_.pcie_fs_per_byte + 999) / 1000));
    case StepKind::kHcaUnit: return params_.hca_unit[static_cast<size_t>(s.unit)];
    case StepKind::kIbLink:
    case StepKind::kSwitchEgress: {
      const uint64_t bytes = uint64_t{s.bytes} + params_.ib_packet_overhead_bytes;
      return Picoseconds(static_cast<int64_t>((bytes * params_.ib_fs_per_byte + 999) / 1000));
    }
    case StepKind::kPacket:
    case StepKind::kJoin: return Picoseconds(0);
  }
  return Picoseconds(0);
}

Picoseconds TimingModel::ib_serialization(uint32_t bytes) const {
  const uint64_t b = uint64_t{bytes} + params_.ib_packet_overhead_bytes;
  return Picoseconds(static_cast<int64_t>((b * params_.ib_fs_per_byte + 999) / 1000));
}

// Transmit unit, IB port, switch egress (cut-through, hops - 1 more switches as latency), cable,
// receive unit. Returns when the transmit unit was done (the WQE has left the HCA's pipeline).
Picoseconds TimingModel::place_packet(const Step& s, Picoseconds now, StepTimes& t) {
  if (s.index >= hosts_.size()) throw std::out_of_range("sim::TimingModel: packet to an unknown host");
  HostResources& src = hosts_[s.host];
  HostResources& dst = hosts_[s.index];
  const Picoseconds tx_cost = params_.hca_unit[static_cast<size_t>(HcaUnit::kTx)];
  const Picoseconds rx_cost = params_.hca_unit[static_cast<size_t>(HcaUnit::kRx)];
  const Picoseconds ser = ib_serialization(s.bytes);
  t.start = src.hca[static_cast<size_t>(HcaUnit::kTx)].reserve(now, tx_cost);
  const Picoseconds tx_done = t.start + tx_cost;
  const Picoseconds port_start = src.ib_port.reserve(tx_done, ser);
  src.ib_port.add_bytes(s.bytes);
  Picoseconds at_dst = port_start + ser + params_.cable;
  if (params_.switch_hops > 0) {
    const int64_t more = static_cast<int64_t>(params_.switch_hops) - 1;
    const Picoseconds head = port_start + params_.cable + params_.switch_hop + (params_.switch_hop + params_.cable) * more;
    const Picoseconds egress_start = dst.switch_egress.reserve(head, ser);
    dst.switch_egress.add_bytes(s.bytes);
    at_dst = egress_start + ser + params_.cable;
  }
  const Picoseconds rx_start = dst.hca[static_cast<size_t>(HcaUnit::kRx)].reserve(at_dst, rx_cost);
  t.done = rx_start + rx_cost;
  return tx_done;
}

Picoseconds TimingModel::latency_of(const Step& s) const {
  switch (s.kind) {
    case StepKind::kTlp: return params_.pcie_one_way;
    case StepKind::kIbLink:
    case StepKind::kSwitchEgress: return params_.cable;
    default: return Picoseconds(0);
  }
}

bool TimingModel::take(uint32_t pool, uint64_t units, uint64_t data, uint32_t chain, uint32_t step) {
  Pool& p = pools_[pool];
  if (p.unlimited()) return true;
  std::deque<Waiter>& wq = waiters_[pool];
  const bool is_head = !wq.empty() && wq.front().chain == chain && wq.front().step == step;
  if (!wq.empty() && !is_head) {
    // Flow control is in order: wait behind the requests already waiting.
    wq.push_back(Waiter{chain, step, units, data, false});
    return false;
  }
  if (p.try_take(now_, units, data)) {
    if (is_head) {
      wq.pop_front();
      wake_head(pool);
    }
    return true;
  }
  if (!is_head) wq.push_back(Waiter{chain, step, units, data, false});
  wq.front().scheduled = false;
  wake_head(pool);
  return false;
}

void TimingModel::wake_head(uint32_t pool) {
  std::deque<Waiter>& wq = waiters_[pool];
  if (wq.empty() || wq.front().scheduled) return;
  Picoseconds at{0};
  if (pools_[pool].earliest(now_, wq.front().units, wq.front().data, at)) {
    wq.front().scheduled = true;
    schedule_step(wq.front().chain, wq.front().step, at);
  }
}

void TimingModel::give_back(uint32_t pool, Picoseconds at, uint64_t units, uint64_t data) {
  Pool& p = pools_[pool];
  if (p.unlimited()) return;
  p.give_back(at, units, data);
  wake_head(pool);
}

void TimingModel::run_step(uint32_t chain_id, uint32_t i) {
  Chain& c = *chains_[chain_id];
  const ChainTemplate& tpl = *c.tpl;
  const Step& s = tpl.steps[i];
  Chain::State& st = c.state[i];
  if (s.acquire_pool != kNoPool && !st.has_pool) {
    if (!take(s.acquire_pool, 1, 0, chain_id, i)) return;
    st.has_pool = true;
  }
  uint32_t credits = kNoPool;
  uint64_t data_credits = 0;
  if (s.kind == StepKind::kTlp) {
    credits = credit_pool(s.host, s.dir, s.tlp_class);
    data_credits = (s.payload_bytes + kDataCreditBytes - 1) / kDataCreditBytes;
    if (!st.has_credits) {
      if (!take(credits, 1, data_credits, chain_id, i)) return;
      st.has_credits = true;
    }
  }

  const Picoseconds now = now_;
  StepTimes& t = st.t;
  t.ready = now;
  Picoseconds release_at{-1};
  if (s.kind == StepKind::kJoin) {
    t.start = t.done = now;
  } else if (s.kind == StepKind::kPacket) {
    release_at = place_packet(s, now, t);
  } else {
    Server& server = server_for(s);
    const Picoseconds service = service_of(s);
    t.start = server.reserve(now, service);
    t.done = t.start + service;
    server.add_bytes(s.bytes);
  }
  const Picoseconds latency = latency_of(s);
  t.arrive = t.done + latency;
  ++steps_placed_;

  if (credits != kNoPool) give_back(credits, t.arrive + params_.fc_update, 1, data_credits);
  if (s.release_pool != kNoPool) give_back(s.release_pool, release_at >= Picoseconds(0) ? release_at : t.arrive, 1, 0);
  if (c.times != nullptr) (*c.times)[i] = t;
  if (s.tag != 0 && c.listener != nullptr) c.listener->on_tagged_step(c.tag_base + s.tag, t);

  for (uint32_t e = tpl.succ_begin[i]; e < tpl.succ_begin[i + 1]; ++e) {
    const uint32_t j = tpl.succ[e];
    Chain::State& sj = c.state[j];
    const Step& next = tpl.steps[j];
    const Picoseconds result = result_time(s, t, next);
    if (result > sj.ready) sj.ready = result;
    if (--sj.pending == 0) {
      Picoseconds at = sj.ready + next.lead;
      if (next.kind == StepKind::kSwitchEgress) at += params_.switch_hop;
      if (next.kind == StepKind::kTlp && next.tlp_class == TlpClass::kCompletion) at += params_.pcie_turnaround;
      schedule_step(chain_id, j, at);
    }
  }
  if (--c.remaining == 0) {
    --active_;
    c.tpl.reset();
    free_chains_.push_back(chain_id);
  }
}

std::vector<ResourceUse> TimingModel::resource_use() const {
  std::vector<ResourceUse> out;
  auto add = [&out](std::string_view name, uint32_t host, const Server& s) {
    out.push_back(ResourceUse{name, host, s.busy(), s.operations(), s.bytes()});
  };
  for (uint32_t h = 0; h < hosts_.size(); ++h) {
    const HostResources& r = hosts_[h];
    for (const Server& s : r.cpu) add("cpu", h, s);
    add("pcie_down", h, r.pcie[static_cast<size_t>(LinkDir::kDown)]);
    add("pcie_up", h, r.pcie[static_cast<size_t>(LinkDir::kUp)]);
    for (int u = 0; u < kHcaUnitCount; ++u) {
      add(unit_resource_name(static_cast<HcaUnit>(u)), h, r.hca[static_cast<size_t>(u)]);
    }
    add("ib_port", h, r.ib_port);
    add("switch_egress", h, r.switch_egress);
  }
  return out;
}

}  // namespace softhca::sim
