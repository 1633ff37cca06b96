// The device bench of wqe_parse_fuzz (and of make_fuzz_corpus, which writes its seeds): a fresh
// Device whose one QP is connected to itself through the device's internal loopback, its send
// ring filled with arbitrary bytes and rung. The data buffer sits at a fixed address between
// inaccessible guard pages, so seeds can hold valid addresses and a DMA past it faults at once;
// PD A's key covers its first half, PD B's its second half (which the QP of PD A must never
// write). No threads; time moves only when run_timers() jumps to the next wake-up.
#pragma once
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz_check.h"
#include "hca/device.h"
#include "hwif/cqe.h"
#include "hwif/doorbell_record.h"
#include "hwif/uar.h"
#include "hwif/wqe.h"
#include "pcie/counters.h"

namespace softhca::fuzz {

using namespace hwif;

constexpr uint32_t kLogDeviceSqBbs = 4;  // the device run's send ring: 16 basic blocks, 1 KiB
constexpr uint32_t kRingBytes = (1u << kLogDeviceSqBbs) * kSendWqeBbBytes;
constexpr uint32_t kLogRq = 3;
constexpr uint32_t kLogCq = 6;
constexpr uint32_t kRecvBytes = 512;  // each posted receive
constexpr int kTimerSteps = 16;       // bounded: a WQE that retries for ever still ends the input

// The data buffer: a fixed address (in x86-64 ASan's high application memory) so seeds can name
// it, between guard pages. PD A's key covers the first half, PD B's the second.
constexpr uint64_t kBufAddr = 0x500000000000;
constexpr size_t kGuardBytes = 4096;
constexpr size_t kBufBytes = 64 * 1024;
constexpr size_t kHalf = kBufBytes / 2;
constexpr uint8_t kPdBPattern = 0xb5;

inline uint8_t* fixed_buffer() {
  static uint8_t* buf = [] {
    void* p = ::mmap(reinterpret_cast<void*>(kBufAddr - kGuardBytes), kBufBytes + 2 * kGuardBytes, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    check(p == reinterpret_cast<void*>(kBufAddr - kGuardBytes), "the fixed data buffer can be mapped");
    check(::mprotect(reinterpret_cast<void*>(kBufAddr), kBufBytes, PROT_READ | PROT_WRITE) == 0,
          "the data buffer can be made accessible");
    return reinterpret_cast<uint8_t*>(kBufAddr);
  }();
  return buf;
}

inline uint64_t addr_of(const void* p) { return reinterpret_cast<uintptr_t>(p); }

class LoopbackBench : public hca::PacketPort, public hca::EngineClock {
 public:
  explicit LoopbackBench(QpType type)
      : device_(hca::default_device_config(0), counters_, *this, *this),
        type_(type),
        sq_(kRingBytes),
        rq_((1u << kLogRq) * sizeof(DataSeg)),
        cq_((1u << kLogCq) * kCqeBytes) {
    device_.set_internal_loopback(true);
    for (size_t i = 0; i < cq_.size(); i += kCqeBytes) cq_[i + kCqeBytes - 1] = 0xf0;  // invalid, owner 0
    uint8_t* buf = fixed_buffer();
    std::memset(buf, 0, kHalf);
    std::memset(buf + kHalf, kPdBPattern, kHalf);
    pd_a_ = alloc_pd();
    key_a_ = create_mkey(pd_a_, buf, kHalf);
    create_mkey(alloc_pd(), buf + kHalf, kHalf);
    CreateCqIn cq;
    cq.ring_addr = addr_of(cq_.data());
    cq.dbrec_addr = addr_of(&cq_db_);
    cq.log_nent = kLogCq;
    CreateCqOut cqo{};
    check(exec_cmd(device_, cq, cqo) == 0, "create CQ");
    CreateQpIn qp;
    qp.type = type;
    qp.pdn = pd_a_;
    qp.send_cqn = qp.recv_cqn = cqo.cqn;
    qp.sq_addr = addr_of(sq_.data());
    qp.log_sq_bbs = kLogDeviceSqBbs;
    qp.rq_addr = addr_of(rq_.data());
    qp.log_rq_cnt = kLogRq;
    qp.log_rq_stride = 4;
    qp.dbrec_addr = addr_of(&qp_db_);
    CreateQpOut qpo{};
    check(exec_cmd(device_, qp, qpo) == 0, "create QP");
    qpn_ = qpo.qpn;
    post_receives();
    check(connect_to_itself() == 0, "connect the QP to itself");
  }

  [[nodiscard]] uint32_t key_a() const { return key_a_; }
  [[nodiscard]] uint32_t qpn() const { return qpn_; }
  [[nodiscard]] uint16_t lid() const { return device_.lid(); }

  // Puts the bytes in the send ring and tells the device about them.
  void ring(std::span<const uint8_t> bytes, uint16_t producer, bool blueflame) {
    std::copy_n(bytes.begin(), std::min<size_t>(bytes.size(), sq_.size()), sq_.begin());
    const uint64_t bfreg = uar_page_offset(0) + bfreg_offset(1);
    if (blueflame) {
      // The WQE at the producer's slot, as many whole 64-byte chunks as a BlueFlame buffer takes.
      const uint32_t slot = (producer & ((1u << kLogDeviceSqBbs) - 1)) * kSendWqeBbBytes;
      std::array<uint8_t, kBfBufBytes> bf{};
      for (size_t i = 0; i < bf.size(); ++i) bf[i] = sq_[(slot + i) % sq_.size()];
      device_.mmio_write(bfreg, bf.data(), bf.size());
    } else {
      CtrlSeg head{};
      head.set(WqeOpcode::kNop, static_cast<uint16_t>(producer - 1), qpn_, 1, 0);
      device_.mmio_write(bfreg, &head, kDoorbellBytes);
    }
  }

  // Runs the timers that came due, jumping to each requested wake-up, a bounded number of times.
  void run_timers() {
    for (int i = 0; i < kTimerSteps && wakeup_ != Picoseconds::max(); ++i) {
      now_ = std::max(now_, wakeup_);
      wakeup_ = Picoseconds::max();
      device_.on_timer(now_);
    }
  }

  // Every CQE the device wrote has an opcode of the hwif contract.
  void check_cqes() const {
    for (size_t i = 0; i < cq_.size(); i += kCqeBytes) {
      Cqe64 c;
      std::memcpy(&c, cq_.data() + i, kCqeBytes);
      const CqeOpcode op = c.opcode();
      check(op == CqeOpcode::kReq || op == CqeOpcode::kRespWrImm || op == CqeOpcode::kRespSend ||
                op == CqeOpcode::kRespSendImm || op == CqeOpcode::kRespSendInv || op == CqeOpcode::kReqErr ||
                op == CqeOpcode::kRespErr || op == CqeOpcode::kInvalid,
            "CQE opcodes are those of hwif/cqe.h");
    }
    const uint8_t* pd_b = fixed_buffer() + kHalf;
    check(std::all_of(pd_b, pd_b + kHalf, [](uint8_t b) { return b == kPdBPattern; }),
          "memory registered under another PD is never written");
  }

  // EngineClock
  Picoseconds now() override { return now_; }
  void request_wakeup(Picoseconds at) override { wakeup_ = std::min(wakeup_, at); }
  // PacketPort: packets not addressed to this device leave the bench.
  void transmit(std::span<const uint8_t>) override {}

 private:
  uint32_t alloc_pd() {
    AllocPdOut pd{};
    check(exec_cmd(device_, AllocPdIn{}, pd) == 0, "alloc PD");
    return pd.pdn;
  }
  uint32_t create_mkey(uint32_t pdn, uint8_t* start, size_t len) {
    CreateMkeyIn mk;
    mk.pdn = pdn;
    mk.access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
    mk.host_addr = mk.iova = addr_of(start);
    mk.length = len;
    CreateMkeyOut out{};
    check(exec_cmd(device_, mk, out) == 0, "create mkey");
    return out.lkey;
  }
  void post_receives() {
    const uint32_t n = 1u << kLogRq;
    for (uint32_t i = 0; i < n; ++i) {
      DataSeg d{};
      d.byte_count = kRecvBytes;
      d.lkey = key_a_;
      d.addr = kBufAddr + kHalf - (i + 1) * kRecvBytes;  // the top of PD A's half
      std::memcpy(rq_.data() + i * sizeof(DataSeg), &d, sizeof d);
    }
    qp_db_.rq_counter = n;
  }
  int connect_to_itself() {
    ModifyQpIn m;
    m.qpn = qpn_;
    m.attr.state = QpState::kInit;
    m.attr.port_num = 1;
    m.attr.qkey = 0x11111111;
    m.attr.access_flags = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
    m.attr_mask = kQpState | kQpPkeyIndex | kQpPort | (type_ == QpType::kUd ? kQpQkey : kQpAccessFlags);
    if (int e = exec_cmd(device_, m)) return e;
    m.attr.state = QpState::kRtr;
    m.attr.av.dlid = device_.lid();
    m.attr.path_mtu = Mtu::k256;  // small, so a few hundred bytes make a multi-packet message
    m.attr.dest_qpn = qpn_;
    m.attr.max_dest_rd_atomic = 4;
    m.attr.min_rnr_timer = 1;
    m.attr_mask = type_ == QpType::kUd ? kQpState
                                       : kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                             (type_ == QpType::kRc ? kQpMaxDestRdAtomic | kQpMinRnrTimer : 0);
    if (int e = exec_cmd(device_, m)) return e;
    m.attr.state = QpState::kRts;
    m.attr.timeout = 1;
    m.attr.retry_cnt = 2;
    m.attr.rnr_retry = 2;
    m.attr.max_rd_atomic = 4;
    m.attr_mask = kQpState | kQpSqPsn |
                  (type_ == QpType::kRc ? kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic : 0);
    return exec_cmd(device_, m);
  }

  pcie::Counters counters_;
  hca::Device device_;
  QpType type_;
  std::vector<uint8_t> sq_, rq_, cq_;
  alignas(64) QpDbRec qp_db_{};
  alignas(64) CqDbRec cq_db_{};
  uint32_t pd_a_ = 0, key_a_ = 0, qpn_ = 0;
  Picoseconds now_{0};
  Picoseconds wakeup_ = Picoseconds::max();
};

}  // namespace softhca::fuzz
