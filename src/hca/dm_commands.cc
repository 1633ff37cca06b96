// Device memory on the control path (ibv_alloc_dm(3), ibv_reg_dm_mr(3)): allocations of whole
// pages of the host's window, the keys that lie in them, the BAR window the CPU stores into and
// loads from, and what a dead process's allocations leave behind (nothing). Under the device lock,
// as every command and BAR access.
#include <cerrno>
#include <cstring>

#include "hca/device.h"

namespace softhca::hca {

using namespace hwif;

int Device::cmd_alloc_dm(const AllocDmIn& in, AllocDmOut& out) {
  DeviceMemoryState& st = state_.dm;
  if (in.length == 0 || in.length > st.bytes || in.log_align > kDmMaxLogAlign) return EINVAL;
  const auto total = static_cast<uint32_t>(st.bytes / kDmPageBytes);
  const auto pages = static_cast<uint32_t>((in.length + kDmPageBytes - 1) / kDmPageBytes);
  const uint64_t align_bytes = uint64_t{1} << in.log_align;
  const auto align = static_cast<uint32_t>(align_bytes <= kDmPageBytes ? 1 : align_bytes / kDmPageBytes);
  const int first = find_free_pages(st.used_pages, total, pages, align);
  if (first < 0) return ENOMEM;
  DeviceMemory* dm = nullptr;
  const uint32_t dmn = dms_.insert(owner_, &dm);
  if (dm == nullptr) return ENOMEM;
  dm->first_page = static_cast<uint32_t>(first);
  dm->pages = pages;
  dm->length = in.length;
  dm->keys = 0;
  st.used_pages |= page_run(dm->first_page, pages);
  // Zeroed: what the previous holder of the pages left is not for the next one to read.
  const uint64_t offset = uint64_t{dm->first_page} * kDmPageBytes;
  std::memset(heap_.at<uint8_t>(st.window + offset), 0, uint64_t{pages} * kDmPageBytes);
  out.dmn = dmn;
  out.bar_offset = offset;
  out.dma_addr = pcie::kDeviceMemoryDma + offset;
  return 0;
}

int Device::cmd_free_dm(const FreeDmIn& in, NoOut&) {
  DeviceMemory* dm = dms_.find(in.dmn);
  if (dm == nullptr || dms_.owner_of(in.dmn) != owner_) return EINVAL;
  if (dm->keys != 0) return EBUSY;
  state_.dm.used_pages &= ~page_run(dm->first_page, dm->pages);
  dms_.erase(in.dmn);
  return 0;
}

int Device::attach_dm_key(const CreateMkeyIn& in) {
  DeviceMemory* dm = dms_.find(in.dmn);
  if (dm == nullptr || dms_.owner_of(in.dmn) != owner_) return EINVAL;
  const uint64_t start = pcie::kDeviceMemoryDma + uint64_t{dm->first_page} * kDmPageBytes;
  if (in.host_addr < start || in.host_addr - start > dm->length || in.length > dm->length - (in.host_addr - start))
    return EINVAL;
  ++dm->keys;
  return 0;
}

void Device::detach_dm_key(uint32_t dmn) {
  if (DeviceMemory* dm = dms_.find(dmn); dm != nullptr && dm->keys > 0) --dm->keys;
}

void Device::reclaim_dm(uint32_t owner) {
  // After the owner's keys: nothing else can lie in its allocations.
  dms_.for_each_of(owner, [&](uint32_t dmn) {
    if (const DeviceMemory* dm = dms_.find(dmn); dm != nullptr)
      state_.dm.used_pages &= ~page_run(dm->first_page, dm->pages);
    dms_.erase(dmn);
  });
}

std::span<uint8_t> Device::dm_window(uint64_t offset, size_t len) const {
  const DeviceMemoryState& st = state_.dm;
  if (len == 0 || offset > st.bytes || len > st.bytes - offset) return {};
  return {heap_.at<uint8_t>(st.window + offset), len};
}

}  // namespace softhca::hca
