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

Picoseconds result_time(const Step& pred, const StepTimes& t, const Step& succ, const TimingParams& params) {
  if (succ.kind == StepKind::kSwitchEgress) return t.start + (t.arrive - t.done);
  if (pred.kind == StepKind::kPacket && succ.host == pred.host) {
    return t.start + params.hca_unit[static_cast<size_t>(HcaUnit::kTx)];
  }
  if (pred.kind == StepKind::kTlp && pred.dir == LinkDir::kUp && pred.tlp_class == TlpClass::kPosted) return t.done;
  return t.arrive;
}

// Indices into TimingModel::servers_ and pools_.
struct TimingModel::HostResources {
  std::vector<uint32_t> cpu;  // by thread
  std::array<uint32_t, kLinkDirs> pcie{};
  std::array<uint32_t, kHcaUnitCount> hca{};
  uint32_t ib_port = 0;        // this host's IB port, towards the switch (or the peer)
  uint32_t switch_egress = 0;  // the switch port towards this host
  std::array<std::array<uint32_t, kTlpClasses>, kLinkDirs> credit_pools{};
  uint32_t tags = 0;
  uint32_t switch_credits = kNoPool;  // the switch input buffer this host's port sends into (staged)
  uint32_t rx_credits = kNoPool;      // this host's HCA receive buffer (staged)
};

// A port's output queue (more than two hosts): packets in arrival order, the head sent when the
// port is free and the buffer at the other end has credits for it.
struct TimingModel::OutputPort {
  struct Queued {
    uint32_t chain;
    uint32_t step;
    Picoseconds since;  // joined the queue
  };
  uint32_t server = 0;
  RingQueue<Queued> queue;
};

namespace {
// Where a staged packet is (StepState::stage).
enum PacketStage : uint8_t { kAtTx, kAtPort, kAtEgress, kAtReceiver };
}  // namespace

// The servers a packet from one host to another occupies (place_packet()).
struct TimingModel::PacketRoute {
  uint32_t tx = 0;      // the sender's transmit unit
  uint32_t port = 0;    // its IB port
  uint32_t egress = 0;  // the switch's port towards the receiver
  uint32_t rx = 0;      // the receiver's receive unit
};

namespace {
constexpr uint32_t kNoServer = 0xffffffff;
// In ChainTemplate::succ: the successor is a switch egress, which takes its predecessor's result
// at the packet's head (result_time()).
constexpr uint32_t kSwitchEdge = 0x80000000;
// The successor is on a packet's sending host (a UC or UD send completion): it takes the packet's
// result when the transmit unit is done with it (result_time()).
constexpr uint32_t kLocalEdge = 0x40000000;
constexpr uint32_t kEdgeFlags = kSwitchEdge | kLocalEdge;
// StepPlacement::flags: what a step does besides occupying its server, tested with one load.
constexpr uint8_t kPostedUp = 1;  // a posted write up to memory: successors go on once it has left
constexpr uint8_t kTakes = 2;     // it takes a pool unit or credits
constexpr uint8_t kGives = 4;     // it gives back a pool unit or credits
constexpr uint8_t kTagged = 8;    // the listener hears of it
}  // namespace

// What placing a step reads, derived once from the Step and the model's parameters: one cache
// line per step, no switch on the step's kind to find its server, costs or credits.
struct StepPlacement {
  Picoseconds service{0};    // on its server (a packet: IB serialization)
  Picoseconds latency{0};    // from done to arrive
  Picoseconds wait{0};       // after its predecessors' results: lead, switch hop, completer turnaround
  uint32_t server = kNoServer;    // TimingModel::servers_ (a join: join_server_; a packet: none)
  uint32_t credit_pool = kNoPool; // a TLP's flow-control credits (none: not a TLP, or unlimited)
  uint32_t data_credits = 0;
  uint32_t acquire_pool = kNoPool;
  uint32_t release_pool = kNoPool;
  uint32_t tag = 0;
  uint32_t succ_begin = 0;   // successors: succ[succ_begin .. succ_end)
  uint32_t succ_end = 0;
  uint32_t bytes = 0;        // added to its server's (a packet: its ports') bytes
  StepKind kind = StepKind::kJoin;
  uint8_t flags = 0;         // kPostedUp, kTakes, kGives, kTagged
  uint8_t host = 0;
  uint8_t dst = 0;           // a packet's destination host
};
static_assert(sizeof(StepPlacement) == 64, "one cache line per step");

