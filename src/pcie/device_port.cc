#include "pcie/device_port.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

#include "pcie/tlp_split.h"

namespace softhca::pcie {

namespace {
// Host memory is this process's address space in live mode: a DMA address is a pointer.
void* host_ptr(uint64_t addr) { return reinterpret_cast<void*>(static_cast<uintptr_t>(addr)); }
}  // namespace

void DevicePort::count_read(uint64_t host_addr, size_t len, TlpCause cause) {
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

void DevicePort::count_write(uint64_t host_addr, size_t len, TlpCause cause) {
  for_each_aligned_chunk(host_addr, len, config_.mps_bytes, [&](uint64_t a, uint64_t n) {
    auto bytes = static_cast<uint32_t>(n);
    sink_.on_tlp(Tlp{TlpType::kMWr, Direction::kUpstream, cause, a, bytes, 0,
                     bytes + config_.mwr_overhead_bytes});
  });
}

void DevicePort::dma_read(uint64_t host_addr, void* dst, size_t len, TlpCause cause) {
  if (len == 0) return;
  count_read(host_addr, len, cause);
  std::memcpy(dst, host_ptr(host_addr), len);
}

void DevicePort::dma_write(uint64_t host_addr, const void* src, size_t len, TlpCause cause) {
  if (len == 0) return;
  count_write(host_addr, len, cause);
  std::memcpy(host_ptr(host_addr), src, len);
}

void DevicePort::dma_write_publish(uint64_t host_addr, const void* src, size_t len, TlpCause cause) {
  if (len == 0) return;
  count_write(host_addr, len, cause);
  auto* dst = static_cast<uint8_t*>(host_ptr(host_addr));
  const auto* s = static_cast<const uint8_t*>(src);
  std::memcpy(dst, s, len - 1);
  // Release: the consumer's acquire load of this byte makes the body above visible.
  std::atomic_ref<uint8_t>(dst[len - 1]).store(s[len - 1], std::memory_order_release);
}

uint32_t DevicePort::read_dbrec(uint64_t host_addr, TlpCause cause, bool counted) {
  if (counted) count_read(host_addr, sizeof(uint32_t), cause);
  auto* p = static_cast<uint32_t*>(host_ptr(host_addr));
  // Acquire: pairs with the driver's release store after it wrote the WQEs the record counts.
  return std::atomic_ref<uint32_t>(*p).load(std::memory_order_acquire);
}

uint64_t DevicePort::atomic_fetch_add(uint64_t host_addr, uint64_t add) {
  count_read(host_addr, 8, TlpCause::kAtomic);
  count_write(host_addr, 8, TlpCause::kAtomic);
  auto* p = static_cast<uint64_t*>(host_ptr(host_addr));
  return std::atomic_ref<uint64_t>(*p).fetch_add(add, std::memory_order_acq_rel);
}

uint64_t DevicePort::atomic_compare_swap(uint64_t host_addr, uint64_t compare, uint64_t swap) {
  count_read(host_addr, 8, TlpCause::kAtomic);
  count_write(host_addr, 8, TlpCause::kAtomic);
  auto* p = static_cast<uint64_t*>(host_ptr(host_addr));
  uint64_t expected = compare;
  std::atomic_ref<uint64_t>(*p).compare_exchange_strong(expected, swap, std::memory_order_acq_rel);
  return expected;
}

void DevicePort::raise_interrupt(int irq_fd) {
  constexpr uint32_t kMsixBytes = 4;
  sink_.on_tlp(Tlp{TlpType::kMWr, Direction::kUpstream, TlpCause::kInterrupt, 0, kMsixBytes, 0,
                   kMsixBytes + config_.mwr_overhead_bytes});
  if (irq_fd < 0) return;
  uint64_t one = 1;
  // An eventfd write of 8 bytes cannot be short; EAGAIN means the counter is saturated, which
  // still leaves the fd readable, so the event is not lost.
  [[maybe_unused]] ssize_t n = ::write(irq_fd, &one, sizeof one);
}

}  // namespace softhca::pcie
