#include "tools/demo_workload.h"

#include <infiniband/verbs.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "runtime/runtime.h"

namespace softhca::tools {

namespace {

using driver::BlueFlameMode;

// The postlist length and signal period of issue 2's acceptance cases ("postlist of 32 = 1
// doorbell for 32 WQEs; signaling 1 in 16 = 1 CQE per 16"), illustrating seed rule S3.
constexpr uint32_t kPostlist = 32;
constexpr uint32_t kSignalPeriod = 16;

constexpr std::array<FeatureRow, 7> kDemoRows{{
    {"none", 1, false, 1, BlueFlameMode::kOff},
    {"postlist", kPostlist, false, 1, BlueFlameMode::kOff},
    {"inline", 1, true, 1, BlueFlameMode::kOff},
    {"unsignaled", 1, false, kSignalPeriod, BlueFlameMode::kOff},
    {"BlueFlame", 1, false, 1, BlueFlameMode::kPrefer},
    {"inline+BlueFlame", 1, true, 1, BlueFlameMode::kAuto},
    {"all", kPostlist, true, kSignalPeriod, BlueFlameMode::kPrefer},
}};

// How long to wait for a completion before calling the run failed (wall clock: tools layer).
constexpr auto kCompletionTimeout = std::chrono::seconds(10);

[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err) + " (errno " + std::to_string(err) + ")");
}

runtime::DeviceSlot& slot_named(std::string_view name) {
  for (runtime::DeviceSlot* slot : runtime::Runtime::process().devices()) {
    if (slot->name() == name) return *slot;
  }
  throw std::runtime_error("device " + std::string(name) +
                           " not found: the demo needs two devices (SOFTHCA_NUM_DEVICES >= 2)");
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// One side of the connection: context, PD, registered buffer, CQ and RC QP. Destroyed in reverse.
class Endpoint {
 public:
  explicit Endpoint(std::string_view name) : name_(name) {}

  // Opens the device and creates the objects. Separate from the constructor so that the
  // destructor releases whatever was created when a step fails.
  void create(size_t buffer_bytes, unsigned int access, const WorkloadParams& p, bool inline_data) {
    open();
    pd_ = ibv_alloc_pd(ctx_);
    if (pd_ == nullptr) fail(name_ + ": ibv_alloc_pd", errno);
    const size_t rounded = (buffer_bytes + 4095) / 4096 * 4096;
    buf_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, rounded)));
    if (!buf_) fail(name_ + ": buffer allocation", ENOMEM);
    std::memset(buf_.get(), 0, rounded);
    mr_ = ibv_reg_mr(pd_, buf_.get(), buffer_bytes, static_cast<int>(access));
    if (mr_ == nullptr) fail(name_ + ": ibv_reg_mr", errno);
    cq_ = ibv_create_cq(ctx_, static_cast<int>(p.sq_depth), nullptr, nullptr, 0);
    if (cq_ == nullptr) fail(name_ + ": ibv_create_cq", errno);
    ibv_qp_init_attr init{};
    init.send_cq = cq_;
    init.recv_cq = cq_;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 0;
    init.cap.max_send_wr = p.sq_depth;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = inline_data ? p.message_bytes : 0;
    qp_ = ibv_create_qp(pd_, &init);
    if (qp_ == nullptr) fail(name_ + ": ibv_create_qp", errno);
    ibv_port_attr port{};
    if (int rc = ibv_query_port(ctx_, 1, &port); rc != 0) fail(name_ + ": ibv_query_port", rc);
    lid_ = port.lid;
    mtu_ = port.active_mtu;
  }

  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  ~Endpoint() {
    // Teardown errors are not the row's result; the counters were already read.
    if (qp_ != nullptr) ibv_destroy_qp(qp_);
    if (cq_ != nullptr) ibv_destroy_cq(cq_);
    if (mr_ != nullptr) ibv_dereg_mr(mr_);
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (ctx_ != nullptr) ibv_close_device(ctx_);
  }

  // RESET -> INIT -> RTR -> RTS towards the peer (IBA 11.2.5.3 required attributes for RC).
  void connect_to(const Endpoint& peer) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT");

    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu_ < peer.mtu_ ? mtu_ : peer.mtu_;
    a.dest_qp_num = peer.qp_->qp_num;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = peer.lid_;
    a.ah_attr.port_num = 1;
    modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, "RTR");

    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    modify(a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                  IBV_QP_MAX_QP_RD_ATOMIC, "RTS");
  }

  [[nodiscard]] uint8_t* buffer() const { return buf_.get(); }
  [[nodiscard]] ibv_mr* mr() const { return mr_; }
  [[nodiscard]] ibv_cq* cq() const { return cq_; }
  [[nodiscard]] ibv_qp* qp() const { return qp_; }
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  void open() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) fail("ibv_get_device_list", errno);
    for (int i = 0; i < n && ctx_ == nullptr; ++i) {
      if (name_ == ibv_get_device_name(list[i])) {
        ctx_ = ibv_open_device(list[i]);
        if (ctx_ == nullptr) {
          int err = errno;
          ibv_free_device_list(list);
          fail(name_ + ": ibv_open_device", err);
        }
      }
    }
    ibv_free_device_list(list);
    if (ctx_ == nullptr) {
      throw std::runtime_error("device " + name_ +
                               " not in the device list: the demo needs SOFTHCA_NUM_DEVICES >= 2");
    }
  }

  void modify(ibv_qp_attr& attr, int mask, const char* state) {
    if (int rc = ibv_modify_qp(qp_, &attr, mask); rc != 0) {
      fail(name_ + ": ibv_modify_qp to " + state, rc);
    }
  }

  std::string name_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::unique_ptr<uint8_t, FreeDeleter> buf_;
  ibv_mr* mr_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  uint16_t lid_ = 0;
  ibv_mtu mtu_ = IBV_MTU_1024;
};