// Where one step of a chain being placed stands.
struct StepState {
  Picoseconds ready{0};  // latest predecessor result so far (a staged packet: its ready time)
  uint16_t pending = 0;  // predecessors not yet placed
  bool has_pool = false;
  bool has_credits = false;
  uint8_t stage = 0;     // a staged packet: where it is (PacketStage)
  bool queued = false;   // a staged packet: in the output queue of its current port
};

// A chain's steps and their successors (CSR), checked once; shared by every placement of it.
struct ChainTemplate {
  struct Root {
    uint32_t step;
    Picoseconds lead;
  };
  size_t size = 0;  // steps
  std::vector<StepPlacement> place;
  std::vector<uint32_t> succ;        // successor steps, kSwitchEdge set when it is a switch egress
  std::vector<StepState> start;      // each step's state before placement (its predecessor count),
                                     // copied whole into each placement
  std::vector<Root> roots;           // steps with no predecessor, and their leads
};

// A chain being placed: its template and per-step placement state.
struct TimingModel::Chain {
  std::shared_ptr<const ChainTemplate> tpl;
  // The template's arrays, for run_step to reach without going through tpl (one load less).
  const StepPlacement* place = nullptr;
  const uint32_t* succ = nullptr;
  std::vector<StepState> state;
  size_t remaining = 0;
  ChainListener* listener = nullptr;
  std::vector<StepTimes>* times = nullptr;
  uint32_t tag_base = 0;
  bool record = false;  // times is set: every step reports
  std::vector<Picoseconds> tx_start;  // staged packets: when each step's transmit unit started
};

TimingModel::TimingModel(Scheduler& scheduler, const TimingParams& params, uint32_t hosts)
    : scheduler_(scheduler), params_(params), hosts_(hosts) {
  const TimingParams& p = params_;
  if (hosts == 0 || hosts > 256) throw std::invalid_argument("sim::TimingModel: 1..256 hosts");
  staged_ = hosts > 2;
  if (staged_ && p.switch_hops == 0) {
    throw std::invalid_argument("sim::TimingModel: more than two hosts need a switch (switch.hops >= 1)");
  }
  join_server_ = add_server();
  for (HostResources& h : hosts_) {
    for (uint32_t& s : h.pcie) s = add_server();
    for (uint32_t& s : h.hca) s = add_server();
    h.ib_port = add_server();
    h.switch_egress = add_server();
    auto& cp = h.credit_pools;
    const auto up = static_cast<size_t>(LinkDir::kUp);
    const auto down = static_cast<size_t>(LinkDir::kDown);
    const auto posted = static_cast<size_t>(TlpClass::kPosted);
    const auto nonposted = static_cast<size_t>(TlpClass::kNonPosted);
    const auto completion = static_cast<size_t>(TlpClass::kCompletion);
    // Device -> root complex: the root complex's receive buffers bound what the device may send.
    cp[up][posted] = add_pool(Pool::kUnlimited);
    pools_[cp[up][posted]].pool = Pool(p.rc_posted_hdr_credits, p.rc_posted_data_credits);
    cp[up][nonposted] = add_pool(Pool::kUnlimited);
    pools_[cp[up][nonposted]].pool = Pool(p.rc_nonposted_hdr_credits, Pool::kUnlimited);
    cp[up][completion] = add_pool(Pool::kUnlimited);
    // Root complex -> device: MMIO writes into the device's posted buffers; completions are
    // always accepted (an endpoint advertises infinite completion credits).
    cp[down][posted] = add_pool(Pool::kUnlimited);
    pools_[cp[down][posted]].pool = Pool(p.dev_posted_hdr_credits, p.dev_posted_data_credits);
    cp[down][nonposted] = add_pool(Pool::kUnlimited);
    cp[down][completion] = add_pool(Pool::kUnlimited);
    h.tags = add_pool(p.max_outstanding_reads);
    if (staged_) {
      h.switch_credits = add_pool(p.switch_input_credits);
      h.rx_credits = add_pool(p.hca_rx_credits);
      host_ports_.push_back(OutputPort{h.ib_port, {}});
      egress_ports_.push_back(OutputPort{h.switch_egress, {}});
    }
  }
  plan_packets();
}

