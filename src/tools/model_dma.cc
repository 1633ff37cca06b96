// pcie-bench's DMA microbenchmarks on the timing model (Neugebauer et al., SIGCOMM 2018; figures.md
// P7, P8): softhca_0's device issues DMA reads or writes of w.size_bytes to host memory through
// the device's own port (pcie::DevicePort: the same TLP cuts as the device's payload DMA), and the
// timing model places their TLPs. Latency: one transfer at a time (LAT_RD; for writes, until the
// last byte is in memory). Bandwidth: as many transfers in flight as read tags (reads) or posted
// credits (writes) allow (BW_RD, BW_WR). No CPU, no HCA unit, no fabric.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

#include "pcie/device_port.h"
#include "pcie/tlp_split.h"
#include "sim/scheduler.h"
#include "tools/model_sim_runtime.h"
#include "tools/model_workload.h"

namespace softhca::tools {

namespace {

constexpr uint32_t kDmaHost = 0;
constexpr uint64_t kPageBytes = 4096;
// Transfers start on their own page, in turn over this many pages (or one transfer's worth, for
// larger ones): each transfer is cut into TLPs alike (assumed; pcie-bench offsets its transfers
// within a host buffer too, to vary what its caches see, which the model does not have).
constexpr uint64_t kWindowPages = 16;

// Collects one transfer's TLPs (in the order the port made them) and counts them.
class TransferTlps final : public pcie::TlpSink {
 public:
  void on_tlp(const pcie::Tlp& t) override {
    tlps.push_back(t);
    counters.on_tlp(t);
  }
  std::vector<pcie::Tlp> tlps;
  pcie::Counters counters;
};

sim::Step tlp_step(const pcie::Tlp& t) {
  sim::Step s;
  s.kind = sim::StepKind::kTlp;
  s.phase = t.type == pcie::TlpType::kMWr ? sim::Phase::kRemoteWrite : sim::Phase::kPayloadFetch;
  s.host = kDmaHost;
  s.dir = t.dir == pcie::Direction::kUpstream ? sim::LinkDir::kUp : sim::LinkDir::kDown;
  s.tlp_class = t.type == pcie::TlpType::kMWr   ? sim::TlpClass::kPosted
                : t.type == pcie::TlpType::kMRd ? sim::TlpClass::kNonPosted
                                                : sim::TlpClass::kCompletion;
  s.bytes = t.wire_bytes;
  s.payload_bytes = t.payload_bytes;
  return s;
}

class DmaGenerator final : public sim::ChainListener {
 public:
  DmaGenerator(const sim::MachineProfile& profile, const Workload& w)
      : w_(w), params_(sim::derive_timing(profile)), config_(pcie_config_of(profile)) {
    if (auto err = validate(w)) throw std::invalid_argument(*err);
    stride_ = (uint64_t{w.size_bytes} + kPageBytes - 1) / kPageBytes * kPageBytes;
    const uint64_t window = stride_ * kWindowPages;
    memory_.reset(static_cast<uint8_t*>(std::aligned_alloc(kPageBytes, window)));
    if (!memory_) throw std::bad_alloc();
    std::memset(memory_.get(), 0, window);
    staging_.assign(w.size_bytes, 0);
  }

  RunResult run() {
    RunResult r;
    r.workload = w_;
    latency_run(r);
    bandwidth_run(r);
    return r;
  }

  void on_tagged_step(uint32_t, const sim::StepTimes& t) override {
    // The transfer's last TLP has its result: a read's last completion has arrived, a write's
    // last MWr has left the device (it is in memory one way later).
    const Picoseconds done = t.done + (write() ? params_.pcie_one_way : Picoseconds(0));
    if (latency_mode_) {
      ++latencies_[done - issued_at_];
    } else {
      if (completed_ == 0) first_done_ = done;
      last_done_ = done;
    }
    ++completed_;
    // The next transfer takes this one's place once it is done (counted now: several may finish
    // before the first of their successors is issued).
    if (issued_ + queued_ < w_.messages) {
      ++queued_;
      model_->scheduler().schedule_at(done, [this] {
        --queued_;
        issue();
      });
    }
  }

 private:
  struct Run {
    sim::Scheduler scheduler;
    std::unique_ptr<sim::TimingModel> model;
  };

  [[nodiscard]] bool write() const { return w_.pattern == Pattern::kPcieWrite; }

