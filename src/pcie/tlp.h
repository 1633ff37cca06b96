// PCIe transaction layer packets as the model counts them: memory write (MWr), memory read
// request (MRd) and completion with data (CplD), each with a direction and the cause that made it.
// Sizes in bytes. Link-layer ACK/UpdateFC DLLPs are accounted for by the timing model, not here.
#pragma once
#include <cstdint>
#include <string_view>

namespace softhca::pcie {

enum class TlpType : uint8_t { kMWr, kMRd, kCplD };
inline constexpr int kTlpTypeCount = 3;

// Downstream: root complex -> device (CPU MMIO writes and reads, completions of device reads).
// Upstream: device -> root complex (DMA writes, DMA read requests, interrupts, completions of CPU
// reads).
enum class Direction : uint8_t { kDownstream, kUpstream };
inline constexpr int kDirectionCount = 2;

enum class TlpCause : uint8_t {
  kDoorbell,      // 8-byte send doorbell (CPU)
  kBlueFlame,     // WQE written through the BAR (CPU)
  kCqArm,         // CQ arm doorbell (CPU)
  kWqeRead,       // device fetches send WQEs
  kPayloadRead,   // device gathers payload from registered memory
  kRecvWqeRead,   // device fetches a receive WQE (RQ or SRQ)
  kDbRecRead,     // device reads a doorbell record
  kPayloadWrite,  // device scatters payload into registered memory
  kAtomic,        // responder atomic: read and write-back of 8 bytes
  kCqeWrite,      // 64-byte CQE
  kEqeWrite,      // event queue entry
  kInterrupt,     // MSI-X message
  kEqDoorbell,    // EQ consumer index doorbell (CPU); appended: causes are never renumbered
  kDmWrite,       // CPU stores into device memory through the BAR (ibv_memcpy_to_dm)
  kDmRead,        // CPU loads from device memory through the BAR (ibv_memcpy_from_dm): MRd down, CplD up
};
inline constexpr int kTlpCauseCount = 15;

// Causes whose TLPs the CPU issues (MMIO into the BAR): their MWr and MRd travel downstream, the
// completions of their reads upstream; the device's own DMA goes the other way.
[[nodiscard]] constexpr bool is_cpu_cause(TlpCause c) {
  return c == TlpCause::kDoorbell || c == TlpCause::kBlueFlame || c == TlpCause::kCqArm ||
         c == TlpCause::kEqDoorbell || c == TlpCause::kDmWrite || c == TlpCause::kDmRead;
}

std::string_view to_string(TlpType t);
std::string_view to_string(Direction d);
std::string_view to_string(TlpCause c);

struct Tlp {
  TlpType type = TlpType::kMWr;
  Direction dir = Direction::kDownstream;
  TlpCause cause = TlpCause::kDoorbell;
  uint64_t address = 0;
  uint32_t payload_bytes = 0;  // data carried (0 for MRd; the read length is in read_bytes)
  uint32_t read_bytes = 0;     // MRd only: bytes requested
  uint32_t wire_bytes = 0;     // payload + header + framing
};

// TLPs of one type and cause summed over one transfer: all a sink that only counts needs.
struct TlpRun {
  TlpType type = TlpType::kMWr;
  TlpCause cause = TlpCause::kDoorbell;
  uint64_t tlps = 0;
  uint64_t payload_bytes = 0;
  uint64_t wire_bytes = 0;
};

// Receives every TLP the ports emit: counters, traces, the timing model.
class TlpSink {
 public:
  virtual ~TlpSink() = default;
  virtual void on_tlp(const Tlp& tlp) = 0;
  // A sink that only counts (no addresses, no order) says so, and a device port then reports each
  // transfer as one run per TLP type instead of TLP by TLP (a 4 KiB read at a 64-byte RCB is 72
  // TLPs). Only called when counts_only() is true.
  [[nodiscard]] virtual bool counts_only() const { return false; }
  virtual void on_tlp_run(const TlpRun& run) { (void)run; }
};

}  // namespace softhca::pcie