// A packet's servers between any two hosts, and its head's delay to the last switch's egress (the
// first switch's cable and hop, then hops - 1 more of each), for place_packet().
void TimingModel::plan_packets() {
  const TimingParams& p = params_;
  for (const HostResources& src : hosts_) {
    for (const HostResources& dst : hosts_) {
      const auto tx = static_cast<size_t>(HcaUnit::kTx);
      const auto rx = static_cast<size_t>(HcaUnit::kRx);
      routes_.push_back(PacketRoute{src.hca[tx], src.ib_port, dst.switch_egress, dst.hca[rx]});
    }
  }
  if (p.switch_hops > 0) {
    const int64_t more = static_cast<int64_t>(p.switch_hops) - 1;
    switch_head_delay_ = p.cable + p.switch_hop + (p.switch_hop + p.cable) * more;
  }
}

TimingModel::~TimingModel() = default;

uint32_t TimingModel::add_pool(uint64_t units) {
  pools_.push_back(PoolQueue{Pool(units, Pool::kUnlimited), {}});
  return static_cast<uint32_t>(pools_.size() - 1);
}

uint32_t TimingModel::add_server() {
  servers_.emplace_back();
  return static_cast<uint32_t>(servers_.size() - 1);
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
  // The builder keeps its storage for the next chain; the template keeps what placing needs.
  const std::vector<Step>& steps = builder.steps();
  const size_t n = steps.size();
  c.size = n;
  if (n >= kLocalEdge) throw std::length_error("sim::TimingModel: a chain of 2^30 steps or more");
  c.start.assign(n, StepState{});
  c.place.resize(n);
  std::vector<uint32_t> succ_count(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const Step& s = steps[i];
    if (s.host >= hosts_.size()) throw std::out_of_range("sim::TimingModel: step on an unknown host");
    if (s.kind == StepKind::kCpu) {
      std::vector<uint32_t>& cpu = hosts_[s.host].cpu;
      while (cpu.size() <= s.index) cpu.push_back(add_server());
    }
    if (s.kind == StepKind::kPacket && s.index >= hosts_.size()) {
      throw std::out_of_range("sim::TimingModel: packet to an unknown host");
    }
    for (uint32_t p : s.preds) {
      if (p == kNoStep) continue;
      if (p >= i) throw std::invalid_argument("sim::TimingModel: a step waits for a later step");
      ++succ_count[p];
      ++c.start[i].pending;
    }
    if (c.start[i].pending == 0) c.roots.push_back(ChainTemplate::Root{static_cast<uint32_t>(i), s.lead});
  }
  uint32_t edges = 0;
  for (size_t i = 0; i < n; ++i) {
    StepPlacement& pl = c.place[i];
    const Step& s = steps[i];
    pl.succ_begin = pl.succ_end = edges;
    edges += succ_count[i];
    pl.kind = s.kind;
    pl.host = s.host;
    pl.dst = static_cast<uint8_t>(s.kind == StepKind::kPacket ? s.index : 0);
    pl.bytes = s.bytes;
    pl.server = s.kind == StepKind::kPacket ? kNoServer : s.kind == StepKind::kJoin ? join_server_ : server_of(s);
    pl.service = s.kind == StepKind::kPacket ? ib_serialization(s.bytes) : service_of(s);
    pl.latency = latency_of(s);
    pl.wait = s.lead;
    if (s.kind == StepKind::kSwitchEgress) pl.wait += params_.switch_hop;
    if (s.kind == StepKind::kTlp && s.tlp_class == TlpClass::kCompletion) pl.wait += params_.pcie_turnaround;
    if (s.kind == StepKind::kTlp && s.dir == LinkDir::kUp && s.tlp_class == TlpClass::kPosted) pl.flags |= kPostedUp;
    if (s.kind == StepKind::kTlp) {
      const uint32_t credits = credit_pool(s.host, s.dir, s.tlp_class);
      // An unlimited pool never refuses and ignores returns: no need to visit it.
      if (!pools_[credits].pool.unlimited()) pl.credit_pool = credits;
      pl.data_credits = static_cast<uint32_t>((s.payload_bytes + kDataCreditBytes - 1) / kDataCreditBytes);
    }
    pl.acquire_pool = s.acquire_pool;
    pl.release_pool = s.release_pool;
    pl.tag = s.tag;
    if (pl.acquire_pool != kNoPool || pl.credit_pool != kNoPool) pl.flags |= kTakes;
    if (pl.release_pool != kNoPool || pl.credit_pool != kNoPool) pl.flags |= kGives;
    if (pl.tag != 0) pl.flags |= kTagged;
  }
  c.succ.assign(edges, 0);
  for (size_t i = 0; i < n; ++i) {
    for (uint32_t p : steps[i].preds) {
      if (p == kNoStep) continue;
      const Step& pred = steps[p];
      const uint32_t flag = steps[i].kind == StepKind::kSwitchEgress                          ? kSwitchEdge
                            : pred.kind == StepKind::kPacket && steps[i].host == pred.host ? kLocalEdge
                                                                                            : 0;
      c.succ[c.place[p].succ_end++] = static_cast<uint32_t>(i) | flag;
    }
  }
  builder.clear();
  return tpl;
}

