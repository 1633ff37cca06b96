// A test bench for one device with two RC (or UC) QPs (WQEs and receive WQEs written by the bench) connected to each other through the device's own
// port (loopback: packets sent are queued, then handed to a chosen Device object). Rings and the
// data buffer are test memory; WQEs are written by hand in the hwif format; time moves by hand.
// Each side (0, 1) has its own PD, memory key over the whole buffer, CQ and QP, so the two can
// belong to different owners. No threads.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <new>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "hca/device.h"
#include "hwif/cqe.h"
#include "hwif/doorbell_record.h"
#include "hwif/uar.h"
#include "hwif/wqe.h"
#include "pcie/counters.h"
#include "pcie/host_bridge.h"

namespace softhca::test {

// The identity bridge, refusing [lo, hi): a DMA that starts before lo gets a piece that ends at
// lo (so the device must ask again and then meets the fault). Records MSI-X vectors raised.
class RefusingBridge final : public pcie::HostBridge {
 public:
  void refuse(const void* p, size_t len) {
    lo_ = reinterpret_cast<uintptr_t>(p);
    hi_ = lo_ + len;
  }
  std::span<uint8_t> map(uint64_t addr, size_t len) override {
    ++maps;
    if (addr >= lo_ && addr < hi_) return {};
    if (addr < lo_ && len > lo_ - addr) len = lo_ - addr;
    return identity_.map(addr, len);
  }
  void deliver_msi(uint64_t vector) override { msis.push_back(vector); }

  uint64_t maps = 0;
  std::vector<uint64_t> msis;

 private:
  pcie::IdentityBridge identity_;
  uint64_t lo_ = 0, hi_ = 0;
};

// Test memory on its own pages, as a driver's rings and buffers are: how many TLPs a DMA takes
// depends on where it starts (max payload and read completion boundaries), so two runs that must
// count the same TLPs need the same alignment, not whatever the heap happens to give.
template <typename T>
struct PageAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlign{4096};
  PageAligned() = default;
  template <typename U>
  PageAligned(const PageAligned<U>&) {}  // NOLINT(google-explicit-constructor): allocator rebind
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  friend bool operator==(const PageAligned&, const PageAligned&) { return true; }
};
using PageBytes = std::vector<uint8_t, PageAligned<uint8_t>>;

struct CqeSeen {
  hwif::CqeOpcode opcode;
  uint8_t syndrome;  // 0 unless an error CQE
  uint16_t wqe_counter;
  uint32_t qpn;
};

class Loopback : public hca::PacketPort, public hca::EngineClock {
 public:
  static constexpr uint32_t kLogSq = 6;
  static constexpr uint32_t kLogRq = 4;
  static constexpr uint32_t kLogCq = 6;
  static constexpr size_t kBufBytes = 320 * 1024;

  struct Side {
    uint32_t pdn = 0, key = 0, cqn = 0, qpn = 0;
    PageBytes sq, rq, cq;
    alignas(64) hwif::QpDbRec qp_db{};
    alignas(64) hwif::CqDbRec cq_db{};
    uint16_t sq_pi = 0;
    uint16_t rq_pi = 0;
    const uint8_t* last_wqe = nullptr;
    uint32_t cq_ci = 0;
  };

  // RC QPs, or UC ones (`type`).
  explicit Loopback(hwif::QpType type = hwif::QpType::kRc) : buf_(kBufBytes), type_(type) {}

  static uint64_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  uint8_t* buf() { return buf_.data(); }
  Side& side(int s) { return sides_[s]; }
  pcie::Counters& counters() { return counters_; }

  // PD, memory key over the whole buffer (every right), CQ and QP of side s, owned by `owner`.
  void create(hca::Device& dev, int s, uint32_t owner) {
    using namespace hwif;
    dev.set_owner(owner);
    Side& d = sides_[s];
    d.sq.assign((1u << kLogSq) * kSendWqeBbBytes, 0);
    d.rq.assign((1u << kLogRq) * 16, 0);
    d.cq.assign((1u << kLogCq) * kCqeBytes, 0);
    for (size_t i = 0; i < d.cq.size(); i += kCqeBytes) d.cq[i + kCqeBytes - 1] = 0xf0;  // invalid, owner 0
    AllocPdOut pd{};
    ASSERT_EQ(exec_cmd(dev, AllocPdIn{}, pd), 0);
    d.pdn = pd.pdn;
    CreateMkeyIn mk;
    mk.pdn = d.pdn;
    mk.access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
    mk.host_addr = mk.iova = addr(buf_.data());
    mk.length = buf_.size();
    CreateMkeyOut mko{};
    ASSERT_EQ(exec_cmd(dev, mk, mko), 0);
    d.key = mko.lkey;
    CreateCqIn cq;
    cq.ring_addr = addr(d.cq.data());
    cq.dbrec_addr = addr(&d.cq_db);
    cq.log_nent = kLogCq;
    CreateCqOut cqo{};
    ASSERT_EQ(exec_cmd(dev, cq, cqo), 0);
    d.cqn = cqo.cqn;
    CreateQpIn qp;
    qp.type = type_;
    qp.pdn = d.pdn;
    qp.send_cqn = qp.recv_cqn = d.cqn;
    qp.sq_addr = addr(d.sq.data());
    qp.log_sq_bbs = kLogSq;
    qp.rq_addr = addr(d.rq.data());
    qp.log_rq_cnt = kLogRq;
    qp.log_rq_stride = 4;
    qp.dbrec_addr = addr(&d.qp_db);
    CreateQpOut qpo{};
    ASSERT_EQ(exec_cmd(dev, qp, qpo), 0);
    d.qpn = qpo.qpn;
  }