  // One transfer through the device's port, its TLPs as a chain: each MRd takes a read tag, its
  // completions follow it and the last gives the tag back; a join waits for the transfer's last
  // TLPs and is the step the generator hears.
  void issue() {
    const uint64_t addr = reinterpret_cast<uintptr_t>(memory_.get()) + (issued_ % kWindowPages) * stride_;
    sink_.tlps.clear();
    pcie::DevicePort port(sink_, config_);
    const bool ok = write() ? port.dma_write(addr, staging_.data(), w_.size_bytes, pcie::TlpCause::kPayloadWrite)
                            : port.dma_read(addr, staging_.data(), w_.size_bytes, pcie::TlpCause::kPayloadRead);
    if (!ok) throw std::runtime_error("a DMA transfer of the model's own buffer faulted");
    uint32_t join = sim::kNoStep;
    uint32_t mrd = sim::kNoStep;
    uint32_t last_cpld = sim::kNoStep;
    int64_t cplds = 0;  // completions of this transfer so far
    auto close_mrd = [&] {
      if (mrd == sim::kNoStep) return;
      chain_.at(last_cpld).release_pool = chain_.at(mrd).acquire_pool;
      sim::Step j;
      j.host = kDmaHost;
      join = chain_.add(j, last_cpld, join);
      mrd = sim::kNoStep;
    };
    for (const pcie::Tlp& t : sink_.tlps) {
      sim::Step s = tlp_step(t);
      if (t.type == pcie::TlpType::kMRd) {
        close_mrd();
        s.acquire_pool = model_->tag_pool(kDmaHost);
        mrd = chain_.add(s);
        last_cpld = mrd;
      } else if (t.type == pcie::TlpType::kCplD) {
        s.lead = params_.rc_completion_gap * cplds++;  // the root complex spaces them (P9)
        last_cpld = chain_.add(s, mrd);
      } else {
        sim::Step j;
        j.host = kDmaHost;
        join = chain_.add(j, chain_.add(s), join);
      }
    }
    close_mrd();
    chain_.at(join).tag = 1;
    ++issued_;
    issued_at_ = model_->scheduler().now();
    model_->submit(chain_, issued_at_, this);
  }

  void start(Run& run) {
    run.model = std::make_unique<sim::TimingModel>(run.scheduler, params_, 1);
    model_ = run.model.get();
    issued_ = completed_ = queued_ = 0;
  }

  // LAT_RD: the next transfer is issued when the previous one is done.
  void latency_run(RunResult& r) {
    Run run;
    start(run);
    latency_mode_ = true;
    issue();
    model_->run();
    if (completed_ != w_.messages) throw std::runtime_error("DMA latency run ended with transfers missing");
    // The median (the sorted samples' element n/2, as perftest and pcie-bench report), least, most.
    uint64_t seen = 0;
    bool median = false;
    for (const auto& [latency, count] : latencies_) {
      seen += count;
      if (!median && seen > w_.messages / 2) {
        r.dma_latency = latency;
        median = true;
      }
    }
    r.dma_latency_min = latencies_.begin()->first;
    r.dma_latency_max = latencies_.rbegin()->first;
  }

  // BW_RD, BW_WR: enough transfers queued to keep every read tag (or posted header credit) busy;
  // a new one as each is done. The rate is the steady state's: the bytes of every transfer after
  // the first over the time from the first's end to the last's (no pipeline fill).
  void bandwidth_run(RunResult& r) {
    Run run;
    start(run);
    latency_mode_ = false;
    sink_.counters.reset();
    const uint64_t tlps =
        std::max<uint64_t>(1, pcie::count_aligned_chunks(0, w_.size_bytes, write() ? config_.mps_bytes : config_.mrrs_bytes));
    const uint64_t allowed = write() ? params_.rc_posted_hdr_credits : params_.max_outstanding_reads;
    const uint64_t window = std::min<uint64_t>(w_.messages, (allowed + tlps - 1) / tlps + 1);
    for (uint64_t i = 0; i < window; ++i) issue();
    model_->run();
    if (completed_ != w_.messages) throw std::runtime_error("DMA bandwidth run ended with transfers missing");
    r.messages = w_.messages;
    r.elapsed = last_done_;
    const double bytes = static_cast<double>(w_.size_bytes);
    if (w_.messages > 1 && last_done_ > first_done_) {
      const double seconds = static_cast<double>((last_done_ - first_done_).count()) * 1e-12;
      r.dma_bandwidth_gbps = bytes * static_cast<double>(w_.messages - 1) * 8 / seconds / 1e9;
    } else {
      r.dma_bandwidth_gbps = bytes * 8 / (static_cast<double>(last_done_.count()) * 1e-12) / 1e9;
    }
    r.goodput_gbps = r.dma_bandwidth_gbps;
    r.message_rate = r.dma_bandwidth_gbps * 1e9 / 8 / bytes;
    r.requester = sink_.counters.snapshot();
    r.resources = model_->resource_use();
    r.scheduler_events = run.scheduler.events_run();
    r.steps = model_->steps_placed();
  }

  Workload w_;
  sim::TimingParams params_;
  pcie::PcieConfig config_;
  uint64_t stride_ = 0;
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, FreeDeleter> memory_;
  std::vector<uint8_t> staging_;
  TransferTlps sink_;
  sim::ChainBuilder chain_;
  sim::TimingModel* model_ = nullptr;
  bool latency_mode_ = true;
  uint64_t issued_ = 0;
  uint64_t completed_ = 0;
  uint64_t queued_ = 0;  // transfers scheduled to be issued
  Picoseconds issued_at_{0};
  Picoseconds first_done_{0};
  Picoseconds last_done_{0};
  std::map<Picoseconds, uint64_t> latencies_;  // latency -> transfers (few distinct values)
};

}  // namespace

RunResult run_dma(const sim::MachineProfile& p, const Workload& w) { return DmaGenerator(p, w).run(); }

}  // namespace softhca::tools