namespace {
[[noreturn]] void throw_in_the_past() { throw std::logic_error("sim::TimingModel: a step scheduled in the past"); }
}  // namespace

// Inline: called for almost every step placed, and a push into the queue is a few instructions.
inline void TimingModel::schedule_step(uint32_t chain, uint32_t step, Picoseconds at) {
  if (at < now_) throw_in_the_past();
  queue_.push(StepQueue::key(static_cast<uint64_t>(at.count()), chain, step));
}

void TimingModel::submit(ChainBuilder& builder, Picoseconds start, ChainListener* listener,
                         std::vector<StepTimes>* times) {
  if (builder.empty()) return;
  submit(compile(builder), start, listener, 0, times);
}

void TimingModel::submit(const std::shared_ptr<const ChainTemplate>& tpl, Picoseconds start,
                         ChainListener* listener, uint32_t tag_base, std::vector<StepTimes>* times) {
  const size_t n = tpl->size;
  if (n == 0) return;
  const uint32_t id = take_chain();
  Chain& c = *chains_[id];
  c.tpl = tpl;
  c.place = tpl->place.data();
  c.succ = tpl->succ.data();
  c.state.assign(tpl->start.begin(), tpl->start.end());
  c.remaining = n;
  c.listener = listener;
  c.times = times;
  c.tag_base = tag_base;
  c.record = times != nullptr;
  if (times != nullptr) times->assign(n, StepTimes{});
  if (staged_) c.tx_start.resize(n);
  ++active_;
  for (const ChainTemplate::Root& root : tpl->roots) {
    c.state[root.step].ready = start;
    schedule_step(id, root.step, start + root.lead);
  }
}

uint32_t TimingModel::server_of(const Step& s) {
  const HostResources& h = hosts_[s.host];
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
    case StepKind::kSwitchEgress: return ib_serialization(s.bytes);
    case StepKind::kPacket:
    case StepKind::kJoin: return Picoseconds(0);
  }
  return Picoseconds(0);
}

Picoseconds TimingModel::ib_serialization(uint32_t bytes) const { return sim::ib_serialization(params_, bytes); }

Picoseconds TimingModel::latency_of(const Step& s) const {
  switch (s.kind) {
    case StepKind::kTlp: return params_.pcie_one_way;
    case StepKind::kIbLink:
    case StepKind::kSwitchEgress: return params_.cable;
    default: return Picoseconds(0);
  }
}

void TimingModel::wake_head(PoolQueue& q) {
  RingQueue<Waiter>& wq = q.waiters;
  if (wq.empty() || wq.front().scheduled) return;
  Picoseconds at{0};
  if (q.pool.earliest(now_, wq.front().units, wq.front().data, at)) {
    wq.front().scheduled = true;
    schedule_step(wq.front().chain, wq.front().step, at);
  }
}

// The head of the line, run again at the time its units were due (wake_head()); the next in line
// is then woken in turn.
bool TimingModel::take_as_head(PoolQueue& q, uint64_t units, uint64_t data) {
  if (q.pool.try_take(now_, units, data)) {
    q.waiters.pop_front();
    wake_head(q);
    return true;
  }
  q.waiters.front().scheduled = false;
  wake_head(q);
  return false;
}

// Inlined into run_step() by force (GCC would keep a call: it has three ways out): a step that
// takes, takes here once and, when it waits, once more as the head of the line.
[[gnu::always_inline]] inline bool TimingModel::take(uint32_t pool, uint64_t units, uint64_t data, uint32_t chain,
                                                     uint32_t step) {
  PoolQueue& q = pools_[pool];
  RingQueue<Waiter>& wq = q.waiters;
  if (wq.empty()) {
    // Nobody waiting and enough units now: the usual case.
    if (q.pool.try_take(now_, units, data)) return true;
    // Not enough: first in line, run again when the returns known suffice.
    wq.push_back(Waiter{chain, step, units, data, false});
    wake_head(q);
    return false;
  }
  if (wq.front().chain != chain || wq.front().step != step) {
    // Flow control is in order: wait behind the requests already waiting.
    wq.push_back(Waiter{chain, step, units, data, false});
    return false;
  }
  return take_as_head(q, units, data);
}

