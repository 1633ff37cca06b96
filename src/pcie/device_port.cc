#include "pcie/device_port.h"

#include "base/copy.h"

#include <atomic>
#include <bit>
#include <cstring>

#include "base/units.h"
#include "pcie/tlp_split.h"

namespace softhca::pcie {

namespace {
// The bridge of every device that lives inside one process; it has no state.
HostBridge& identity_bridge() {
  static IdentityBridge bridge;
  return bridge;
}

// Calls f(piece) for each piece of host memory the bridge resolves [addr, addr + len) to; false at
// the first address it cannot resolve.
template <class Map, class F>
bool for_each_mapped(Map&& map, uint64_t addr, size_t len, F&& f) {
  while (len > 0) {
    const std::span<uint8_t> piece = map(addr, len);
    if (piece.empty()) return false;
    const size_t n = piece.size() < len ? piece.size() : len;
    f(piece.first(n));
    addr += n;
    len -= n;
  }
  return true;
}
}  // namespace

DevicePort::DevicePort(TlpSink& sink, const PcieConfig& config) : DevicePort(sink, config, identity_bridge()) {}

void DevicePort::count_read_now(uint64_t host_addr, size_t len, TlpCause cause) {
  if (sink_.counts_only() && reads_cut_whole(config_)) {
    emit(mrd_run(cause, mrrs_.chunks(host_addr, len)));
    emit(cpld_run(cause, completion_.chunks(host_addr, len), len));
    return;
  }
  for_each_aligned_chunk(host_addr, len, config_.mrrs_bytes, [&](uint64_t a, uint64_t n) {
    sink_.on_tlp(Tlp{TlpType::kMRd, Direction::kUpstream, cause, a, 0, static_cast<uint32_t>(n),
                     config_.mrd_overhead_bytes});
    for_each_aligned_chunk(a, n, config_.completion_bytes, [&](uint64_t ca, uint64_t cn) {
      auto bytes = static_cast<uint32_t>(cn);
      sink_.on_tlp(Tlp{TlpType::kCplD, Direction::kDownstream, cause, ca, bytes, 0,
                       bytes + config_.cpld_overhead_bytes});
    });
  });
}

void DevicePort::count_write_now(uint64_t host_addr, size_t len, TlpCause cause) {
  if (sink_.counts_only()) {
    emit(mwr_run(cause, mps_.chunks(host_addr, len), len));
    return;
  }
  for_each_aligned_chunk(host_addr, len, config_.mps_bytes, [&](uint64_t a, uint64_t n) {
    auto bytes = static_cast<uint32_t>(n);
    sink_.on_tlp(Tlp{TlpType::kMWr, Direction::kUpstream, cause, a, bytes, 0,
                     bytes + config_.mwr_overhead_bytes});
  });
}

void DevicePort::emit(const TlpRun& run) {
  if (!defer_) return sink_.on_tlp_run(run);
  hold(run);
}

void DevicePort::flush_counts() {
  while (held_cells_ != 0) {
    const auto bit = static_cast<unsigned>(std::countr_zero(held_cells_));
    held_cells_ &= held_cells_ - 1;
    const auto type = static_cast<TlpType>(bit / kTlpCauseCount);
    const auto cause = static_cast<TlpCause>(bit % kTlpCauseCount);
    CounterCell& c = held_.at(type, cause);
    sink_.on_tlp_run(TlpRun{type, cause, c.tlps, c.payload_bytes, c.wire_bytes});
    c = CounterCell{};
  }
}

uint8_t* DevicePort::map_word(uint64_t host_addr, size_t len) {
  const std::span<uint8_t> m = map(host_addr, len);
  return m.size() >= len ? m.data() : nullptr;  // a word is never split between mappings
}

bool DevicePort::dma_read(uint64_t host_addr, void* dst, size_t len, TlpCause cause) {
  if (len == 0) return true;
  count_read(host_addr, len, cause);
  auto* d = static_cast<uint8_t*>(dst);
  return for_each_mapped([this](uint64_t a, size_t n) { return map(a, n); }, host_addr, len, [&](std::span<uint8_t> piece) {
    std::memcpy(d, piece.data(), piece.size());
    d += piece.size();
  });
}

std::span<const uint8_t> DevicePort::dma_read_in_place(uint64_t host_addr, size_t len, TlpCause cause) {
  if (len == 0) return {};
  const std::span<uint8_t> m = map(host_addr, len);
  if (m.size() < len) return {};
  count_read(host_addr, len, cause);
  return m.first(len);
}

bool DevicePort::dma_write(uint64_t host_addr, const void* src, size_t len, TlpCause cause) {
  if (len == 0) return true;
  count_write(host_addr, len, cause);
  const auto* s = static_cast<const uint8_t*>(src);
  return for_each_mapped([this](uint64_t a, size_t n) { return map(a, n); }, host_addr, len, [&](std::span<uint8_t> piece) {
    // In address order, the last byte last (place_bytes); the source may be host memory too
    // (dma_read_in_place), even the same buffer.
    place_bytes(piece.data(), s, piece.size());
    s += piece.size();
  });
}

bool DevicePort::dma_write_publish(uint64_t host_addr, const void* src, size_t len, TlpCause cause) {
  if (len == 0) return true;
  count_write(host_addr, len, cause);
  const auto* s = static_cast<const uint8_t*>(src);
  size_t done = 0;
  return for_each_mapped([this](uint64_t a, size_t n) { return map(a, n); }, host_addr, len, [&](std::span<uint8_t> piece) {
    const bool has_last = done + piece.size() == len;
    const size_t body = has_last ? piece.size() - 1 : piece.size();
    std::memcpy(piece.data(), s + done, body);
    // Release: the consumer's acquire load of this byte makes everything before it visible.
    if (has_last) std::atomic_ref<uint8_t>(piece[body]).store(s[len - 1], std::memory_order_release);
    done += piece.size();
  });
}

std::optional<uint32_t> DevicePort::read_dbrec(uint64_t host_addr, TlpCause cause, bool counted) {
  if (counted) count_read(host_addr, sizeof(uint32_t), cause);
  uint8_t* p = map_word(host_addr, sizeof(uint32_t));
  if (p == nullptr || host_addr % alignof(uint32_t) != 0) return std::nullopt;
  // Acquire: pairs with the driver's release store after it wrote the WQEs the record counts.
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(p)).load(std::memory_order_acquire);
}

