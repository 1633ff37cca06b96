// A test bench for one device model with no driver, no runtime and no threads: rings and buffers
// in test memory, commands sent directly, WQEs written by hand in the hwif format, packets captured
// from the device and injected into it, time advanced by hand. Used by the protocol tests.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "fabric/packet/packet.h"
#include "hca/device.h"
#include "hwif/cqe.h"
#include "hwif/doorbell_record.h"
#include "hwif/uar.h"
#include "hwif/wqe.h"
#include "pcie/counters.h"

namespace softhca::test {

struct Captured {
  fabric::PacketFields f;
  std::vector<uint8_t> payload;
};

class DeviceHarness : public hca::PacketPort, public hca::EngineClock {
 public:
  static constexpr uint32_t kLogSqBbs = 4;
  static constexpr uint32_t kLogRq = 4;
  static constexpr uint32_t kLogCq = 6;
  static constexpr uint32_t kLogEq = 4;
  static constexpr uint16_t kPeerLid = 9;
  static constexpr uint32_t kPeerQpn = 0x77;
  static constexpr size_t kBufBytes = 256 * 1024;

  explicit DeviceHarness(hwif::QpType type = hwif::QpType::kRc,
                         const hca::DeviceConfig& config = hca::default_device_config(0))
      : device_(config, counters_, *this, *this), type_(type) {
    buf_.resize(kBufBytes);
    sq_.resize((1u << kLogSqBbs) * hwif::kSendWqeBbBytes);
    rq_.resize((1u << kLogRq) * 16);
    cq_.resize((1u << kLogCq) * 64);
    for (size_t i = 0; i < cq_.size(); i += 64) cq_[i + 63] = 0xf0;  // invalid, owner 0
    hwif::AllocPdOut pd{};
    hwif::exec_cmd(device_, hwif::AllocPdIn{}, pd);
    pdn_ = pd.pdn;
    hwif::CreateMkeyIn mk;
    mk.pdn = pdn_;
    mk.access = hwif::kAccessLocalWrite | hwif::kAccessRemoteWrite | hwif::kAccessRemoteRead | hwif::kAccessRemoteAtomic;
    mk.host_addr = mk.iova = addr(buf_.data());
    mk.length = buf_.size();
    hwif::CreateMkeyOut mko{};
    hwif::exec_cmd(device_, mk, mko);
    key_ = mko.lkey;
    hwif::CreateCqIn cq;
    cq.ring_addr = addr(cq_.data());
    cq.dbrec_addr = addr(&cq_db_);
    cq.log_nent = kLogCq;
    hwif::CreateCqOut cqo{};
    hwif::exec_cmd(device_, cq, cqo);
    cqn_ = cqo.cqn;
    // An async EQ for the QP's affiliated events (take_events()): 16 EQEs, owner invalid for pass 0.
    eq_.resize((1u << kLogEq) * hwif::kEqeBytes);
    for (size_t i = 0; i < eq_.size(); i += hwif::kEqeBytes) eq_[i + hwif::kEqeBytes - 1] = 1;
    hwif::CreateEqIn eq;
    eq.ring_addr = addr(eq_.data());
    eq.log_nent = kLogEq;
    eq.async_events = true;
    hwif::CreateEqOut eqo{};
    hwif::exec_cmd(device_, eq, eqo);
    hwif::CreateQpIn qp;
    qp.async_eqn = eqo.eqn;
    qp.type = type;
    qp.pdn = pdn_;
    qp.send_cqn = qp.recv_cqn = cqn_;
    qp.sq_addr = addr(sq_.data());
    qp.log_sq_bbs = kLogSqBbs;
    qp.rq_addr = addr(rq_.data());
    qp.log_rq_cnt = kLogRq;
    qp.log_rq_stride = 4;
    qp.dbrec_addr = addr(&qp_db_);
    hwif::CreateQpOut qpo{};
    hwif::exec_cmd(device_, qp, qpo);
    qpn_ = qpo.qpn;
  }

  static uint64_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  // The async events the device wrote since the last call, in order.
  std::vector<hwif::Eqe> take_events() {
    std::vector<hwif::Eqe> out;
    for (;;) {
      hwif::Eqe e;
      std::memcpy(&e, eq_.data() + (eq_ci_ & ((1u << kLogEq) - 1)) * hwif::kEqeBytes, sizeof e);
      if ((e.owner & 1) != ((eq_ci_ >> kLogEq) & 1)) return out;
      out.push_back(e);
      ++eq_ci_;
    }
  }
  hca::Device& device() { return device_; }
  pcie::Counters& counters() { return counters_; }
  uint8_t* buf() { return buf_.data(); }
  uint64_t buf_addr() const { return addr(buf_.data()); }
  uint32_t key() const { return key_; }
  uint32_t qpn() const { return qpn_; }
  hwif::QpType type() const { return type_; }

