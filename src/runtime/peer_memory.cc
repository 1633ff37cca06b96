#include "runtime/peer_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "pcie/host_bridge.h"
#include "runtime/pinned_pages.h"

namespace softhca::runtime {

PeerMemory::PeerMemory(uint32_t my_slot, std::function<const RangeTable*(uint32_t)> table_of,
                       std::function<pid_t(uint32_t)> pid_of)
    : my_slot_(my_slot),
      table_of_(std::move(table_of)),
      pid_of_(std::move(pid_of)),
      fork_generation_(PinnedPages::fork_generation()) {}

void PeerMemory::unmap(const Cached& c) const {
  if (PinnedPages::fork_generation() == fork_generation_) ::munmap(c.local, c.length);
}

PeerMemory::~PeerMemory() {
  for (uint32_t slot = 0; slot < peers_.size(); ++slot) forget(slot);
}

std::span<uint8_t> PeerMemory::map(uint64_t dma_addr, size_t len) {
  const uint32_t slot = pcie::dma_slot(dma_addr);
  const uint64_t va = pcie::dma_va(dma_addr);
  if (slot == my_slot_) return {reinterpret_cast<uint8_t*>(va), len};
  if (slot < peers_.size()) {
    const Peer& peer = peers_[slot];
    for (const Cached& c : peer.cached) {
      if (va - c.va >= c.length) continue;
      if (peer.table->generation(c.index) != c.generation) break;  // republished or gone
      return {c.local + (va - c.va), std::min<uint64_t>(len, c.length - (va - c.va))};
    }
  }
  return map_slow(slot, va, len);
}

void PeerMemory::drop_stale(Peer& peer) {
  std::erase_if(peer.cached, [&](const Cached& c) {
    if (peer.table->generation(c.index) == c.generation) return false;
    unmap(c);
    return true;
  });
}

void PeerMemory::drop_unpublished() {
  for (Peer& peer : peers_) {
    if (peer.cached.empty()) continue;
    // Acquire: pairs with the owner's release increment, which follows its odd generation store,
    // so every entry retired before the count we read is seen stale by drop_stale(). An entry
    // retired after it moves the count again: the next call drops it.
    const uint32_t now = peer.table->unpublished.load(std::memory_order_acquire);
    if (now == peer.seen_unpublished) continue;
    peer.seen_unpublished = now;
    drop_stale(peer);
  }
}

std::span<uint8_t> PeerMemory::map_slow(uint32_t slot, uint64_t va, size_t len) {
  if (slot >= peers_.size()) peers_.resize(slot + 1);
  Peer& peer = peers_[slot];
  const RangeTable* table = table_of_(slot);
  if (table != peer.table) {
    forget(slot);
    peer.table = table;
  }
  if (table == nullptr) return {};
  if (peer.cached.empty()) peer.seen_unpublished = table->unpublished.load(std::memory_order_acquire);
  drop_stale(peer);  // what the owner no longer publishes
  const uint32_t used = std::min(table->used.load(std::memory_order_acquire), kRangeTableCapacity);
  for (uint32_t i = 0; i < used; ++i) {
    const std::optional<RangeSnapshot> e = table->read(i);
    if (!e || va - e->va >= e->length) continue;
    const pid_t pid = pid_of_(slot);
    if (pid <= 0) return {};
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", static_cast<int>(pid), e->fd);
    const int fd = ::open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return {};
    // The owner unpublishes before it closes, so an unchanged generation after the open means the
    // fd we opened was the published memfd; the size check keeps a stale range from SIGBUS.
    struct stat st {};
    void* local = MAP_FAILED;
    if (::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= e->offset + e->length)
      local = ::mmap(nullptr, e->length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(e->offset));
    ::close(fd);
    if (local == MAP_FAILED) return {};
    if (table->generation(i) != e->generation) {
      ::munmap(local, e->length);
      return {};  // changed under us: a DMA fault now, the device retries or reports it
    }
    ::madvise(local, e->length, MADV_DONTFORK);
    Cached c;
    c.va = e->va;
    c.length = e->length;
    c.generation = e->generation;
    c.index = i;
    c.local = static_cast<uint8_t*>(local);
    peer.cached.push_back(c);
    return {c.local + (va - c.va), std::min<uint64_t>(len, c.length - (va - c.va))};
  }
  return {};
}

void PeerMemory::forget(uint32_t slot) {
  if (slot >= peers_.size()) return;
  Peer& peer = peers_[slot];
  for (const Cached& c : peer.cached) unmap(c);
  peer.cached.clear();
  peer.table = nullptr;
}

size_t PeerMemory::mapped_ranges() const {
  size_t n = 0;
  for (const Peer& p : peers_) n += p.cached.size();
  return n;
}

uint64_t PeerMemory::mapped_bytes() const {
  uint64_t n = 0;
  for (const Peer& p : peers_)
    for (const Cached& c : p.cached) n += c.length;
  return n;
}

}  // namespace softhca::runtime