  // Both QPs RESET -> INIT -> RTR -> RTS, each the other's peer.
  void connect(hca::Device& dev, uint8_t retry_cnt = 7) {
    for (int s = 0; s < 2; ++s) connect_one(dev, s, sides_[1 - s].qpn, retry_cnt);
  }

  // One WQE on side s: WRITE/READ/SEND of len bytes from buf[local], or an atomic on buf[remote]
  // with its result to buf[local]; signaled unless `signaled` is false; rings the doorbell unless
  // `ring` is false (a post list: ring() later announces every WQE written since).
  void post(hca::Device& dev, int s, hwif::WqeOpcode op, uint32_t len, uint64_t local, uint64_t remote,
            uint64_t swap_add = 0, bool signaled = true, bool ring = true) {
    using namespace hwif;
    Side& d = sides_[s];
    const bool atomic = op == WqeOpcode::kAtomicFa || op == WqeOpcode::kAtomicCs;
    const bool rdma = atomic || op == WqeOpcode::kRdmaWrite || op == WqeOpcode::kRdmaRead;
    const uint32_t ds = 2 + (rdma ? 1 : 0) + (atomic ? 1 : 0);
    uint8_t* w = d.sq.data() + (d.sq_pi & ((1u << kLogSq) - 1)) * kSendWqeBbBytes;
    std::memset(w, 0, kSendWqeBbBytes);
    CtrlSeg c{};
    c.set(op, d.sq_pi, d.qpn, ds, signaled ? kCtrlCqUpdate : uint8_t{0});
    std::memcpy(w, &c, 16);
    size_t off = 16;
    if (rdma) {
      RaddrSeg r{};
      r.raddr = addr(buf_.data()) + remote;
      r.rkey = sides_[1 - s].key;
      std::memcpy(w + off, &r, 16);
      off += 16;
    }
    if (atomic) {
      AtomicSeg a{};
      a.swap_add = swap_add;
      std::memcpy(w + off, &a, 16);
      off += 16;
    }
    DataSeg dseg{};
    dseg.byte_count = atomic ? 8 : len;
    dseg.lkey = d.key;
    dseg.addr = addr(buf_.data()) + local;
    std::memcpy(w + off, &dseg, 16);
    ++d.sq_pi;
    d.last_wqe = w;
    if (ring) this->ring(dev, s);
  }

  // An RDMA WRITE of len bytes of buf[local] carried inline in the WQE (which may take several
  // basic blocks and wrap the ring's end), to buf[remote]; signaled and ring as post().
  void post_inline_write(hca::Device& dev, int s, uint32_t len, uint64_t local, uint64_t remote, bool signaled = true,
                         bool ring = true) {
    using namespace hwif;
    Side& d = sides_[s];
    const uint32_t ds = 2 + (len + 4 + kDsBytes - 1) / kDsBytes;
    const uint32_t bbs = (ds * kDsBytes + kSendWqeBbBytes - 1) / kSendWqeBbBytes;
    std::array<uint8_t, kMaxWqeBbs * kSendWqeBbBytes> w{};
    CtrlSeg c{};
    c.set(WqeOpcode::kRdmaWrite, d.sq_pi, d.qpn, ds, signaled ? kCtrlCqUpdate : uint8_t{0});
    std::memcpy(w.data(), &c, 16);
    RaddrSeg r{};
    r.raddr = addr(buf_.data()) + remote;
    r.rkey = sides_[1 - s].key;
    std::memcpy(w.data() + 16, &r, 16);
    const Be32 hdr(len | kInlineSegFlag);
    std::memcpy(w.data() + 32, &hdr, 4);
    std::memcpy(w.data() + 36, buf_.data() + local, len);
    const size_t ring_bytes = d.sq.size();
    const size_t start = (d.sq_pi & ((1u << kLogSq) - 1)) * kSendWqeBbBytes;
    for (size_t i = 0; i < bbs * kSendWqeBbBytes; ++i) d.sq[(start + i) % ring_bytes] = w[i];
    d.sq_pi = static_cast<uint16_t>(d.sq_pi + bbs);
    d.last_wqe = d.sq.data() + start;
    if (ring) this->ring(dev, s);
  }

