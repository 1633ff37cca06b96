#include "fabric/fault_injector.h"

#include <algorithm>

#include "fabric/packet/headers.h"
#include "fabric/packet/packet.h"
#include "fabric/packet/roce.h"

namespace softhca::fabric {

namespace {
// BTH byte 4 is resv8a, which the ICRC masks (IBA 7.8.1): a flip there would go unnoticed.
constexpr size_t kBthResv8aOffset = 4;
// LNH 3: an IBA global header follows the LRH (IBA 7.7.6).
constexpr uint8_t kLnhGlobal = 3;
}  // namespace

FaultCounters& FaultCounters::operator+=(const FaultCounters& o) {
  offered += o.offered;
  lost += o.lost;
  duplicated += o.duplicated;
  reordered += o.reordered;
  corrupted += o.corrupted;
  delayed += o.delayed;
  return *this;
}

void for_each_counter(const FaultCounters& c, const std::function<void(std::string_view, uint64_t)>& fn) {
  fn("offered", c.offered);
  fn("lost", c.lost);
  fn("duplicated", c.duplicated);
  fn("reordered", c.reordered);
  fn("corrupted", c.corrupted);
  fn("delayed", c.delayed);
}

FaultInjector::FaultInjector(const FaultSpec& spec, WireFormat format, std::string_view component)
    : spec_(spec),
      format_(format),
      decide_(sim::RandomStream::for_component(spec.seed, component)),
      bytes_(sim::RandomStream::for_component(spec.seed ^ 0x636f7272757074ULL, component)) {}  // "corrupt"

void FaultInjector::send(std::span<const uint8_t> packet, Picoseconds now, const Emit& emit) {
  ++counters_.offered;
  // Every packet takes exactly four draws, so one packet's fate never shifts the next one's.
  const bool lose = decide_.chance(spec_.loss);
  const bool damage = decide_.chance(spec_.corrupt);
  const bool twice = decide_.chance(spec_.dup);
  const bool hold = decide_.chance(spec_.reorder);
  if (!aside_.empty() && aside_due_ <= now) release_aside(now, emit);
  if (lose) {
    ++counters_.lost;
    return;
  }
  scratch_.assign(packet.begin(), packet.end());
  if (damage) corrupt(scratch_);
  // The copy is of the packet as sent: each corruption spoils exactly one arrival.
  if (twice) ++counters_.duplicated;
  if (hold && aside_.empty()) {
    ++counters_.reordered;
    aside_due_ = now + kReorderHold;
    aside_.push_back(Held{aside_due_, scratch_});
    if (twice) aside_.push_back(Held{aside_due_, std::vector<uint8_t>(packet.begin(), packet.end())});
    return;
  }
  out(scratch_, now, emit);
  if (twice) out(packet, now, emit);
  release_aside(now, emit);  // the packet held back arrives behind this one
}

void FaultInjector::release_aside(Picoseconds now, const Emit& emit) {
  for (const Held& h : aside_) out(h.bytes, now, emit);
  aside_.clear();
}

void FaultInjector::out(std::span<const uint8_t> bytes, Picoseconds now, const Emit& emit) {
  if (spec_.delay.count() <= 0) return emit(bytes);
  ++counters_.delayed;
  delayed_.push_back(Held{now + spec_.delay, std::vector<uint8_t>(bytes.begin(), bytes.end())});
}

void FaultInjector::release(Picoseconds now, const Emit& emit) {
  if (!aside_.empty() && aside_due_ <= now) release_aside(now, emit);
  while (!delayed_.empty() && delayed_.front().due <= now) {
    const Held h = std::move(delayed_.front());
    delayed_.pop_front();
    emit(h.bytes);
  }
}

Picoseconds FaultInjector::next_due() const {
  Picoseconds due = Picoseconds::max();
  if (!aside_.empty()) due = aside_due_;
  if (!delayed_.empty()) due = std::min(due, delayed_.front().due);
  return due;
}

void FaultInjector::corrupt(std::span<uint8_t> p) {
  size_t bth = 0;
  size_t trailer = 0;  // CRC bytes at the end, not covered by the ICRC
  if (format_ == WireFormat::kNativeIb) {
    if (p.size() < kLrhBytes) return;
    bth = kLrhBytes + ((p[1] & 0x3) == kLnhGlobal ? kGrhBytes : 0);
    trailer = kIcrcBytes + kVcrcBytes;
  } else {
    bth = kRoceEncapBytes;
    trailer = kIcrcBytes;
  }
  if (p.size() < bth + kBthBytes + trailer) return;  // not a packet the receiver would parse anyway
  const size_t covered = p.size() - trailer - bth - 1;  // less resv8a
  size_t off = bth + static_cast<size_t>(bytes_.below(covered));
  if (off >= bth + kBthResv8aOffset) ++off;
  p[off] ^= static_cast<uint8_t>(bytes_.between(1, 255));
  ++counters_.corrupted;
  if (format_ == WireFormat::kNativeIb) {
    // The next hop's link CRC is computed afresh over the damaged bytes (IBA 7.8.2).
    const size_t vcrc = p.size() - kVcrcBytes;
    const uint16_t v = compute_vcrc(p.first(vcrc));
    p[vcrc] = static_cast<uint8_t>(v & 0xff);  // stored little-endian, as serialize() does
    p[vcrc + 1] = static_cast<uint8_t>(v >> 8);
  }
}

}  // namespace softhca::fabric
