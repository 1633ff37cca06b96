// A causal chain: what one post made happen (TLPs, packets, HCA and CPU work), as a small DAG of
// steps, each naming the resource it occupies and the steps it waits for. The timing model
// (timing_model.h) places a chain on its resources; whoever records the chain (the tools' glue
// from the runtime taps) says what each step is and what caused it. Sizes in bytes, time in ps.
// Pure data: no resource state here.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/units.h"

namespace softhca::sim {

// What a step occupies.
enum class StepKind : uint8_t {
  kCpu,          // a CPU thread of `host`, for `cost` (thread = `index`)
  kTlp,          // one TLP on `host`'s PCIe link in direction `dir`, `bytes` on the wire
  kHcaUnit,      // HCA unit `unit` of `host`, for its per-operation cost
  kIbLink,       // one packet leaving `host`'s IB port, `bytes` from LRH to VCRC
  kSwitchEgress, // one packet leaving the switch towards host `host` (one per hop)
  kPacket,       // one packet from `host` to host `index`, `bytes` from LRH to VCRC, through the
                 // sender's transmit unit, its IB port, the switch's egress port (if any) and the
                 // receiver's receive unit: four resources, placed at once (see timing_model.h)
  kJoin,         // nothing: done as soon as ready (a point in the chain others wait for)
};

enum class LinkDir : uint8_t { kDown, kUp };  // down: root complex -> device; up: device -> memory
enum class TlpClass : uint8_t { kPosted, kNonPosted, kCompletion };  // PCIe flow-control classes
enum class HcaUnit : uint8_t { kDoorbell, kWqe, kTx, kRx, kCompletion };
inline constexpr int kHcaUnitCount = 5;

// The seed's steps 0-5 (DESIGN.md), for the latency breakdown of one message: which part of the
// message's life a step's time is charged to.
enum class Phase : uint8_t {
  kCpuBuild,      // step 0: the driver builds the WQE
  kDoorbell,      // step 1/1': the doorbell or BlueFlame write reaches the HCA
  kWqeFetch,      // step 2: the HCA reads the WQE
  kPayloadFetch,  // step 3: the HCA reads the payload
  kWire,          // step 4: the request crosses the fabric
  kRemoteWrite,   // step 4: the responder HCA writes the payload into memory
  kAck,           // step 4: the ACK (or response) comes back
  kCqeWrite,      // step 5: the requester HCA writes the CQE
  kPoll,          // step 5: the CPU polls it
};
inline constexpr int kPhaseCount = 9;
std::string_view to_string(Phase p);
std::string_view to_string(HcaUnit u);

inline constexpr uint32_t kNoPool = 0xffffffff;
inline constexpr uint32_t kNoStep = 0xffffffff;

struct Step {
  StepKind kind = StepKind::kJoin;
  Phase phase = Phase::kCpuBuild;
  uint8_t host = 0;
  LinkDir dir = LinkDir::kDown;      // kTlp
  TlpClass tlp_class = TlpClass::kPosted;  // kTlp
  HcaUnit unit = HcaUnit::kDoorbell;  // kHcaUnit
  uint16_t index = 0;                 // kCpu: the thread; kPacket: the destination host
  uint32_t bytes = 0;                 // kTlp, kIbLink, kSwitchEgress: wire bytes
  uint32_t payload_bytes = 0;         // kTlp: data bytes (flow-control data credits)
  Picoseconds cost{0};                // kCpu: service time
  Picoseconds lead{0};                // extra wait between the predecessors' arrival and readiness;
                                      // negative: it may start that much before (cut-through)
  uint32_t acquire_pool = kNoPool;    // a pool unit taken before the step starts (tags, QP slots)
  uint32_t release_pool = kNoPool;    // a pool unit given back when the step's result arrives
  uint32_t tag = 0;                   // non-zero: the listener hears when this step completes
  std::array<uint32_t, 3> preds{kNoStep, kNoStep, kNoStep};
};

// Builds one chain. Steps are added in causal order: a step's predecessors must already exist.
class ChainBuilder {
 public:
  // Adds a step waiting for up to three earlier steps (kNoStep for none); returns its index.
  uint32_t add(const Step& s) {
    steps_.push_back(s);
    return static_cast<uint32_t>(steps_.size() - 1);
  }
  uint32_t add(Step s, uint32_t p0, uint32_t p1 = kNoStep, uint32_t p2 = kNoStep) {
    s.preds = {p0, p1, p2};
    return add(s);
  }
  Step& at(uint32_t i) { return steps_[i]; }
  [[nodiscard]] const Step& at(uint32_t i) const { return steps_[i]; }
  [[nodiscard]] size_t size() const { return steps_.size(); }
  [[nodiscard]] bool empty() const { return steps_.empty(); }
  void clear() { steps_.clear(); }
  std::vector<Step>& steps() { return steps_; }
  [[nodiscard]] const std::vector<Step>& steps() const { return steps_; }

 private:
  std::vector<Step> steps_;
};

}  // namespace softhca::sim
