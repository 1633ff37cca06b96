// The timing model: places causal chains (chain.h) on the resources of a set of hosts in virtual
// time, with costs from TimingParams. Per host: CPU threads, the PCIe link's two directions with
// their flow-control credit pools, DMA read tags, the HCA's units, the IB port; one switch with an
// egress port per host between them.
//
// Rules (docs/timing-model.md):
//  - a step is ready when all its predecessors' results have arrived, plus its own lead (negative
//    for cut-through: never before the event that made it ready); a
//    completion TLP also waits the completer's turnaround (rtt - 2 one_way);
//  - it then takes its pool unit (tags, QP slots) and, for a TLP, its flow-control credits, waiting
//    in order if they are not there; then its server, first come first served;
//  - its result arrives after the server's service plus the resource's latency: a TLP one_way, a
//    packet one cable; a switch egress starts cut-through, a hop after its ingress started; what
//    follows a posted write up to memory waits only for it to leave the device, what follows a
//    packet on its own sending host only for its transmit unit (result_time());
//  - credits come back fc_update after the TLP arrived; tags when the read's last completion
//    arrives; a pool unit when the step that releases it has arrived.
// Each step is one event at its ready time, so resources are claimed in time order. The model keeps
// these events in its own queue (step_queue.h: 16-byte keys, no callbacks; a compiled chain carries
// each step's server, costs and credit pool, resolved once): run() interleaves them with
// the scheduler's events (the workload's CPU), in time order, the scheduler's first at equal
// times, the model's by (chain, step) among themselves. A
// packet step (StepKind::kPacket) between two hosts claims its four resources in that one event,
// each as soon as the previous is done: exact while each is fed by a single one before it. With
// more hosts a packet goes stage by stage, one event each: transmit unit; its port's output queue,
// which sends the head once the switch input buffer has credits for it (IB link-level flow
// control, 64-byte blocks); the switch egress's output queue, in arrival order, cut-through, with
// the receiving HCA's buffer credits; the receive unit. Credits come back credit_update after the
// buffer is drained (the egress sent the packet, the receive unit took it). Its pool unit (a QP's
// WQE slot) comes back when the sender's transmit unit is done with it.
// Deterministic: integer time, ties broken by scheduling order.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "base/units.h"
#include "sim/chain.h"
#include "sim/resource.h"
#include "sim/ring_queue.h"
#include "sim/scheduler.h"
#include "sim/step_queue.h"
#include "sim/timing_params.h"

namespace softhca::sim {

// A chain checked and indexed for placement (compile()); placed any number of times.
struct ChainTemplate;
// What placing one step of a compiled chain reads (timing_model.cc).
struct StepPlacement;

// When each step of a chain was ready, started, finished and had its result arrive.
struct StepTimes {
  Picoseconds ready{0};
  Picoseconds start{0};
  Picoseconds done{0};
  Picoseconds arrive{0};
};

// When the result of step `pred` (placed at `t`) is there for its successor `succ`: normally when
// it arrives; for a switch forwarding cut-through, a hop's latency after the packet's head
// arrived (start + cable); for a posted write up to memory, as soon as it has left the device
// (done): the HCA needs no answer to go on, and PCIe keeps posted writes in order; for a step on
// a packet's sending host (a UC or UD send completion), when the transmit unit is done with it.
Picoseconds result_time(const Step& pred, const StepTimes& t, const Step& succ, const TimingParams& params);

class ChainListener {
 public:
  virtual ~ChainListener() = default;
  // A step with a non-zero tag has been placed (its times are final). Called at its ready time.
  virtual void on_tagged_step(uint32_t tag, const StepTimes& times) = 0;
};

// Utilization of one resource over a run.
struct ResourceUse {
  std::string_view name;
  uint32_t host = 0;
  Picoseconds busy{0};
  Picoseconds queued{0};  // summed over its operations: from ready (or joining its queue) to start
  uint64_t operations = 0;
  uint64_t bytes = 0;
};

class TimingModel {
 public:
  // 1..256 hosts; more than two need a switch (params.switch_hops >= 1).
  TimingModel(Scheduler& scheduler, const TimingParams& params, uint32_t hosts);
  ~TimingModel();
  TimingModel(const TimingModel&) = delete;
  TimingModel& operator=(const TimingModel&) = delete;

  // A new pool of `units` (for example one QP's WQE slots); returns its id for Step::acquire_pool.
  uint32_t add_pool(uint64_t units);
  // The DMA read tags of a host's HCA (taken by read requests, given back by their last completion).
  [[nodiscard]] uint32_t tag_pool(uint32_t host) const;

  // Places a chain whose first steps become ready at `start`. `times`, if given, receives every
  // step's times (sized to the chain) as they are placed and must outlive the chain's placement.
  // The builder is consumed (left empty, its storage reused).
  void submit(ChainBuilder& chain, Picoseconds start, ChainListener* listener,
              std::vector<StepTimes>* times = nullptr);
  // Checks and indexes a chain once (the builder is consumed), to place it many times.
  std::shared_ptr<const ChainTemplate> compile(ChainBuilder& chain);
  // Places a compiled chain; the listener hears tag_base + each tagged step's tag.
  void submit(const std::shared_ptr<const ChainTemplate>& chain, Picoseconds start, ChainListener* listener,
              uint32_t tag_base, std::vector<StepTimes>* times = nullptr);