  // Before connect(): the path to the peer carries a GRH to `peer_gid` (and requests from the
  // peer come with one from it); the QP uses P_Key table entry `index` (requests carry `pkey`).
  void use_global_path(const hwif::Gid& peer_gid) { peer_gid_ = peer_gid; }
  void use_pkey(uint16_t index, uint16_t pkey) {
    pkey_index_ = index;
    pkey_ = pkey;
  }

  // RESET -> INIT -> RTR -> RTS with the given PSNs; peer at kPeerLid/kPeerQpn.
  int connect(uint32_t sq_psn, uint32_t rq_psn, uint8_t rnr_retry = 7, uint8_t retry_cnt = 7,
              uint8_t timeout = 14) {
    using namespace hwif;
    ModifyQpIn m;
    m.qpn = qpn_;
    m.attr.state = QpState::kInit;
    m.attr.port_num = 1;
    m.attr.pkey_index = pkey_index_;
    m.attr.qkey = 0x11111111;
    m.attr.access_flags = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
    m.attr_mask = kQpState | kQpPkeyIndex | kQpPort | (type_ == QpType::kUd ? kQpQkey : kQpAccessFlags);
    if (int e = exec_cmd(device_, m)) return e;
    m.attr.state = QpState::kRtr;
    m.attr.av.dlid = kPeerLid;
    if (peer_gid_) {
      m.attr.av.is_global = true;
      m.attr.av.dgid = *peer_gid_;
      m.attr.av.hop_limit = 64;
    }
    m.attr.path_mtu = Mtu::k1024;
    m.attr.dest_qpn = kPeerQpn;
    m.attr.rq_psn = rq_psn;
    m.attr.max_dest_rd_atomic = 4;
    m.attr.min_rnr_timer = 1;
    m.attr_mask = type_ == QpType::kUd ? kQpState
                                       : kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                             (type_ == QpType::kRc ? kQpMaxDestRdAtomic | kQpMinRnrTimer : 0);
    if (int e = exec_cmd(device_, m)) return e;
    m.attr.state = QpState::kRts;
    m.attr.sq_psn = sq_psn;
    m.attr.timeout = timeout;
    m.attr.retry_cnt = retry_cnt;
    m.attr.rnr_retry = rnr_retry;
    m.attr.max_rd_atomic = 4;
    m.attr_mask = kQpState | kQpSqPsn |
                  (type_ == QpType::kRc ? kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic : 0);
    return exec_cmd(device_, m);
  }

  // Writes one RDMA WRITE (or SEND) WQE of len bytes from buf[0] and rings the doorbell.
  void post(hwif::WqeOpcode op, uint32_t len, uint64_t raddr, uint32_t rkey, bool signaled = true) {
    using namespace hwif;
    const bool rdma = op == WqeOpcode::kRdmaWrite || op == WqeOpcode::kRdmaRead;
    const uint32_t ds = rdma ? 3 : 2;
    uint8_t* w = sq_.data() + (sq_pi_ & ((1u << kLogSqBbs) - 1)) * kSendWqeBbBytes;
    std::memset(w, 0, kSendWqeBbBytes);
    CtrlSeg c{};
    c.set(op, sq_pi_, qpn_, ds, signaled ? kCtrlCqUpdate : 0);
    std::memcpy(w, &c, 16);
    size_t off = 16;
    if (rdma) {
      RaddrSeg r{};
      r.raddr = raddr;
      r.rkey = rkey;
      std::memcpy(w + off, &r, 16);
      off += 16;
    }
    DataSeg d{};
    d.byte_count = len;
    d.lkey = key_;
    d.addr = buf_addr();
    std::memcpy(w + off, &d, 16);
    ++sq_pi_;
    device_.mmio_write(uar_page_offset(0) + bfreg_offset(1), w, kDoorbellBytes);
  }

  // A hostile or broken driver: writes a SEND WQE whose control segment claims `claimed_ds`
  // 16-byte units, but rings the doorbell for one basic block only.
  void post_overlong(uint32_t claimed_ds) {
    using namespace hwif;
    uint8_t* w = sq_.data() + (sq_pi_ & ((1u << kLogSqBbs) - 1)) * kSendWqeBbBytes;
    std::memset(w, 0, kSendWqeBbBytes);
    CtrlSeg c{};
    c.set(WqeOpcode::kSend, sq_pi_, qpn_, claimed_ds, kCtrlCqUpdate);
    std::memcpy(w, &c, 16);
    CtrlSeg rung = c;
    rung.set(WqeOpcode::kSend, sq_pi_, qpn_, 1, kCtrlCqUpdate);  // the doorbell says: one block
    ++sq_pi_;
    device_.mmio_write(uar_page_offset(0) + bfreg_offset(1), &rung, kDoorbellBytes);
  }