inline bool TimingModel::acquire(const StepPlacement& s, uint32_t chain_id, uint32_t i) {
  StepState& st = chains_[chain_id]->state[i];
  if (s.acquire_pool != kNoPool && !st.has_pool) {
    if (!take(s.acquire_pool, 1, 0, chain_id, i)) return false;
    st.has_pool = true;
  }
  if (s.credit_pool != kNoPool && !st.has_credits) {
    if (!take(s.credit_pool, 1, s.data_credits, chain_id, i)) return false;
    st.has_credits = true;
  }
  return true;
}

inline void TimingModel::give_back(uint32_t pool, Picoseconds at, uint64_t units, uint64_t data) {
  PoolQueue& q = pools_[pool];
  if (q.pool.unlimited()) return;
  q.pool.give_back(at, units, data);
  if (!q.waiters.empty() && !q.waiters.front().scheduled) wake_head(q);
}

// Credits come back fc_update after the TLP arrived; a pool unit when the step's result arrives,
// or for a packet when its transmit unit is done with it (tx_done).
inline void TimingModel::release(const StepPlacement& s, const StepTimes& t, Picoseconds tx_done) {
  if (s.credit_pool != kNoPool) give_back(s.credit_pool, t.arrive + params_.fc_update, 1, s.data_credits);
  if (s.release_pool != kNoPool) give_back(s.release_pool, s.kind == StepKind::kPacket ? tx_done : t.arrive, 1, 0);
}

// Transmit unit, IB port, switch egress (cut-through, hops - 1 more switches as latency), cable,
// receive unit. Returns when the transmit unit was done (the WQE has left the HCA's pipeline).
inline Picoseconds TimingModel::place_packet(const StepPlacement& s, Picoseconds now, StepTimes& t) {
  const PacketRoute& r = routes_[s.host * hosts_.size() + s.dst];
  const Picoseconds tx_cost = params_.hca_unit[static_cast<size_t>(HcaUnit::kTx)];
  const Picoseconds rx_cost = params_.hca_unit[static_cast<size_t>(HcaUnit::kRx)];
  const Picoseconds ser = s.service;  // IB serialization
  t.start = servers_[r.tx].reserve(now, tx_cost);
  const Picoseconds tx_done = t.start + tx_cost;
  Server& port = servers_[r.port];
  const Picoseconds port_start = port.reserve(tx_done, ser);
  port.add_bytes(s.bytes);
  Picoseconds at_dst = port_start + ser + params_.cable;
  if (params_.switch_hops > 0) {
    Server& egress = servers_[r.egress];
    const Picoseconds egress_start = egress.reserve(port_start + switch_head_delay_, ser);
    egress.add_bytes(s.bytes);
    at_dst = egress_start + ser + params_.cable;
  }
  const Picoseconds rx_start = servers_[r.rx].reserve(at_dst, rx_cost);
  t.done = rx_start + rx_cost;
  return tx_done;
}

// By value: only this rare path makes the step's times a struct in memory.
void TimingModel::report(Chain& c, uint32_t step, const StepPlacement& s, StepTimes t) {
  if (c.times != nullptr) (*c.times)[step] = t;
  if (s.tag != 0 && c.listener != nullptr) {
    listener_called_ = true;
    c.listener->on_tagged_step(c.tag_base + s.tag, t);
  }
}

// result_time() for each successor: a switch egress takes the head (start + latency), a posted
// write up to memory is done when it has left, anything else when it arrives.
inline void TimingModel::schedule_successors(Chain& c, uint32_t chain_id, const StepPlacement& s, const StepTimes& t) {
  const Picoseconds result = (s.flags & kPostedUp) != 0 ? t.done : t.arrive;
  for (uint32_t e = s.succ_begin; e < s.succ_end; ++e) {
    const uint32_t edge = c.succ[e];
    const uint32_t j = edge & ~kEdgeFlags;
    StepState& sj = c.state[j];
    Picoseconds r = result;
    if ((edge & kEdgeFlags) != 0) {
      r = (edge & kSwitchEdge) != 0 ? t.start + s.latency
                                    : t.start + params_.hca_unit[static_cast<size_t>(HcaUnit::kTx)];
    }
    if (r > sj.ready) sj.ready = r;
    if (--sj.pending == 0) schedule_step(chain_id, j, not_before_now(sj.ready + c.place[j].wait));
  }
}