// Byte k of message i of the row tagged `tag`: distinct per message and per row, so a write
// that landed in the wrong place or a stale buffer from an earlier row both show.
uint8_t pattern_byte(uint64_t i, uint32_t k, uint32_t tag) {
  return static_cast<uint8_t>(i * 131 + k * 7 + tag * 29 + 1);
}

bool is_signaled(uint64_t i, const FeatureRow& row, uint64_t messages) {
  return (i + 1) % row.signal_period == 0 || i + 1 == messages;
}

// Posts every message closed-loop: at most sq_depth WRs in flight; a signaled completion retires
// every WR up to it (RC completes in order).
void post_all(const Endpoint& req, const Endpoint& resp, const FeatureRow& row, const WorkloadParams& p) {
  std::vector<ibv_send_wr> wrs(row.postlist);
  std::vector<ibv_sge> sges(row.postlist);
  std::array<ibv_wc, 16> wcs{};
  const auto src = reinterpret_cast<uintptr_t>(req.buffer());
  const auto dst = reinterpret_cast<uintptr_t>(resp.buffer());
  uint64_t posted = 0;
  uint64_t retired = 0;

  auto poll_some = [&] {
    const auto deadline = std::chrono::steady_clock::now() + kCompletionTimeout;
    for (;;) {
      int n = ibv_poll_cq(req.cq(), static_cast<int>(wcs.size()), wcs.data());
      if (n < 0) fail(req.name() + ": ibv_poll_cq", -n);
      for (int i = 0; i < n; ++i) {
        const ibv_wc& wc = wcs[static_cast<size_t>(i)];
        if (wc.status != IBV_WC_SUCCESS) {
          throw std::runtime_error(req.name() + ": completion of write " + std::to_string(wc.wr_id) +
                                   " failed: " + ibv_wc_status_str(wc.status));
        }
        if (wc.opcode != IBV_WC_RDMA_WRITE) {
          throw std::runtime_error(req.name() + ": completion of write " + std::to_string(wc.wr_id) +
                                   " has opcode " + std::to_string(static_cast<int>(wc.opcode)));
        }
        retired = wc.wr_id + 1;
      }
      if (n > 0) return;
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error(req.name() + ": no completion within 10 s (" +
                                 std::to_string(retired) + " of " + std::to_string(posted) +
                                 " posted writes completed)");
      }
    }
  };

  while (posted < p.messages) {
    const uint64_t left = p.messages - posted;
    const auto chunk = static_cast<uint32_t>(left < row.postlist ? left : row.postlist);
    while (posted + chunk - retired > p.sq_depth) poll_some();
    for (uint32_t j = 0; j < chunk; ++j) {
      const uint64_t i = posted + j;
      sges[j] = ibv_sge{src + i * p.message_bytes, p.message_bytes, req.mr()->lkey};
      ibv_send_wr& wr = wrs[j];
      wr = ibv_send_wr{};
      wr.wr_id = i;
      wr.next = j + 1 < chunk ? &wrs[j + 1] : nullptr;
      wr.sg_list = &sges[j];
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_WRITE;
      unsigned int flags = 0;
      if (row.inline_data) flags |= IBV_SEND_INLINE;
      if (is_signaled(i, row, p.messages)) flags |= IBV_SEND_SIGNALED;
      wr.send_flags = flags;
      wr.wr.rdma.remote_addr = dst + i * p.message_bytes;
      wr.wr.rdma.rkey = resp.mr()->rkey;
    }
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(req.qp(), wrs.data(), &bad); rc != 0) {
      fail(req.name() + ": ibv_post_send of write " + std::to_string(bad != nullptr ? bad->wr_id : posted), rc);
    }
    posted += chunk;
  }
  while (retired < p.messages) poll_some();
}

