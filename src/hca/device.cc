// Device entry points: construction, command dispatch, BAR register decode, timers, packet intake.
#include "hca/device.h"

#include <cerrno>
#include <bit>
#include <cstring>
#include <type_traits>

#include "hca/completer.h"
#include "hca/send_pipeline.h"
#include "hca/transport/requester.h"
#include "hca/transport/responder.h"
#include "hca/transport/wire.h"
#include "hwif/uar.h"

namespace softhca::hca {

using namespace hwif;

namespace {
// Heap of a region a host's processes share (default_region_bytes): address space, used as
// touched. 4 GiB holds max_qp (65536) QPs with small queues (about 35 KiB each: the QP, a 1 KiB
// shadow ring and 16 SendRecords) with room left for the keys, CQs and deeper queues; a QP at
// max_qp_wr with one-block WQEs takes 33 MiB (16384 blocks: 1 MiB of shadow ring, 17.5 MiB of
// SendRecords rounded to 32).
constexpr uint64_t kSharedHeapBytes = uint64_t{4} << 30;
// Heap of a process's own device (private_region_bytes; sim mode, the timing model): 64 GiB of
// address space (MAP_NORESERVE, so not committed), room for tens of thousands of deep QPs; their
// records use memory only as their WQEs touch them.
constexpr uint64_t kPrivateHeapBytes = uint64_t{1} << 36;
}  // namespace

Device::Device(const DeviceConfig& config, DeviceRegion region, RegionInit init, pcie::TlpSink& tlp_sink,
               PacketPort& port, EngineClock& clock, pcie::HostBridge& bridge)
    : Device(config, PrivateRegion{}, region, init, tlp_sink, port, clock, &bridge) {}

Device::Device(const DeviceConfig& config, pcie::TlpSink& tlp_sink, PacketPort& port, EngineClock& clock)
    : Device(config, PrivateRegion(private_region_bytes(config)), DeviceRegion{}, RegionInit::kFormat, tlp_sink,
             port, clock, nullptr) {}

Device::Device(const DeviceConfig& config, PrivateRegion owned, DeviceRegion region, RegionInit init,
               pcie::TlpSink& tlp_sink, PacketPort& port, EngineClock& clock, pcie::HostBridge* bridge)
    : owned_region_(std::move(owned)),
      config_(config),
      dma_(tlp_sink, config_.pcie, bridge != nullptr ? *bridge : identity_bridge_),
      port_(port),
      clock_(clock),
      region_(owned_region_.region().base != nullptr ? owned_region_.region() : region),
      state_(open_region(region_, init, config_)),
      heap_(static_cast<uint8_t*>(region_.base), state_.heap),
      stats_(&state_.stats[0]),
      pds_(heap_, state_.pds),
      mkeys_(heap_, state_.mkeys),
      eqs_(heap_, state_.eqs),
      cqs_(heap_, state_.cqs),
      srqs_(heap_, state_.srqs),
      qps_(heap_, state_.qps, ObjectTable<QueuePair>::Reuse::kAfterFresh),
      xrcds_(heap_, state_.xrcds),
      dms_(heap_, state_.dm.table) {
  dma_.set_device_memory({heap_.at<uint8_t>(state_.dm.window), state_.dm.bytes});
  dma_.defer_counts(true);  // flushed by end_entry(): every DMA happens inside an entry point
}

uint64_t Device::min_region_bytes(const DeviceConfig& config) {
  return region_layout_bytes(config) + kMinHeapBytes;
}

uint64_t Device::default_region_bytes(const DeviceConfig& config) {
  return region_layout_bytes(config) + kSharedHeapBytes;
}

uint64_t Device::private_region_bytes(const DeviceConfig& config) {
  return region_layout_bytes(config) + kPrivateHeapBytes;
}

Device::ObjectCounts Device::object_counts() const {
  return ObjectCounts{pds_.live(), mkeys_.live(), eqs_.live(), cqs_.live(), srqs_.live(), qps_.live(), dms_.live()};
}

// ---- BAR register decode ----------------------------------------------------------------------

void Device::mmio_write(uint64_t bar_offset, const void* data, size_t len) {
  // Registers of one UAR page: the CQ arm doorbell, the EQ doorbell and the four bfregs (doorbell
  // + BlueFlame buffers).
  static constexpr RegisterHandler kUarRegisters[] = {
      {kCqDoorbellOffset, kDoorbellBytes, &Device::on_cq_arm},
      {kEqDoorbellOffset, kDoorbellBytes, &Device::on_eq_doorbell},
      {bfreg_offset(0), kBfRegBytes, &Device::on_bfreg_write},
      {bfreg_offset(1), kBfRegBytes, &Device::on_bfreg_write},
      {bfreg_offset(2), kBfRegBytes, &Device::on_bfreg_write},
      {bfreg_offset(3), kBfRegBytes, &Device::on_bfreg_write},
  };
  if (bar_offset >= kDeviceMemoryBarOffset) {  // stores into device memory: no work, no DMA
    const std::span<uint8_t> to = dm_window(bar_offset - kDeviceMemoryBarOffset, len);
    if (!to.empty()) std::memcpy(to.data(), data, len);
    return;
  }
  if (bar_offset < kInitSegBytes) return;  // the initialisation segment takes no data-path writes
  const uint64_t page = (bar_offset - kInitSegBytes) / kUarPageBytes;
  const uint64_t in_page = (bar_offset - kInitSegBytes) % kUarPageBytes;
  if (page >= config_.caps.num_uars) return;
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (const RegisterHandler& r : kUarRegisters) {
    if (in_page < r.offset || in_page + len > r.offset + r.size) continue;
    (this->*r.handle)(static_cast<uint32_t>(page), in_page - r.offset, bytes, len);
    return end_entry();
  }
}

void Device::mmio_read(uint64_t bar_offset, void* dst, size_t len) {
  const std::span<uint8_t> from =
      bar_offset >= kDeviceMemoryBarOffset ? dm_window(bar_offset - kDeviceMemoryBarOffset, len) : std::span<uint8_t>{};
  if (from.empty()) return MmioTarget::mmio_read(bar_offset, dst, len);  // nothing readable there
  std::memcpy(dst, from.data(), len);
}

void Device::on_bfreg_write(uint32_t, uint64_t, const uint8_t* data, size_t len) {
  if (len < kDoorbellBytes) return;
  const auto ctrl_head = load_as<std::array<Be32, 2>>(data);
  const uint32_t qpn = ctrl_head[1].get() >> 8;
  QueuePair* qp = qps_.find(qpn);
  if (qp == nullptr || qp->type == QpType::kXrcTgt) return;  // a TGT QP has no send queue
  const QpScope scope(*this, *qp);
  SendPipeline pipeline(*this, *qp);
  if (len != kDoorbellBytes && (len % kWriteCombineBytes != 0 || len > kBfBufBytes)) return;  // torn write
  if (len == kDoorbellBytes) {
    // The doorbell carries the first 8 bytes of the last WQE's control segment.
    const auto index = static_cast<uint16_t>(ctrl_head[0].get() >> 8);
    const uint32_t ds = ctrl_head[1].get() & 0x3f;
    ++counters(*qp).doorbells;
    pipeline.on_doorbell(static_cast<uint16_t>(index + wqe_bbs(ds)));
  } else {
    ++counters(*qp).blueflame_writes;
    pipeline.on_blueflame(std::span<const uint8_t>(data, len));
  }
}

void Device::on_cq_arm(uint32_t, uint64_t, const uint8_t* data, size_t len) {
  if (len != kDoorbellBytes) return;
  const auto words = load_as<std::array<Be32, 2>>(data);
  CompletionQueue* cq = cqs_.find(words[1].get() & 0xffffff);
  if (cq == nullptr) return;
  const uint32_t cqn = words[1].get() & 0xffffff;
  Completer(*this).arm(*cq, cqn, (words[0].get() & kCqArmSolicited) != 0, words[0].get() & kCqIndexMask);
}

// ---- timers -----------------------------------------------------------------------------------

void Device::schedule(QueuePair& qp, Picoseconds deadline, bool rnr) {
  qp.req.deadline = deadline;
  qp.req.rnr_wait = rnr;
  if (deadline < wakeup_requested_) {
    wakeup_requested_ = deadline;
    clock_.request_wakeup(deadline);
  }
}

void Device::schedule_cq(CompletionQueue& cq, Picoseconds deadline) {
  cq.mod_deadline = deadline;
  if (deadline < wakeup_requested_) {
    wakeup_requested_ = deadline;
    clock_.request_wakeup(deadline);
  }
}

void Device::cancel_timer(QueuePair& qp) {
  qp.req.deadline = Picoseconds(-1);
  qp.req.rnr_wait = false;
}

void Device::end_entry() {
  drain_loopback();
  if (!fatal_qps_.empty()) {
    run_deferred_fatal();
    drain_loopback();
  }
  dma_.flush_counts();
  now_valid_ = false;
}

Picoseconds Device::now() {
  if (!now_valid_) {
    now_ = clock_.now();
    now_valid_ = true;
  }
  return now_;
}

void Device::on_timer(Picoseconds now) {
  now_ = now;
  now_valid_ = true;
  // One clock may serve several devices: whoever's wake-up this is, every device runs what is due
  // and asks again for what is ahead.
  wakeup_requested_ = Picoseconds::max();
  qps_.for_each([&](uint32_t, QueuePair& qp) {
    if (qp.req.deadline.count() < 0 || qp.req.deadline > now) return;
    const bool rnr = qp.req.rnr_wait;
    cancel_timer(qp);
    const QpScope scope(*this, qp);
    Requester(*this, qp).on_timer(rnr);
  });
  // CQ moderation periods that ran out: their events go now.
  cqs_.for_each([&](uint32_t cqn, CompletionQueue& cq) {
    if (cq.mod_deadline.count() >= 0 && cq.mod_deadline <= now) Completer(*this).moderation_expired(cq, cqn);
  });
  // Ask again for the deadlines still ahead (timers re-armed above included).
  qps_.for_each([&](uint32_t, QueuePair& qp) {
    if (qp.req.deadline.count() >= 0 && qp.req.deadline < wakeup_requested_) {
      wakeup_requested_ = qp.req.deadline;
    }
  });
  cqs_.for_each([&](uint32_t, CompletionQueue& cq) {
    if (cq.mod_deadline.count() >= 0 && cq.mod_deadline < wakeup_requested_) wakeup_requested_ = cq.mod_deadline;
  });
  if (wakeup_requested_ != Picoseconds::max()) clock_.request_wakeup(wakeup_requested_);
  end_entry();
}

// ---- packets ----------------------------------------------------------------------------------

std::optional<DropReason> Device::refuses(const QueuePair& qp, fabric::BthOpcode op, uint16_t pkey) const {
  const QpState s = qp.state();
  if (s == QpState::kReset || s == QpState::kInit || s == QpState::kErr) return DropReason::kUnknownQp;
  if (!matches_transport(op, qp.type)) return DropReason::kWrongTransport;
  if (!pkeys_match(pkey, config_.port.pkeys[qp.attr.pkey_index])) return DropReason::kBadPkey;
  return std::nullopt;
}

void Device::count_sent(const fabric::PacketFields& f, size_t wire_bytes) {
  count_sent(tx_qp_, wire_bytes);
  if (tx_qp_ != nullptr && f.aeth && !fabric::is_ack(f.aeth->syndrome)) ++counters(*tx_qp_).naks_sent;
}

void Device::transmit(const fabric::PacketFields& f, std::span<const uint8_t> payload, bool in_place) {
  if (port_down()) return stats_->drop(DropReason::kPortDown);  // a link that is down carries nothing
  if (loops_back(f)) {
    // What serialize() would have written, without writing it: same counters, same refusals.
    const size_t n = wire_size(f, payload.size());
    if (n == 0) return;
    count_sent(f, n);
    if (merge_looped_ack(f, n)) return;
    LoopedPacket& p = loop_tail();
    p.fields = f;
    p.packets = 1;
    p.wire_bytes = static_cast<uint32_t>(n);
    p.payload_bytes = static_cast<uint32_t>(payload.size());
    p.data = payload.data();
    if (!in_place && !payload.empty() && payload.data() != p.payload.data()) {
      std::memcpy(p.payload.data(), payload.data(), payload.size());
      p.data = p.payload.data();
    }
    ++loop_count_;
    return;
  }
  const size_t n = encode(f, payload);
  if (n == 0) return;
  count_sent(f, n);
  port_.transmit(std::span<const uint8_t>(tx_buf_.data(), n));
}

// ---- internal loopback ------------------------------------------------------------------------

uint8_t* Device::payload_buffer_for(const fabric::PacketFields& f) {
  return loops_back(f) ? loop_tail().payload.data() : payload_buf_.data();
}

Device::LoopedPacket& Device::loop_tail() {
  if (loop_count_ == loop_ring_.size()) {
    // Full (or empty at first use): double, keeping the queue's order; slots move as pointers.
    std::vector<std::unique_ptr<LoopedPacket>> grown(loop_ring_.empty() ? 64 : loop_ring_.size() * 2);
    for (size_t i = 0; i < loop_count_; ++i) grown[i] = std::move(loop_ring_[(loop_head_ + i) & (loop_ring_.size() - 1)]);
    for (size_t i = loop_count_; i < grown.size(); ++i) grown[i] = std::make_unique<LoopedPacket>();
    loop_ring_ = std::move(grown);
    loop_head_ = 0;
  }
  return *loop_ring_[(loop_head_ + loop_count_) & (loop_ring_.size() - 1)];  // sizes are powers of 2
}

namespace {
bool is_positive_ack(const fabric::PacketFields& f) {
  return f.opcode == fabric::BthOpcode::kRcAcknowledge && f.aeth && fabric::is_ack(f.aeth->syndrome);
}
bool same_route(const fabric::PacketFields& a, const fabric::PacketFields& b) {
  return a.dest_qp == b.dest_qp && a.dlid == b.dlid && a.slid == b.slid && a.pkey == b.pkey && a.sl == b.sl && a.vl == b.vl &&
         a.has_lrh == b.has_lrh && a.grh == b.grh;
}
}  // namespace

Device::LoopedPacket* Device::ack_at_loop_tail() {
  // The slot being delivered stays counted until it is done (drain_loopback): never merged into.
  const size_t delivering = draining_ ? 1 : 0;
  if (loop_count_ <= delivering) return nullptr;
  LoopedPacket& tail = *loop_ring_[(loop_head_ + loop_count_ - 1) & (loop_ring_.size() - 1)];
  return is_positive_ack(tail.fields) ? &tail : nullptr;
}

void Device::merge_into(LoopedPacket& ack, Psn psn, fabric::AethFields aeth) {
  ack.fields.psn = psn;
  ack.fields.aeth = aeth;
  ++ack.packets;
}

bool Device::merge_looped_ack(const fabric::PacketFields& f, size_t wire_bytes) {
  if (!is_positive_ack(f)) return false;
  LoopedPacket* tail = ack_at_loop_tail();
  if (tail == nullptr || tail->wire_bytes != wire_bytes || !same_route(tail->fields, f)) return false;
  merge_into(*tail, f.psn, *f.aeth);
  return true;
}

bool Device::merge_ack_to_peer(const QueuePair& qp, Psn psn, fabric::AethFields aeth) {
  const AddressVector& av = qp.attr.av;
  if (!internal_loopback_ || av.is_global || !fabric::is_ack(aeth.syndrome)) return false;
  LoopedPacket* tail = ack_at_loop_tail();
  if (tail == nullptr) return false;
  // The fields route_to_peer() would give this ACK, compared where they lie.
  const fabric::PacketFields& t = tail->fields;
  if (t.grh || !t.has_lrh || t.vl != 0 || t.dest_qp != Qpn(qp.attr.dest_qpn) || t.dlid != Lid(av.dlid) ||
      t.slid != Lid(lid()) || t.sl != av.sl || t.pkey != config_.port.pkeys[qp.attr.pkey_index])
    return false;
  count_sent(tx_qp_, tail->wire_bytes);
  merge_into(*tail, psn, aeth);
  return true;
}

std::optional<uint32_t> Device::next_looped_ack(const fabric::PacketFields& current) const {
  if (!draining_ || loop_count_ < 2 || &current != &loop_ring_[loop_head_]->fields) return std::nullopt;
  const fabric::PacketFields& n = loop_ring_[(loop_head_ + 1) & (loop_ring_.size() - 1)]->fields;
  if (n.opcode != fabric::BthOpcode::kRcAcknowledge || !n.aeth || !fabric::is_ack(n.aeth->syndrome)) return std::nullopt;
  if (n.dest_qp != current.dest_qp || n.dlid != current.dlid || n.pkey != current.pkey || n.has_lrh != current.has_lrh ||
      n.grh != current.grh)
    return std::nullopt;
  return n.psn.value();
}

// Delivers looped-back packets until none is left; packets sent meanwhile (ACKs, READ responses)
// join the queue and are delivered by the same loop. Re-entry (a delivery that ends in an entry
// point) returns at once: the outer loop carries on.
void Device::drain_loopback() {
  if (draining_ || loop_count_ == 0) return;
  draining_ = true;
  while (loop_count_ > 0) {
    // The slot stays counted while it is delivered, so a growth cannot hand it out again.
    const LoopedPacket& p = *loop_ring_[loop_head_];
    stats_->packets_received += p.packets;
    stats_->bytes_received += uint64_t{p.wire_bytes} * p.packets;
    accept(p.fields, std::span<const uint8_t>(p.data, p.payload_bytes), p.wire_bytes, p.packets);
    loop_head_ = (loop_head_ + 1) & (loop_ring_.size() - 1);
    --loop_count_;
  }
  draining_ = false;
}

void Device::route_to_peer(const QueuePair& qp, fabric::PacketFields& f) const {
  const AddressVector& av = qp.attr.av;
  f.sl = av.sl;
  f.slid = Lid(lid());
  f.dlid = Lid(av.dlid);
  f.pkey = config_.port.pkeys[qp.attr.pkey_index];
  f.dest_qp = Qpn(qp.attr.dest_qpn);
  f.grh.reset();
  if (av.is_global) {
    f.grh = fabric::GrhFields{av.traffic_class, av.flow_label, av.hop_limit,
                              config_.port.gids[av.sgid_index % kGidTableLen].raw, av.dgid.raw};
  }
}

std::optional<uint32_t> Device::read_dbrec_be32(uint64_t addr, bool counted) {
  const std::optional<uint32_t> raw = dma_.read_dbrec(addr, pcie::TlpCause::kDbRecRead, counted);
  if (!raw) {
    fault();
    return std::nullopt;
  }
  return std::endian::native == std::endian::little ? __builtin_bswap32(*raw) : *raw;
}

void Device::receive(std::span<const uint8_t> packet) {
  ++stats_->packets_received;
  stats_->bytes_received += packet.size();
  fabric::PacketFields f;
  std::span<const uint8_t> payload;
  if (port_down()) {
    stats_->drop(DropReason::kPortDown);
  } else if (!decode(packet, f, payload)) {
    stats_->drop(DropReason::kMalformed);
  } else {
    accept(f, payload, packet.size());
  }
  end_entry();
}

void Device::accept(const fabric::PacketFields& f, std::span<const uint8_t> payload, size_t wire_bytes,
                    uint32_t packets) {
  const auto drop = [&](DropReason why) {
    for (uint32_t i = 0; i < packets; ++i) stats_->drop(why);
  };
  if (!addressed_here(f)) {
    // A multicast LID or GID is never the port's own: looked at only off the unicast path.
    if (is_multicast(f)) {
      for (uint32_t i = 0; i < packets; ++i) accept_multicast(f, payload, wire_bytes);
      return;
    }
    return drop(DropReason::kWrongLid);  // Ethernet: not our GID
  }
  if (f.dest_qp.value() == kGsiQpn) return accept_gsi(f, payload, wire_bytes, packets);
  QueuePair* qp = qps_.find(f.dest_qp.value());
  if (qp == nullptr) return drop(DropReason::kUnknownQp);
  QpCounters& c = counters(*qp);
  if (const std::optional<DropReason> why = refuses(*qp, f.opcode, f.pkey)) {
    c.packets_dropped += packets;
    return drop(*why);
  }
  if (!from_peer(*qp, f)) {
    c.packets_dropped += packets;
    return drop(DropReason::kBadSource);
  }
  c.packets_received += packets;
  c.bytes_received += wire_bytes * packets;
  // The first packet an RC or UC QP takes in RTR establishes the connection (IBA 11.6.3.1,
  // Communication Established): once per stay in RTR.
  if (qp->state() == QpState::kRtr && qp->type != QpType::kUd && !qp->comm_est_raised) {
    qp->comm_est_raised = true;
    raise_qp_event(*qp, kEqeTypeCommEst);
  }
  const QpScope scope(*this, *qp);  // its ACKs, responses and the sends an ACK lets out count for it
  if (is_response(f.opcode)) {
    if (f.aeth && !fabric::is_ack(f.aeth->syndrome)) ++c.naks_received;
    Requester(*this, *qp).on_response(f, payload);
  } else {
    Responder(*this, *qp).on_request(f, payload);
  }
}

// ---- errors -----------------------------------------------------------------------------------

void Device::send_queue_error(QueuePair& qp) {
  if (is_reliable(qp.type)) return enter_error(qp);
  if (qp.state() == QpState::kErr) return;
  qp.attr.state = QpState::kSqe;
  qp.attr.sq_draining = false;
  qp.sqd_notify = false;
  SendPipeline(*this, qp).flush();
}

void Device::enter_error(QueuePair& qp) {
  qp.attr.state = QpState::kErr;
  qp.attr.sq_draining = false;
  qp.sqd_notify = false;
  cancel_timer(qp);
  if (qp.type != QpType::kXrcTgt) SendPipeline(*this, qp).flush();  // a TGT QP has no send queue
  Responder(*this, qp).flush();
  // A QP on an SRQ takes no more of its WQEs (IBA 10.2.9.5 / 11.6.3.1, Last WQE Reached).
  if (qp.srqn != kNoSrq) raise_qp_event(qp, kEqeTypeSrqLastWqe);
}

}  // namespace softhca::hca
