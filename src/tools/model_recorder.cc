#include "tools/model_recorder.h"

#include <stdexcept>
#include <utility>

#include "fabric/packet/headers.h"
#include "fabric/packet/opcode.h"

namespace softhca::tools {

namespace {

using pcie::TlpCause;
using pcie::TlpType;
using sim::kNoPool;
using sim::kNoStep;
using sim::Phase;
using sim::Step;
using sim::StepKind;

constexpr uint8_t kLnhGlobal = 0x3;  // LRH LNH: a GRH follows (IBA 7.7.3)

// What the recorder needs from a packet's headers: destination LID and the BTH opcode's meaning.
struct PacketView {
  bool valid = false;
  uint16_t dlid = 0;
  fabric::OpcodeInfo op;
};

PacketView view(std::span<const uint8_t> p) {
  PacketView v;
  if (p.size() < fabric::kLrhBytes + fabric::kBthBytes) return v;
  v.dlid = static_cast<uint16_t>((p[2] << 8) | p[3]);
  const size_t bth = fabric::kLrhBytes + ((p[1] & 0x3) == kLnhGlobal ? fabric::kGrhBytes : 0);
  if (p.size() < bth + fabric::kBthBytes) return v;
  v.op = fabric::opcode_info(p[bth]);
  v.valid = v.op.valid;
  return v;
}

bool is_response(const fabric::OpcodeInfo& op) {
  return op.kind == fabric::OpKind::kAcknowledge || op.kind == fabric::OpKind::kRdmaReadResponse ||
         op.kind == fabric::OpKind::kAtomicAcknowledge;
}

// The device of a LID: device i has LID i + 1 (hca::default_device_config).
uint32_t device_of_lid(uint16_t lid) { return lid == 0 ? 0 : static_cast<uint32_t>(lid - 1); }

sim::TlpClass class_of(TlpType t) {
  switch (t) {
    case TlpType::kMWr: return sim::TlpClass::kPosted;
    case TlpType::kMRd: return sim::TlpClass::kNonPosted;
    case TlpType::kCplD: return sim::TlpClass::kCompletion;
  }
  return sim::TlpClass::kPosted;
}

}  // namespace

ChainRecorder::ChainRecorder(std::vector<uint32_t> tag_pools, uint32_t devices)
    : tag_pools_(std::move(tag_pools)),
      devices_(devices != 0 ? devices : tag_pools_.size()),
      in_flight_(devices_.size()) {}

ChainRecorder::Device& ChainRecorder::device(uint32_t d) {
  if (d >= devices_.size()) throw std::out_of_range("model recorder: an event of a device outside the model's hosts");
  return devices_[d];
}

void ChainRecorder::begin(sim::ChainBuilder& out, const PostInfo& info) {
  out.clear();
  out_ = &out;
  info_ = info;
  cqes_ = 0;
  peer_cqe_ = kNoStep;
  peer_write_last_ = kNoStep;
  arrival_tagged_ = false;
  doorbells_ = 0;
  blueflame_lines_ = 0;
  for (Device& d : devices_) {
    d.send = SendContext{};
    d.rx = RxContext{};
    d.read = ReadState{};
    d.rx_packet = kNoStep;
    d.rx_writes.clear();
  }
  for (auto& q : in_flight_) q.clear();
  Step cpu;
  cpu.kind = StepKind::kCpu;
  cpu.phase = Phase::kCpuBuild;
  cpu.host = host_of(info.requester);
  cpu.index = info.thread;
  cpu.cost = info.cpu_cost;
  root_ = out.add(cpu);
  device(info.requester);
}

uint32_t ChainRecorder::end() {
  if (out_ == nullptr) return 0;
  for (Device& d : devices_) {
    close_read(d);
    close_rx_writes(d);
  }
  for (const auto& q : in_flight_) {
    if (!q.empty()) throw std::logic_error("model recorder: a packet was sent but never received in its post");
  }
  const uint32_t arrival = peer_cqe_ != kNoStep ? peer_cqe_ : peer_write_last_;
  if (info_.arrival_tag != 0 && arrival != kNoStep) {
    out_->at(arrival).tag = info_.arrival_tag;
    arrival_tagged_ = true;
  }
  out_ = nullptr;
  return cqes_;
}

uint32_t ChainRecorder::add_tlp(uint32_t d, const pcie::Tlp& tlp, Phase phase, uint32_t p0, uint32_t p1) {
  Step s;
  s.kind = StepKind::kTlp;
  s.phase = phase;
  s.host = host_of(d);
  s.dir = tlp.dir == pcie::Direction::kDownstream ? sim::LinkDir::kDown : sim::LinkDir::kUp;
  s.tlp_class = class_of(tlp.type);
  s.bytes = tlp.wire_bytes;
  s.payload_bytes = tlp.payload_bytes;
  return out_->add(s, p0, p1);
}

// The doorbell or BlueFlame write reaches the HCA's doorbell unit: the first device-side event
// after the MMIO TLPs triggers it.
uint32_t ChainRecorder::hand_doorbell_to_hca(Device& dev) {
  if (dev.send.mmio_last != kNoStep) {
    Step s;
    s.kind = StepKind::kHcaUnit;
    s.unit = sim::HcaUnit::kDoorbell;
    s.phase = Phase::kDoorbell;
    s.host = out_->at(dev.send.mmio_last).host;
    dev.send.trigger = out_->add(s, dev.send.mmio_last);
    dev.send.mmio_last = kNoStep;
  }
  return dev.send.trigger;
}

// WQE k is parsed once the completion holding its last byte has arrived (or, after BlueFlame,
// once the doorbell unit has it). It takes one of its QP's WQE slots until it is transmitted.
void ChainRecorder::start_wqe(Device& dev) {
  SendContext& sc = dev.send;
  uint32_t pred = sc.trigger;
  if (!sc.wqe_cplds.empty()) {
    const uint64_t per_wqe = sc.wqe_bytes / (info_.wqes == 0 ? 1 : info_.wqes);
    const uint64_t need = per_wqe * (sc.wqe_index + 1);
    pred = sc.wqe_cplds.back().second;
    for (const auto& [bytes, step] : sc.wqe_cplds) {
      if (bytes >= need) {
        pred = step;
        break;
      }
    }
  }
  Step s;
  s.kind = StepKind::kHcaUnit;
  s.unit = sim::HcaUnit::kWqe;
  s.phase = Phase::kWqeFetch;
  s.host = host_of(info_.requester);
  s.acquire_pool = info_.qp_slots;
  // A WQE executed while the device handles a response (it waited for max_rd_atomic or a fence)
  // also waits for that response.
  const uint32_t p1 = dev.rx.active ? dev.rx.tail : kNoStep;
  sc.wqe_step = out_->add(s, pred == kNoStep ? root_ : pred, p1);
  ++sc.wqe_index;
  sc.payload_last = kNoStep;
}

void ChainRecorder::close_mrd(Device& dev) {
  ReadState& r = dev.read;
  if (r.mrd == kNoStep) return;
  // The read's tag comes back with its last completion.
  const uint32_t releaser = r.last_cpld != kNoStep ? r.last_cpld : r.mrd;
  out_->at(releaser).release_pool = out_->at(r.mrd).acquire_pool;
  r.mrd = kNoStep;
  r.last_cpld = kNoStep;
}

void ChainRecorder::close_read(Device& dev) {
  close_mrd(dev);
  dev.read.open = false;
}

// The piece of a payload write is in once the bytes after it in the packet (the rest of the
// payload, ICRC and VCRC: W1) are still to come: it may start their serialization before the
// packet's result. Only writes waiting for the packet alone.
void ChainRecorder::close_rx_writes(Device& dev) {
  if (cut_through_ != nullptr && !dev.rx_writes.empty()) {
    constexpr uint64_t kTrailer = 4 + 2;  // ICRC, VCRC
    uint64_t total = 0;
    for (const auto& w : dev.rx_writes) total += w.second;
    uint64_t through = 0;
    for (const auto& [step, bytes] : dev.rx_writes) {
      through += bytes;
      Step& s = out_->at(step);
      if (s.preds[0] == dev.rx_packet && s.preds[1] == kNoStep) {
        s.lead = Picoseconds(0) - sim::ib_serialization(*cut_through_, total - through + kTrailer);
      }
    }
  }
  dev.rx_writes.clear();
  dev.rx_packet = kNoStep;
}

void ChainRecorder::on_read_tlp(uint32_t d, Device& dev, const pcie::Tlp& tlp, uint32_t pred, Phase phase) {
  ReadState& r = dev.read;
  if (tlp.type == TlpType::kMRd) {
    close_mrd(dev);
    // An MRd continuing the same transfer (the next MRRS piece) is issued with the first one.
    if (!(r.open && r.cause == tlp.cause && r.next_addr == tlp.address)) {
      close_read(dev);
      r.open = true;
      r.cplds = 0;
      r.cause = tlp.cause;
      r.pred = pred;
      r.phase = phase;
    }
    r.next_addr = tlp.address + tlp.read_bytes;
    r.mrd = add_tlp(d, tlp, r.phase, r.pred);
    out_->at(r.mrd).acquire_pool = tag_pools_.at(host_of(d));
    return;
  }
  // A CplD answers the last MRd; the root complex spaces one read's completions (P9).
  const uint32_t mrd = r.mrd != kNoStep ? r.mrd : pred;
  r.last_cpld = add_tlp(d, tlp, r.phase, mrd);
  out_->at(r.last_cpld).lead = completion_gap_ * r.cplds;
  ++r.cplds;
}

void ChainRecorder::on_tlp(uint64_t, uint32_t d, const pcie::Tlp& tlp) {
  if (out_ == nullptr) return;
  ++events_;
  Device& dev = device(d);
  const bool requester = d == info_.requester;

  // CPU -> device: the post's doorbell or BlueFlame lines (all wait for the CPU's post).
  if (tlp.cause == TlpCause::kDoorbell || tlp.cause == TlpCause::kBlueFlame || tlp.cause == TlpCause::kCqArm ||
      tlp.cause == TlpCause::kEqDoorbell) {
    dev.send.mmio_last = add_tlp(d, tlp, Phase::kDoorbell, root_);
    if (tlp.cause == TlpCause::kDoorbell) ++doorbells_;
    if (tlp.cause == TlpCause::kBlueFlame) ++blueflame_lines_;
    return;
  }
  if (tlp.type != TlpType::kCplD && dev.read.open && tlp.type != TlpType::kMRd) close_read(dev);

  // Requester send pipeline: WQE fetch and payload gather.
  if (requester && tlp.cause == TlpCause::kWqeRead) {
    const uint32_t trigger = hand_doorbell_to_hca(dev);
    on_read_tlp(d, dev, tlp, trigger == kNoStep ? root_ : trigger, Phase::kWqeFetch);
    if (tlp.type == TlpType::kCplD) {
      dev.send.wqe_bytes += tlp.payload_bytes;
      dev.send.wqe_cplds.emplace_back(dev.send.wqe_bytes, dev.read.last_cpld);
    }
    return;
  }
  if (requester && tlp.cause == TlpCause::kPayloadRead) {
    hand_doorbell_to_hca(dev);
    if (dev.send.wqe_step == kNoStep) start_wqe(dev);
    on_read_tlp(d, dev, tlp, dev.send.wqe_step, Phase::kPayloadFetch);
    if (tlp.type == TlpType::kCplD) {
      dev.send.payload_last = dev.read.last_cpld;
      if (dev.send.payload_first == kNoStep) dev.send.payload_first = dev.read.last_cpld;
    }
    return;
  }

  // Receive side: what the packet being handled makes the device do.
  RxContext& rx = dev.rx;
  const uint32_t cause_step = rx.cursor != kNoStep ? rx.cursor : root_;
  const Phase rx_phase = rx.response ? Phase::kAck : Phase::kRemoteWrite;
  switch (tlp.cause) {
    case TlpCause::kCqeWrite:
    case TlpCause::kEqeWrite:
    case TlpCause::kInterrupt: {
      Step unit;
      unit.kind = StepKind::kHcaUnit;
      unit.unit = sim::HcaUnit::kCompletion;
      unit.phase = Phase::kCqeWrite;
      unit.host = host_of(d);
      // A requester CQE with no response to wait for (UC, UD) follows the request's last packet.
      const bool after_send = requester && !rx.active && dev.send.packet_last != kNoStep;
      const uint32_t u = out_->add(unit, after_send ? dev.send.packet_last : rx.tail != kNoStep ? rx.tail : cause_step);
      const uint32_t w = add_tlp(d, tlp, Phase::kCqeWrite, u);
      if (tlp.cause == TlpCause::kCqeWrite && requester && info_.first_cqe_tag != 0) {
        out_->at(w).tag = info_.first_cqe_tag + cqes_;
        ++cqes_;
      }
      if (tlp.cause == TlpCause::kCqeWrite && !requester && peer_cqe_ == kNoStep) peer_cqe_ = w;
      rx.tail = w;
      return;
    }
    case TlpCause::kPayloadWrite: {
      rx.tail = add_tlp(d, tlp, rx_phase, cause_step, rx.prefetched);
      if (!requester) peer_write_last_ = rx.tail;
      if (dev.rx_packet != kNoStep) dev.rx_writes.emplace_back(rx.tail, tlp.payload_bytes);
      return;
    }
    case TlpCause::kAtomic:
      if (tlp.type == TlpType::kMWr) {
        rx.tail = add_tlp(d, tlp, Phase::kRemoteWrite, cause_step);
        return;
      }
      [[fallthrough]];
    default: {
      if (tlp.cause == TlpCause::kDbRecRead) rx.dbrec_read = true;
      if (rq_prefetch_ && tlp.cause == TlpCause::kRecvWqeRead && !rx.dbrec_read) {
        // Prefetched: read while the request was on its way (it waits for the post only).
        on_read_tlp(d, dev, tlp, root_, rx_phase);
        if (tlp.type == TlpType::kCplD) rx.prefetched = dev.read.last_cpld;
        return;
      }
      // Reads the receive side needs before it can go on (receive WQE, doorbell record, READ
      // response data, the atomic's old value): what follows waits for their completions.
      on_read_tlp(d, dev, tlp, cause_step, rx_phase);
      if (tlp.type == TlpType::kCplD) rx.cursor = rx.tail = dev.read.last_cpld;
      return;
    }
  }
}

uint32_t ChainRecorder::transmit(uint32_t d, uint32_t bytes, uint32_t dst, Phase phase, uint32_t p0, uint32_t p1) {
  Step pkt;
  pkt.kind = StepKind::kPacket;
  pkt.phase = phase;
  pkt.host = host_of(d);
  pkt.index = host_of(dst);
  pkt.bytes = bytes;
  const uint32_t t = out_->add(pkt, p0, p1);
  device(dst);
  in_flight_[dst].push_back(InFlight{t, phase});
  return t;
}

void ChainRecorder::on_packet(uint64_t, uint32_t d, runtime::PacketDirection dir, std::span<const uint8_t> packet) {
  if (out_ == nullptr) return;
  ++events_;
  Device& dev = device(d);
  const PacketView v = view(packet);
  const auto bytes = static_cast<uint32_t>(packet.size());
  if (dir == runtime::PacketDirection::kReceived) {
    close_read(dev);
    close_rx_writes(dev);
    if (in_flight_[d].empty()) throw std::logic_error("model recorder: a packet arrived that no device sent");
    const InFlight f = in_flight_[d].front();
    in_flight_[d].pop_front();
    // The packet step ends with the receive unit: the packet has been handled here.
    const uint32_t r = f.arrival;
    dev.rx = RxContext{true, v.valid && is_response(v.op), r, r};
    dev.rx_packet = r;
    return;
  }
  const uint32_t dst = v.valid ? device_of_lid(v.dlid) : d;
  const bool request = !(v.valid && is_response(v.op));
  if (d == info_.requester && request) {
    // The requester's send pipeline: the packet waits for its payload (or its WQE), and for the
    // packet before it.
    close_read(dev);
    hand_doorbell_to_hca(dev);
    if (dev.send.wqe_step == kNoStep) start_wqe(dev);
    // Packets leave in the order the pipeline makes them: the transmit unit serves them first
    // come first served, so no edge to the previous packet is needed.
    uint32_t data = dev.send.payload_last != kNoStep ? dev.send.payload_last : dev.send.wqe_step;
    uint32_t head = kNoStep;
    if (cut_through_ != nullptr && dev.send.payload_first != kNoStep && dev.send.payload_first != data) {
      // Cut-through: the head waits for the first completion; the tail must not leave before the
      // last one arrived, so the start waits for it less the packet's serialization.
      Step tail;
      tail.kind = StepKind::kJoin;
      tail.phase = Phase::kPayloadFetch;
      tail.host = host_of(d);
      tail.lead = Picoseconds(0) - sim::ib_serialization(*cut_through_, bytes);
      head = dev.send.payload_first;
      data = out_->add(tail, data);
    }
    const uint32_t t = transmit(d, bytes, dst, Phase::kWire, data, head);
    dev.send.payload_last = kNoStep;
    dev.send.payload_first = kNoStep;
    dev.send.packet_last = t;
    if (!v.valid || v.op.ends_message() || v.op.kind == fabric::OpKind::kRdmaReadRequest) {
      // The WQE has left: its slot is free once the transmit unit handled its last packet.
      out_->at(t).release_pool = info_.qp_slots;
      dev.send.wqe_step = kNoStep;
    }
    return;
  }
  // A reply (ACK, READ response, atomic ACK) or a responder's own packet: after what it answers.
  close_read(dev);
  const uint32_t after = dev.rx.tail != kNoStep ? dev.rx.tail : root_;
  transmit(d, bytes, dst, Phase::kAck, after, kNoStep);
}

}  // namespace softhca::tools