std::string check_landed(const Endpoint& req, const Endpoint& resp, const WorkloadParams& p) {
  const uint64_t last = p.messages - 1;
  if (std::memcmp(resp.buffer() + last * p.message_bytes, req.buffer() + last * p.message_bytes,
                  p.message_bytes) != 0) {
    return "data check failed: the last write's bytes did not land in " + resp.name();
  }
  for (uint64_t i = 0; i < p.messages; ++i) {
    if (std::memcmp(resp.buffer() + i * p.message_bytes, req.buffer() + i * p.message_bytes,
                    p.message_bytes) != 0) {
      return "data check failed: write " + std::to_string(i) + " of " + std::to_string(p.messages) +
             " did not land in " + resp.name();
    }
  }
  return {};
}

}  // namespace

std::span<const FeatureRow> demo_rows() { return kDemoRows; }

std::string_view to_string(driver::BlueFlameMode mode) {
  switch (mode) {
    case BlueFlameMode::kAuto: return "auto";
    case BlueFlameMode::kOff: return "off";
    case BlueFlameMode::kPrefer: return "prefer";
  }
  return "?";
}

RowOutcome run_live_row(const FeatureRow& row, const WorkloadParams& params) {
  RowOutcome out;
  out.measurement.row = row;
  out.measurement.messages = params.messages;
  out.measurement.message_bytes = params.message_bytes;
  try {
    // A post must fit next to the unsignaled WRs that no completion has retired yet (at most
    // signal_period - 1), or the closed loop would wait for a completion that never comes.
    if (params.messages == 0 || params.message_bytes == 0 || row.postlist == 0 || row.signal_period == 0 ||
        row.postlist + row.signal_period - 1 > params.sq_depth) {
      throw std::invalid_argument("invalid workload: messages, size, postlist and signal period must be "
                                  "at least 1, and postlist + signal period - 1 at most the SQ depth");
    }
    runtime::DeviceSlot& req_slot = slot_named(kRequesterName);
    runtime::DeviceSlot& resp_slot = slot_named(kResponderName);
    // The driver reads the mode when a context opens, so set it first.
    req_slot.set_blueflame_mode(static_cast<uint8_t>(row.blueflame));
    resp_slot.set_blueflame_mode(static_cast<uint8_t>(row.blueflame));

    const size_t bytes = params.messages * params.message_bytes;
    Endpoint req(kRequesterName);
    Endpoint resp(kResponderName);
    req.create(bytes, IBV_ACCESS_LOCAL_WRITE, params, row.inline_data);
    resp.create(bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, params, false);
    req.connect_to(resp);
    resp.connect_to(req);

    uint32_t tag = 0;
    for (char c : row.name) tag = tag * 31 + static_cast<uint8_t>(c);
    for (uint64_t i = 0; i < params.messages; ++i) {
      for (uint32_t k = 0; k < params.message_bytes; ++k) {
        req.buffer()[i * params.message_bytes + k] = pattern_byte(i, k, tag);
      }
    }

    const pcie::CounterSnapshot req_before = req_slot.counters().snapshot();
    const pcie::CounterSnapshot resp_before = resp_slot.counters().snapshot();
    post_all(req, resp, row, params);
    out.measurement.requester = req_slot.counters().snapshot() - req_before;
    out.measurement.responder = resp_slot.counters().snapshot() - resp_before;
    out.error = check_landed(req, resp, params);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace softhca::tools
