// Records the causal chain of one post from the runtime's taps (runtime.h): every TLP of every
// device and every packet sent and received, in the order they happened, becomes a step of a
// sim::ChainBuilder with the steps it waited for. The rules are the engine's own order of work
// (DESIGN.md steps 0-5, docs/timing-model.md "From taps to a chain"):
//   doorbell/BlueFlame MWr <- the CPU's post; HCA doorbell unit <- the last MMIO TLP;
//   WQE read MRd <- doorbell unit; CplD <- its MRd; WQE k parsed <- the CplD holding its last byte;
//   payload MRd <- its WQE; request packet <- its payload's last CplD (or its WQE);
//   packet received <- the same packet sent (per destination, in order); a responder's DMA and
//   replies <- the packet that caused them; a CQE <- the completion unit <- the ACK or response
//   (UC and UD, which have none: <- the request's last packet, once transmitted); with receive
//   WQE prefetch, a receive WQE read <- the post, and the payload <- it and the packet; with
//   cut-through, negative leads (a packet before its last payload completion, a payload write
//   before its packet's tail); the k-th completion of a read k root-complex gaps late.
// Device i is host i unless the post says otherwise (PostInfo::hosts). Lives in tools because it
// needs pcie, fabric and runtime types; the steps it makes are sim's plain types.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "pcie/tlp.h"
#include "runtime/runtime.h"
#include "sim/chain.h"
#include "sim/timing_params.h"
#include "base/units.h"

namespace softhca::tools {

// What the generator tells the recorder about the post it is about to make.
struct PostInfo {
  uint32_t requester = 0;     // device (= host) that posts
  uint16_t thread = 0;        // CPU thread of that host
  Picoseconds cpu_cost{0};   // the post's CPU time (step 0); may be set after end() on the chain's step 0
  uint32_t wqes = 1;          // WQEs in the post (all the same size)
  uint32_t qp_slots = sim::kNoPool;  // the QP's pool of WQEs in flight
  uint32_t first_cqe_tag = 0;  // the k-th requester CQE of the post gets tag first_cqe_tag + k (0: none)
  // Non-zero: this tag goes to the step after which the peer's CPU can see the message: its
  // receive CQE (SEND), else the last payload write into its memory (WRITE: perftest's
  // ib_write_lat polls the last byte of its buffer).
  uint32_t arrival_tag = 0;
  // The host each of the runtime's devices stands for in this post (default: device i is host
  // i): the many-host workloads run every exchange on devices 0 and 1 and place it between the
  // two hosts it belongs to (docs/decisions.md D21). Tag pools are per host.
  std::array<uint32_t, 2> hosts{0, 1};
};

class ChainRecorder final : public runtime::TlpTap, public runtime::PacketTap {
 public:
  // `tag_pools[h]`: the DMA read tag pool of host h (sim::TimingModel::tag_pool). `devices`: how
  // many devices make events (0: one per host).
  explicit ChainRecorder(std::vector<uint32_t> tag_pools, uint32_t devices = 0);

  // Starts recording a post into `out` (cleared first). Events outside begin()/end() are ignored.
  void begin(sim::ChainBuilder& out, const PostInfo& info);
  // Finishes the chain. Returns the number of requester CQEs it carries (tagged steps).
  uint32_t end();
  [[nodiscard]] bool recording() const { return out_ != nullptr; }
  // Receive WQE prefetch (the profile's hca.rq_prefetch): a receive WQE read the HCA did not need
  // a doorbell record for waits for the post that started the chain, not for the SEND's packet,
  // and the payload it places waits for both.
  void set_rq_prefetch(bool on) { rq_prefetch_ = on; }
  // Cut-through between the HCA's units (the profile's hca.cut_through; `params` outlives the
  // recorder, nullptr: off): a request packet waits for its payload's first completion and for
  // its last one less the packet's serialization (a join with that negative lead); a responder's
  // payload write waits for the packet less the serialization of the bytes after its piece.
  void set_cut_through(const sim::TimingParams* params) { cut_through_ = params; }
  // The root complex's spacing of one read's completions (the profile's pcie.rc_completion_gap_ns):
  // the k-th completion of a transfer waits k gaps more.
  void set_completion_gap(Picoseconds gap) { completion_gap_ = gap; }
  // After end(): whether PostInfo::arrival_tag found its step.
  [[nodiscard]] bool arrival_tagged() const { return arrival_tagged_; }

  void on_tlp(uint64_t seq, uint32_t device, const pcie::Tlp& tlp) override;
  void on_packet(uint64_t seq, uint32_t device, runtime::PacketDirection dir, std::span<const uint8_t> packet) override;