void TimingModel::hand_result(Chain& c, uint32_t chain_id, uint32_t e, Picoseconds r) {
  const uint32_t j = c.succ[e] & ~kEdgeFlags;
  StepState& sj = c.state[j];
  if (r > sj.ready) sj.ready = r;
  if (--sj.pending == 0) schedule_step(chain_id, j, not_before_now(sj.ready + c.place[j].wait));
}

inline bool TimingModel::through_port(OutputPort& port, uint32_t credits, uint32_t blocks, const StepPlacement& s,
                                      uint32_t chain, uint32_t step) {
  StepState& st = chains_[chain]->state[step];
  if (!st.queued) {
    port.queue.push_back(OutputPort::Queued{chain, step, now_});
    st.queued = true;
    if (port.queue.size() > 1) return false;  // the packet ahead wakes it when it starts
  }
  // The head of the line.
  Server& server = servers_[port.server];
  if (server.free_at() > now_) {
    schedule_step(chain, step, server.free_at());
    return false;
  }
  if (!take(credits, blocks, 0, chain, step)) return false;  // run again when they come back
  server.add_queued(now_ - port.queue.front().since);
  port.queue.pop_front();
  st.queued = false;
  const Picoseconds start = server.reserve(now_, s.service);
  server.add_bytes(s.bytes);
  if (!port.queue.empty()) {
    const OutputPort::Queued& next = port.queue.front();
    schedule_step(next.chain, next.step, start + s.service);
  }
  return true;
}

// Transmit unit (its QP slot back when done; successors on the sending host go on then), the
// host port (switch input credits), the switch egress (receiver buffer credits; the input
// buffer's credits back once it has sent the packet), the receiver's unit (its buffer's credits
// back once done). Egress and receiver follow at the times the 2-host placement uses: the egress
// may start a hop after the head reached the switch, the receiver when the tail has arrived.
void TimingModel::run_packet_stage(uint32_t chain_id, uint32_t i) {
  Chain& c = *chains_[chain_id];
  const StepPlacement& s = c.place[i];
  StepState& st = c.state[i];
  const PacketRoute& r = routes_[s.host * hosts_.size() + s.dst];
  const uint32_t blocks =
      static_cast<uint32_t>((uint64_t{s.bytes} + params_.ib_packet_overhead_bytes + kIbCreditBytes - 1) / kIbCreditBytes);
  switch (st.stage) {
    case kAtTx: {
      if ((s.flags & kTakes) != 0 && !acquire(s, chain_id, i)) return;
      const Picoseconds tx_cost = params_.hca_unit[static_cast<size_t>(HcaUnit::kTx)];
      st.ready = now_;
      c.tx_start[i] = servers_[r.tx].reserve(now_, tx_cost);
      const Picoseconds tx_done = c.tx_start[i] + tx_cost;
      if (s.release_pool != kNoPool) give_back(s.release_pool, tx_done, 1, 0);
      for (uint32_t e = s.succ_begin; e < s.succ_end; ++e) {
        if ((c.succ[e] & kLocalEdge) != 0) hand_result(c, chain_id, e, tx_done);
      }
      st.stage = kAtPort;
      schedule_step(chain_id, i, tx_done);
      return;
    }
    case kAtPort: {
      if (!through_port(host_ports_[s.host], hosts_[s.host].switch_credits, blocks, s, chain_id, i)) return;
      st.stage = kAtEgress;
      schedule_step(chain_id, i, now_ + switch_head_delay_);
      return;
    }
    case kAtEgress: {
      if (!through_port(egress_ports_[s.dst], hosts_[s.dst].rx_credits, blocks, s, chain_id, i)) return;
      give_back(hosts_[s.host].switch_credits, now_ + s.service + params_.credit_update, blocks, 0);
      st.stage = kAtReceiver;
      // At the head's arrival (a step cut through after it may start before the tail is in).
      schedule_step(chain_id, i, now_ + params_.cable);
      return;
    }
    default: break;
  }
  const Picoseconds rx_cost = params_.hca_unit[static_cast<size_t>(HcaUnit::kRx)];
  StepTimes t;
  t.ready = st.ready;
  t.start = c.tx_start[i];
  t.done = servers_[r.rx].reserve(now_ + s.service, rx_cost) + rx_cost;  // once the tail is in
  t.arrive = t.done + s.latency;
  give_back(hosts_[s.dst].rx_credits, t.done + params_.credit_update, blocks, 0);
  ++steps_placed_;
  if (((s.flags & kTagged) | static_cast<uint8_t>(c.record)) != 0) report(c, i, s, t);
  for (uint32_t e = s.succ_begin; e < s.succ_end; ++e) {
    if ((c.succ[e] & kLocalEdge) == 0) hand_result(c, chain_id, e, t.arrive);
  }
  if (--c.remaining == 0) chain_done(c, chain_id);
}