  // A receive WQE on side s for len bytes at buf[local] (one data segment; lkey: side s's key
  // unless given), announced in the doorbell record.
  void post_recv(int s, uint32_t len, uint64_t local, uint32_t lkey = 0) {
    using namespace hwif;
    Side& d = sides_[s];
    DataSeg dseg{};
    dseg.byte_count = len;
    dseg.lkey = lkey != 0 ? lkey : d.key;
    dseg.addr = addr(buf_.data()) + local;
    std::memcpy(d.rq.data() + (d.rq_pi & ((1u << kLogRq) - 1)) * sizeof dseg, &dseg, sizeof dseg);
    ++d.rq_pi;
    d.qp_db.rq_counter = d.rq_pi;
  }

  // The doorbell of side s for everything posted so far: the first 8 bytes of the last WQE.
  void ring(hca::Device& dev, int s) {
    dev.mmio_write(hwif::uar_page_offset(0) + hwif::bfreg_offset(1), sides_[s].last_wqe, hwif::kDoorbellBytes);
  }

  // Hands every queued packet (and those they cause) to `dev`. Bounded: a loop of packets fails.
  void pump(hca::Device& dev) {
    for (int n = 0; !queue_.empty(); ++n) {
      ASSERT_LT(n, 10000) << "packets never stop";
      const std::vector<uint8_t> p = std::move(queue_.front());
      queue_.pop_front();
      dev.receive(p);
    }
  }
  // Hands only the oldest queued packet to `dev` (what it sends in turn stays queued).
  void deliver_one(hca::Device& dev) {
    ASSERT_FALSE(queue_.empty());
    const std::vector<uint8_t> p = std::move(queue_.front());
    queue_.pop_front();
    dev.receive(p);
  }
  [[nodiscard]] size_t queued() const { return queue_.size(); }

  std::vector<CqeSeen> take_cqes(int s) {
    Side& d = sides_[s];
    std::vector<CqeSeen> out;
    const uint32_t n = 1u << kLogCq;
    for (;;) {
      const uint8_t* e = d.cq.data() + (d.cq_ci & (n - 1)) * hwif::kCqeBytes;
      hwif::Cqe64 c;
      std::memcpy(&c, e, sizeof c);
      if (c.opcode() == hwif::CqeOpcode::kInvalid || c.owner() != ((d.cq_ci >> kLogCq) & 1)) break;
      hwif::ErrCqe64 er;
      std::memcpy(&er, e, sizeof er);
      const bool err = c.opcode() == hwif::CqeOpcode::kReqErr || c.opcode() == hwif::CqeOpcode::kRespErr;
      out.push_back({c.opcode(), err ? er.syndrome : uint8_t{0}, c.wqe_counter.get(), c.sop_drop_qpn.get() & 0xffffff});
      ++d.cq_ci;
      d.cq_db.set_ci = d.cq_ci & 0xffffff;
    }
    return out;
  }

  // Moves time on and runs the device's timers, then the packets they sent.
  void advance(hca::Device& dev, Picoseconds d) {
    tick(dev, d);
    pump(dev);
  }
  // Moves time on and runs the device's timers; what they send stays queued.
  void tick(hca::Device& dev, Picoseconds d) {
    now_ += d;
    dev.on_timer(now_);
  }

  // EngineClock
  Picoseconds now() override { return now_; }
  void request_wakeup(Picoseconds) override {}
  // PacketPort: queued, so no device is entered from inside itself.
  void transmit(std::span<const uint8_t> packet) override { queue_.emplace_back(packet.begin(), packet.end()); }

 private:
  void connect_one(hca::Device& dev, int s, uint32_t peer_qpn, uint8_t retry_cnt) {
    using namespace hwif;
    ModifyQpIn m;
    m.qpn = sides_[s].qpn;
    m.attr.state = QpState::kInit;
    m.attr.port_num = 1;
    const bool rc = type_ == QpType::kRc;
    m.attr.access_flags = rc ? kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic : kAccessRemoteWrite;
    m.attr_mask = kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags;
    ASSERT_EQ(exec_cmd(dev, m), 0);
    m.attr.state = QpState::kRtr;
    m.attr.av.dlid = dev.lid();
    m.attr.path_mtu = Mtu::k1024;
    m.attr.dest_qpn = peer_qpn;
    m.attr.rq_psn = 0;
    m.attr.max_dest_rd_atomic = 4;
    m.attr.min_rnr_timer = 1;
    m.attr_mask = kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | (rc ? kQpMaxDestRdAtomic | kQpMinRnrTimer : 0u);
    ASSERT_EQ(exec_cmd(dev, m), 0);
    m.attr.state = QpState::kRts;
    m.attr.sq_psn = 0;
    m.attr.timeout = 14;
    m.attr.retry_cnt = retry_cnt;
    m.attr.rnr_retry = 7;
    m.attr.max_rd_atomic = 4;
    m.attr_mask = kQpState | kQpSqPsn | (rc ? kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic : 0u);
    ASSERT_EQ(exec_cmd(dev, m), 0);
  }

  pcie::Counters counters_;
  PageBytes buf_;
  std::array<Side, 2> sides_;
  hwif::QpType type_;
  std::deque<std::vector<uint8_t>> queue_;
  Picoseconds now_{0};
};

}  // namespace softhca::test
