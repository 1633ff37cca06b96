#include "runtime/memory_publisher.h"

#include <algorithm>
#include <cerrno>

#include "pcie/host_bridge.h"

namespace softhca::runtime {

MemoryPublisher::MemoryPublisher(RangeTable& mine, uint32_t my_slot)
    : mine_(mine), slot_(my_slot), fork_generation_(PinnedPages::fork_generation()) {
  // The table may be a reused slot's: whatever it still publishes is not ours.
  const uint32_t used = std::min(mine.used.load(std::memory_order_relaxed), kRangeTableCapacity);
  for (uint32_t i = used; i-- > 0;) {
    mine.retire(i);
    free_entries_.push_back(i);
  }
}

MemoryPublisher::~MemoryPublisher() {
  if (inherited()) return;  // a fork child: the table and the windows are the parent's
  std::lock_guard lock(mu_);
  for (auto& [base, p] : published_) unpublish(p);
}

bool MemoryPublisher::publish(uint64_t base, const std::vector<WindowPiece>& pieces, Published* out) {
  for (const WindowPiece& piece : pieces) {
    uint32_t index;
    if (!free_entries_.empty()) {
      index = free_entries_.back();
      free_entries_.pop_back();
    } else {
      index = mine_.used.load(std::memory_order_relaxed);
      if (index >= kRangeTableCapacity) {
        unpublish(*out);
        errno = ENOMEM;
        return false;
      }
    }
    RangeSnapshot r;
    r.va = base + piece.offset;
    r.length = piece.length;
    r.offset = piece.file_offset;
    r.fd = piece.fd;
    mine_.write(index, r);
    out->entries.push_back(index);
  }
  return true;
}

// Before the window is unmapped and its memfd closed: a peer that still sees an entry opens the
// right file, and one that opened it after sees the generation moved (PeerMemory::map_slow).
void MemoryPublisher::unpublish(Published& p) {
  for (uint32_t index : p.entries) {
    mine_.retire(index);
    free_entries_.push_back(index);
  }
  p.entries.clear();
}

pcie::DmaMemory MemoryPublisher::alloc_coherent(size_t bytes) {
  if (inherited()) {
    errno = EPERM;
    return {};
  }
  std::lock_guard lock(mu_);
  size_t size = 0;
  PinnedPages::CoherentChunk added;
  uint8_t* p = PinnedPages::alloc_coherent(bytes, &size, &added);
  if (p == nullptr) return {};
  // A chunk this publisher has not published yet (new, or made for an earlier publisher of this
  // process): published whole, once, for every buffer it holds.
  if (!published_.contains(added.base)) {
    Published pub;
    pub.base = added.base;
    pub.length = added.length;
    pub.coherent = true;
    const bool fits = pub.base + pub.length - 1 <= pcie::kDmaAddressMask;
    if (!fits || !publish(pub.base, {WindowPiece{0, added.length, 0, added.fd}}, &pub)) {
      const int e = fits ? errno : EINVAL;
      PinnedPages::free_coherent(p, size);
      errno = e;
      return {};
    }
    published_.emplace(pub.base, std::move(pub));
  }
  pcie::DmaMemory m;
  m.data = p;
  m.size = size;
  m.dma_addr = pcie::dma_address(slot_, reinterpret_cast<uint64_t>(p));
  return m;
}

void MemoryPublisher::free_coherent(const pcie::DmaMemory& memory) {
  if (!memory.valid() || inherited()) return;
  std::lock_guard lock(mu_);
  // A buffer with a chunk of its own takes the chunk with it: unpublished before the close, so a
  // peer that still sees the entry opens the right file.
  if (const PinnedPages::CoherentChunk gone = PinnedPages::coherent_chunk_dropped_by(memory.data); gone.fd >= 0) {
    if (auto it = published_.find(gone.base); it != published_.end()) {
      unpublish(it->second);
      published_.erase(it);
    }
  }
  PinnedPages::free_coherent(memory.data, memory.size);
}

uint64_t MemoryPublisher::pin(const void* addr, size_t len, pcie::PinAccess access) {
  if (inherited()) {
    errno = EPERM;
    return 0;
  }
  const auto va = reinterpret_cast<uint64_t>(addr);
  if (len == 0) {
    if (va > pcie::kDmaAddressMask) {
      errno = EINVAL;
      return 0;
    }
    return pcie::dma_address(slot_, va);
  }
  std::lock_guard lock(mu_);
  Window w = PinnedPages::pin(addr, len, access);
  if (w.device == nullptr) return 0;
  if (w.base + w.length - 1 > pcie::kDmaAddressMask) {
    PinnedPages::unpin(w.device, len);
    errno = EINVAL;
    return 0;
  }
  // An arena chunk's view is published once, for every pin it will hold; a window of its own
  // for its pin alone.
  if (!w.arena_view || !published_.contains(w.base)) {
    Published pub;
    pub.base = w.base;
    pub.length = w.length;
    pub.arena = w.arena_view;
    if (!publish(w.base, w.pieces, &pub)) {
      const int e = errno;
      PinnedPages::unpin(w.device, len);
      errno = e;
      return 0;
    }
    published_.emplace(pub.base, std::move(pub));
  }
  return pcie::dma_address(slot_, reinterpret_cast<uint64_t>(w.device));
}

void MemoryPublisher::unpin(uint64_t dma_addr, size_t len) {
  if (len == 0 || inherited() || pcie::dma_slot(dma_addr) != slot_) return;
  const uint64_t va = pcie::dma_va(dma_addr);
  std::lock_guard lock(mu_);
  auto it = published_.upper_bound(va);
  if (it == published_.begin()) return;
  --it;
  Published& p = it->second;
  if (p.coherent || va - p.base >= p.length) return;
  if (p.arena) {  // the view stays published for the chunk's other pins
    PinnedPages::unpin(reinterpret_cast<const void*>(va), len);
    return;
  }
  unpublish(p);
  published_.erase(it);
  PinnedPages::unpin(reinterpret_cast<const void*>(va), len);
}

size_t MemoryPublisher::published_entries() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [base, p] : published_) n += p.entries.size();
  return n;
}

}  // namespace softhca::runtime