  // Events seen while recording, over the recorder's life (for the events-per-message figure).
  [[nodiscard]] uint64_t events() const { return events_; }
  // MMIO writes of the post being recorded: 8-byte doorbells and 64-byte BlueFlame lines (the
  // CPU's cost of step 1 depends on which).
  [[nodiscard]] uint32_t doorbells() const { return doorbells_; }
  [[nodiscard]] uint32_t blueflame_lines() const { return blueflame_lines_; }

 private:
  // The send pipeline of the requester: doorbell, WQE fetch, per-WQE execution, request packets.
  struct SendContext {
    uint32_t mmio_last = sim::kNoStep;  // last doorbell/BlueFlame TLP not yet handed to the HCA
    uint32_t trigger = sim::kNoStep;    // the HCA's doorbell unit step
    std::vector<std::pair<uint64_t, uint32_t>> wqe_cplds;  // (cumulative WQE bytes, CplD step)
    uint64_t wqe_bytes = 0;
    uint32_t wqe_index = 0;             // WQEs started so far
    uint32_t wqe_step = sim::kNoStep;   // the current WQE's parse step; kNoStep between WQEs
    uint32_t payload_last = sim::kNoStep;  // last payload CplD since the previous packet
    uint32_t payload_first = sim::kNoStep;  // first payload CplD since the previous packet
    uint32_t packet_last = sim::kNoStep;   // the last request packet sent
  };
  // A device's receive side: what the packet it is handling made it do.
  struct RxContext {
    bool active = false;
    bool response = false;               // the packet was an ACK or response (requester side)
    uint32_t cursor = sim::kNoStep;      // what the next DMA waits for
    uint32_t tail = sim::kNoStep;        // the latest step issued
    bool dbrec_read = false;             // the packet made the device read a doorbell record
    uint32_t prefetched = sim::kNoStep;  // a prefetched receive WQE's last completion
  };
  // A DMA read in progress on one device (consecutive MRds of one transfer, each with CplDs).
  struct ReadState {
    bool open = false;
    pcie::TlpCause cause = pcie::TlpCause::kWqeRead;
    uint64_t next_addr = 0;
    uint32_t pred = sim::kNoStep;       // what the MRds of this transfer wait for
    uint32_t mrd = sim::kNoStep;        // the MRd the next CplD answers
    uint32_t last_cpld = sim::kNoStep;  // last CplD of `mrd`
    uint32_t cplds = 0;                 // completions of this transfer so far
    sim::Phase phase = sim::Phase::kWqeFetch;
  };
  struct Device {
    SendContext send;
    RxContext rx;
    ReadState read;
    uint32_t rx_packet = sim::kNoStep;  // the request packet the device is handling (cut-through)
    std::vector<std::pair<uint32_t, uint32_t>> rx_writes;  // its payload writes: (step, bytes)
  };
  struct InFlight {
    uint32_t arrival;  // the step after which the packet is at the destination port
    sim::Phase phase;
  };

  Device& device(uint32_t d);
  // The host device d stands for in the post being recorded (PostInfo::hosts).
  [[nodiscard]] uint8_t host_of(uint32_t d) const {
    return static_cast<uint8_t>(d < info_.hosts.size() ? info_.hosts[d] : d);
  }
  void start_wqe(Device& dev);
  uint32_t hand_doorbell_to_hca(Device& dev);
  void close_mrd(Device& dev);
  void close_read(Device& dev);
  // Cut-through: sets the leads of the payload writes of the packet the device was handling.
  void close_rx_writes(Device& dev);
  void on_read_tlp(uint32_t d, Device& dev, const pcie::Tlp& tlp, uint32_t pred, sim::Phase phase);
  uint32_t add_tlp(uint32_t d, const pcie::Tlp& tlp, sim::Phase phase, uint32_t p0, uint32_t p1 = sim::kNoStep);
  uint32_t transmit(uint32_t d, uint32_t bytes, uint32_t dlid_device, sim::Phase phase, uint32_t p0, uint32_t p1);

  std::vector<uint32_t> tag_pools_;
  sim::ChainBuilder* out_ = nullptr;
  PostInfo info_;
  uint32_t root_ = sim::kNoStep;
  uint32_t cqes_ = 0;
  uint32_t peer_cqe_ = sim::kNoStep;         // the first receive CQE on another device than the requester
  uint32_t peer_write_last_ = sim::kNoStep;  // the last payload write on another device
  bool arrival_tagged_ = false;
  std::vector<Device> devices_;
  std::vector<std::deque<InFlight>> in_flight_;  // per destination device
  uint64_t events_ = 0;
  uint32_t doorbells_ = 0;
  uint32_t blueflame_lines_ = 0;
  bool rq_prefetch_ = false;
  const sim::TimingParams* cut_through_ = nullptr;
  Picoseconds completion_gap_{0};
};

}  // namespace softhca::tools