std::optional<uint64_t> DevicePort::atomic_fetch_add(uint64_t host_addr, uint64_t add) {
  count_read(host_addr, 8, TlpCause::kAtomic);
  count_write(host_addr, 8, TlpCause::kAtomic);
  uint8_t* p = map_word(host_addr, sizeof(uint64_t));
  if (p == nullptr || host_addr % alignof(uint64_t) != 0) return std::nullopt;
  // acq_rel: an atomic is ordered against the responder's other accesses to the same memory.
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p)).fetch_add(add, std::memory_order_acq_rel);
}

std::optional<uint64_t> DevicePort::atomic_compare_swap(uint64_t host_addr, uint64_t compare, uint64_t swap) {
  count_read(host_addr, 8, TlpCause::kAtomic);
  count_write(host_addr, 8, TlpCause::kAtomic);
  uint8_t* p = map_word(host_addr, sizeof(uint64_t));
  if (p == nullptr || host_addr % alignof(uint64_t) != 0) return std::nullopt;
  uint64_t expected = compare;
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p))
      .compare_exchange_strong(expected, swap, std::memory_order_acq_rel);
  return expected;
}

void DevicePort::raise_interrupt(uint64_t msi_vector) {
  constexpr uint32_t kMsixBytes = 4;  // an MSI-X message is one DWORD write (PCIe base spec 6.1.4)
  sink_.on_tlp(Tlp{TlpType::kMWr, Direction::kUpstream, TlpCause::kInterrupt, 0, kMsixBytes, 0,
                   kMsixBytes + config_.mwr_overhead_bytes});
  bridge_.deliver_msi(msi_vector);
}

}  // namespace softhca::pcie