  void post_recv(uint32_t len, uint32_t offset = 0) {
    using namespace hwif;
    DataSeg d{};
    d.byte_count = len;
    d.lkey = key_;
    d.addr = buf_addr() + offset;
    std::memcpy(rq_.data() + (rq_pi_ & ((1u << kLogRq) - 1)) * 16, &d, 16);
    ++rq_pi_;
    qp_db_.rq_counter = rq_pi_;
  }

  // A request from the peer to this device's QP.
  fabric::PacketFields request(fabric::BthOpcode op, uint32_t psn) const {
    fabric::PacketFields f;
    f.dlid = Lid(device_.lid());
    f.slid = Lid(kPeerLid);
    f.opcode = op;
    f.dest_qp = Qpn(qpn_);
    f.psn = Psn(psn);
    f.ack_req = true;
    f.pkey = pkey_;
    if (peer_gid_) f.grh = fabric::GrhFields{0, 0, 64, peer_gid_->raw, device_.config().port.gids[0].raw};
    return f;
  }

  void inject(const fabric::PacketFields& f, std::span<const uint8_t> payload = {}) {
    std::array<uint8_t, fabric::kMaxPacketBytes> bytes{};
    const size_t n = fabric::serialize(f, payload, bytes);
    device_.receive(std::span<const uint8_t>(bytes.data(), n));
  }

  // Packets the device sent since the last call.
  std::vector<Captured> take_sent() { return std::exchange(sent_, {}); }

  // CQEs written since the last call: (opcode, syndrome or 0, wqe_counter).
  struct CqeSeen {
    hwif::CqeOpcode opcode;
    uint8_t syndrome;
    uint16_t wqe_counter;
    uint32_t byte_cnt;
  };
  std::vector<CqeSeen> take_cqes() {
    std::vector<CqeSeen> out;
    const uint32_t n = 1u << kLogCq;
    for (;;) {
      const uint8_t* e = cq_.data() + (cq_ci_ & (n - 1)) * 64;
      hwif::Cqe64 c;
      std::memcpy(&c, e, 64);
      if (c.opcode() == hwif::CqeOpcode::kInvalid || c.owner() != ((cq_ci_ >> kLogCq) & 1)) break;
      hwif::ErrCqe64 er;
      std::memcpy(&er, e, 64);
      const bool err = c.opcode() == hwif::CqeOpcode::kReqErr || c.opcode() == hwif::CqeOpcode::kRespErr;
      out.push_back({c.opcode(), err ? er.syndrome : uint8_t{0}, c.wqe_counter.get(), c.byte_cnt.get()});
      ++cq_ci_;
      cq_db_.set_ci = cq_ci_ & 0xffffff;
    }
    return out;
  }

  // EngineClock
  Picoseconds now() override { return now_; }
  void request_wakeup(Picoseconds at) override { wakeups_.push_back(at); }
  // Moves time forward and runs the device's timers.
  void advance(Picoseconds d) {
    now_ += d;
    device_.on_timer(now_);
  }

  // PacketPort
  void transmit(std::span<const uint8_t> packet) override {
    Captured c;
    std::span<const uint8_t> payload;
    if (fabric::parse(packet, c.f, payload) == fabric::ParseStatus::kOk) {
      c.payload.assign(payload.begin(), payload.end());
      sent_.push_back(std::move(c));
    }
  }

 private:
  pcie::Counters counters_;
  hca::Device device_;
  hwif::QpType type_;
  std::vector<uint8_t> buf_, sq_, rq_, cq_, eq_;
  uint32_t eq_ci_ = 0;
  alignas(64) hwif::QpDbRec qp_db_{};
  alignas(64) hwif::CqDbRec cq_db_{};
  uint32_t pdn_ = 0, key_ = 0, cqn_ = 0, qpn_ = 0;
  std::optional<hwif::Gid> peer_gid_;
  uint16_t pkey_index_ = 0;
  uint16_t pkey_ = 0xffff;  // the default partition's full member (IBA 10.9.1.2)
  uint16_t sq_pi_ = 0, rq_pi_ = 0;
  uint32_t cq_ci_ = 0;
  Picoseconds now_{0};
  std::vector<Picoseconds> wakeups_;
  std::vector<Captured> sent_;
};

}  // namespace softhca::test
