#include "pcie/host_port.h"

#include <cstring>

#include "pcie/tlp_split.h"

namespace softhca::pcie {

void HostPort::write_doorbell(uint64_t bar_offset, const void* value8, TlpCause cause) {
  constexpr uint32_t kDoorbellBytes = 8;
  sink_.on_tlp(Tlp{TlpType::kMWr, Direction::kDownstream, cause, bar_offset, kDoorbellBytes, 0,
                   kDoorbellBytes + config_.mwr_overhead_bytes});
  bar_.mmio_write(bar_offset, value8, kDoorbellBytes);
}

void HostPort::write_combined(uint64_t bar_offset, const void* data, size_t len, TlpCause cause) {
  const uint32_t chunk = config_.write_combine_bytes;
  for (size_t off = 0; off < len; off += chunk) {
    auto n = static_cast<uint32_t>(len - off < chunk ? len - off : chunk);
    sink_.on_tlp(Tlp{TlpType::kMWr, Direction::kDownstream, cause, bar_offset + off, n, 0,
                     n + config_.mwr_overhead_bytes});
  }
  bar_.mmio_write(bar_offset, data, len);
}

void HostPort::write_memory(uint64_t bar_offset, const void* data, size_t len, TlpCause cause) {
  if (len == 0) return;
  for_each_aligned_chunk(bar_offset, len, config_.write_combine_bytes, [&](uint64_t a, uint64_t n) {
    const auto bytes = static_cast<uint32_t>(n);
    sink_.on_tlp(Tlp{TlpType::kMWr, Direction::kDownstream, cause, a, bytes, 0, bytes + config_.mwr_overhead_bytes});
  });
  bar_.mmio_write(bar_offset, data, len);
}

void HostPort::read_memory(uint64_t bar_offset, void* dst, size_t len, TlpCause cause) {
  if (len == 0) return;
  constexpr uint64_t kLoadBytes = 8;
  for_each_aligned_chunk(bar_offset, len, kLoadBytes, [&](uint64_t a, uint64_t n) {
    const auto bytes = static_cast<uint32_t>(n);
    sink_.on_tlp(Tlp{TlpType::kMRd, Direction::kDownstream, cause, a, 0, bytes, config_.mrd_overhead_bytes});
    sink_.on_tlp(Tlp{TlpType::kCplD, Direction::kUpstream, cause, a, bytes, 0, bytes + config_.cpld_overhead_bytes});
  });
  bar_.mmio_read(bar_offset, dst, len);
}

}  // namespace softhca::pcie
