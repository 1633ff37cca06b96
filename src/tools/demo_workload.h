// The seed's experiment as a workload: small RDMA WRITEs on an RC QP from softhca_0 to softhca_1,
// one row per feature set (postlist, inline, unsignaled completions, BlueFlame), measured as the
// PCIe transactions both devices' counters saw. The rows are shared with the timing model (issue
// 4), which runs the same workload in virtual time. Sizes in bytes; no timing here.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "driver/provider.h"
#include "pcie/counters.h"

namespace softhca::tools {

// One feature set: how the application posts (DESIGN.md "Features").
struct FeatureRow {
  std::string_view name;
  uint32_t postlist = 1;       // WRs linked into one ibv_post_send
  bool inline_data = false;    // IBV_SEND_INLINE
  uint32_t signal_period = 1;  // one IBV_SEND_SIGNALED WR in this many (sq_sig_all = 0)
  driver::BlueFlameMode blueflame = driver::BlueFlameMode::kOff;  // set on the device per row
};

// The demo's rows in order: none, postlist, inline, unsignaled, BlueFlame, inline+BlueFlame, all.
std::span<const FeatureRow> demo_rows();
std::string_view to_string(driver::BlueFlameMode mode);

struct WorkloadParams {
  uint64_t messages = 1024;    // RDMA WRITEs per row
  uint32_t message_bytes = 8;  // the seed's message size
  uint32_t sq_depth = 128;     // send queue depth (max_send_wr); bounds WRs in flight
};

// What one row cost: counter deltas over the posting loop only (not the connection set-up).
struct RowMeasurement {
  FeatureRow row;
  uint64_t messages = 0;
  uint32_t message_bytes = 0;
  pcie::CounterSnapshot requester;  // softhca_0
  pcie::CounterSnapshot responder;  // softhca_1
};

struct RowOutcome {
  RowMeasurement measurement;
  std::string error;  // empty on success; otherwise what failed (a verbs call, a completion, data)
  [[nodiscard]] bool ok() const { return error.empty(); }
};

inline constexpr std::string_view kRequesterName = "softhca_0";
inline constexpr std::string_view kResponderName = "softhca_1";

// Runs one row in live mode through the verbs C API: sets the row's BlueFlame mode on both
// devices, opens a fresh context, PD, MRs, CQ and RC QP on each, connects the QPs, posts
// `messages` writes closed-loop (the last one always signaled), waits for every completion and
// checks that every written byte landed in the responder's buffer. Needs softhca_0 and softhca_1
// (SOFTHCA_NUM_DEVICES >= 2 before the runtime's first use).
RowOutcome run_live_row(const FeatureRow& row, const WorkloadParams& params);

}  // namespace softhca::tools
