#include "pcie/host_port.h"

#include <cstring>

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

}  // namespace softhca::pcie