void TimingModel::chain_done(Chain& c, uint32_t chain_id) {
  --active_;
  c.tpl.reset();
  free_chains_.push_back(chain_id);
}

// Places one step at now_: its pool unit and credits, its server (or a packet's four), what it
// gives back, its report, its successors. Inlined into run_steps()'s loop by force (GCC would
// keep the call: it is large), so that a step costs no call and no saving of registers.
[[gnu::always_inline]] inline void TimingModel::run_step(uint32_t chain_id, uint32_t i) {
  Chain& c = *chains_[chain_id];
  const StepPlacement& s = c.place[i];
  if (s.kind == StepKind::kPacket && staged_) {
    run_packet_stage(chain_id, i);
    return;
  }
  // Most steps take neither a pool unit nor credits; the flags say so in one test.
  if ((s.flags & kTakes) != 0 && !acquire(s, chain_id, i)) return;

  const Picoseconds now = now_;
  StepTimes t;
  t.ready = now;
  Picoseconds tx_done{0};
  if (s.kind == StepKind::kPacket) {
    tx_done = place_packet(s, now, t);
  } else {
    // A join too: its server (join_server_) has no service, so it is done as soon as ready.
    Server& server = servers_[s.server];
    t.start = server.reserve(now, s.service);
    t.done = t.start + s.service;
    server.add_bytes(s.bytes);
  }
  t.arrive = t.done + s.latency;
  ++steps_placed_;

  if ((s.flags & kGives) != 0) release(s, t, tx_done);
  if (((s.flags & kTagged) | static_cast<uint8_t>(c.record)) != 0) report(c, i, s, t);  // rare: one test
  schedule_successors(c, chain_id, s, t);
  if (--c.remaining == 0) chain_done(c, chain_id);
}

size_t TimingModel::run_steps(uint64_t before, size_t most) {
  size_t ran = 0;
  StepQueue::Key k{};
  while (ran < most && queue_.pop_before(before, k)) {
    now_ = Picoseconds(static_cast<int64_t>(StepQueue::time_of(k)));
    run_step(StepQueue::chain_of(k), StepQueue::step_of(k));
    ++ran;
    // A listener may have scheduled a scheduler event before the next step.
    if (listener_called_) break;
  }
  return ran;
}

void TimingModel::run_next() { run_steps(std::numeric_limits<uint64_t>::max(), 1); }

Picoseconds TimingModel::next_time() const {
  return Picoseconds(static_cast<int64_t>(StepQueue::time_of(queue_.front())));
}

void TimingModel::run() {
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  for (;;) {
    // Only a listener, called from a step, can schedule a scheduler event: until one is called,
    // the scheduler's next event time stays what it was.
    const int64_t s = scheduler_.next_event_ps();
    listener_called_ = false;
    if (run_steps(static_cast<uint64_t>(s), std::numeric_limits<size_t>::max()) > 0) continue;
    if (s == kNone) return;
    scheduler_.run_one();
  }
}

std::vector<ResourceUse> TimingModel::resource_use() const {
  std::vector<ResourceUse> out;
  auto add = [this, &out](std::string_view name, uint32_t host, uint32_t server) {
    const Server& s = servers_[server];
    out.push_back(ResourceUse{name, host, s.busy(), s.queued(), s.operations(), s.bytes()});
  };
  for (uint32_t h = 0; h < hosts_.size(); ++h) {
    const HostResources& r = hosts_[h];
    for (uint32_t s : r.cpu) add("cpu", h, s);
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