  // Runs the model's steps and the scheduler's events in time order until both are empty.
  void run();
  // The model's own next step, if any; run_next() places it (the caller keeps time order).
  [[nodiscard]] bool has_pending() const { return !queue_.empty(); }
  [[nodiscard]] Picoseconds next_time() const;
  void run_next();
  [[nodiscard]] Picoseconds now() const { return now_; }

  // Chains not yet completely placed.
  [[nodiscard]] size_t chains_in_flight() const { return active_; }
  [[nodiscard]] uint64_t steps_placed() const { return steps_placed_; }
  [[nodiscard]] const TimingParams& params() const { return params_; }
  Scheduler& scheduler() { return scheduler_; }

  // Busy time, operations and bytes of every server (CPU threads, links, units, ports).
  [[nodiscard]] std::vector<ResourceUse> resource_use() const;

 private:
  struct Chain;
  struct HostResources;
  struct PacketRoute;
  struct OutputPort;
  struct Waiter {
    uint32_t chain;
    uint32_t step;
    uint64_t units;
    uint64_t data;
    bool scheduled;  // a retry is already scheduled
  };
  // A pool and the requests waiting for it in order, side by side: one index reaches both.
  struct PoolQueue {
    Pool pool;
    RingQueue<Waiter> waiters;
  };
  // Runs up to `most` of the model's steps due before `before` (ps), in order, stopping after one
  // that called a listener (it may have scheduled a scheduler event); returns how many ran.
  size_t run_steps(uint64_t before, size_t most);
  void run_step(uint32_t chain, uint32_t step);
  // Takes the step's pool unit and credits (each once: a retried step keeps what it took); false
  // if it must wait for one of them.
  bool acquire(const StepPlacement& s, uint32_t chain, uint32_t step);
  // Takes `units`/`data` of pool `pool` for (chain, step) at now; false if it must wait (it is then
  // queued, and run again when the pool can serve it).
  bool take(uint32_t pool, uint64_t units, uint64_t data, uint32_t chain, uint32_t step);
  bool take_as_head(PoolQueue& q, uint64_t units, uint64_t data);
  // Gives back the step's credits and pool unit, each at its time.
  void release(const StepPlacement& s, const StepTimes& t, Picoseconds tx_done);
  void give_back(uint32_t pool, Picoseconds at, uint64_t units, uint64_t data);
  // Schedules the head of q's line, if not yet, for when the returns known so far let it take.
  void wake_head(PoolQueue& q);
  uint32_t credit_pool(uint32_t host, LinkDir dir, TlpClass cls) const;
  uint32_t add_server();
  void plan_packets();
  uint32_t server_of(const Step& s);
  Picoseconds service_of(const Step& s) const;
  Picoseconds latency_of(const Step& s) const;
  Picoseconds ib_serialization(uint32_t bytes) const;
  Picoseconds place_packet(const StepPlacement& s, Picoseconds now, StepTimes& t);
  // More than two hosts: the packet step (chain, step) at its current stage (transmit unit, port,
  // switch egress, receiver); it schedules itself for the next, or finishes.
  void run_packet_stage(uint32_t chain, uint32_t step);
  // The packet at `port`'s output queue (joining it on its first visit): true when it started now
  // (the port free, the credits of the buffer it sends into taken); else it runs again when it can.
  bool through_port(OutputPort& port, uint32_t credits, uint32_t blocks, const StepPlacement& s, uint32_t chain,
                    uint32_t step);
  // Hands a packet's result `r` to its successor (edge e of the template's list).
  void hand_result(Chain& c, uint32_t chain_id, uint32_t e, Picoseconds r);
  // Records the step's times, tells the listener of a tagged one.
  void report(Chain& c, uint32_t step, const StepPlacement& s, StepTimes t);
  // Hands the step's result to its successors; schedules those it was the last one missing.
  void schedule_successors(Chain& c, uint32_t chain_id, const StepPlacement& s, const StepTimes& t);
  void schedule_step(uint32_t chain, uint32_t step, Picoseconds at);
  // A successor's time with a negative lead (cut-through) is never before the event that made it
  // ready: the model places in time order.
  [[nodiscard]] Picoseconds not_before_now(Picoseconds at) const { return at < now_ ? now_ : at; }
  void chain_done(Chain& c, uint32_t chain_id);
  uint32_t take_chain();

  Scheduler& scheduler_;
  TimingParams params_;
  StepQueue queue_;  // ready steps by (time, chain, step)
  bool listener_called_ = false;  // a listener ran (it may have scheduled scheduler events)
  Picoseconds now_{0};
  std::vector<Server> servers_;  // every server of every host (HostResources names them by index)
  std::vector<HostResources> hosts_;
  uint32_t join_server_ = 0;  // where joins are placed: no service, so done as soon as ready
  std::vector<PacketRoute> routes_;   // [source * hosts + destination]
  bool staged_ = false;               // more than two hosts: packets go stage by stage
  std::vector<OutputPort> host_ports_;    // per host: its IB port's output queue (staged)
  std::vector<OutputPort> egress_ports_;  // per host: the switch egress towards it (staged)
  Picoseconds switch_head_delay_{0};  // from a packet's head leaving its port to its last egress
  std::vector<PoolQueue> pools_;
  std::vector<std::unique_ptr<Chain>> chains_;
  std::vector<uint32_t> free_chains_;
  size_t active_ = 0;
  uint64_t steps_placed_ = 0;
};

}  // namespace softhca::sim
