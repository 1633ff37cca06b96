// Byte copies on the data path.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace softhca {

// memmove, but 8 to 16 bytes — a small payload, the common small message — move as two 8-byte
// loads then two stores (overlapping below 16 bytes) rather than through a library call.
inline void move_bytes(void* dst, const void* src, size_t len) {
  if (len >= 8 && len <= 16) {
    const auto* s = static_cast<const uint8_t*>(src);
    auto* d = static_cast<uint8_t*>(dst);
    uint64_t head;
    uint64_t tail;
    std::memcpy(&head, s, 8);
    std::memcpy(&tail, s + len - 8, 8);
    std::memcpy(d, &head, 8);
    std::memcpy(d + len - 8, &tail, 8);
    return;
  }
  std::memmove(dst, src, len);
}

// A DMA write's placement into memory that software may be polling: every byte lands before the
// last one, which is stored last with release. A program that spins on the last byte of a message
// (Open MPI's eager RDMA, rings of RDMA WRITEs) then sees the whole message once it sees that byte,
// as on a NIC whose posted writes reach memory in address order. A source that overlaps the
// destination (a buffer read into itself) is plain memmove: no reader can rely on such a copy.
inline void place_bytes(void* dst, const void* src, size_t len) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  if (len < 2 || (s < d + len && d < s + len)) {
    std::memmove(dst, src, len);
    return;
  }
  // 8 to 16 bytes: two words, the one that ends the message second (when it does not straddle
  // cache lines, one store makes it visible at once).
  const auto tail_at = reinterpret_cast<uintptr_t>(d + len - 8);
  if (len >= 8 && len <= 16 && tail_at % 64 <= 56) {
    uint64_t head;
    uint64_t tail;
    std::memcpy(&head, s, 8);
    std::memcpy(&tail, s + len - 8, 8);
    std::memcpy(d, &head, 8);
    std::atomic_thread_fence(std::memory_order_release);
    std::memcpy(d + len - 8, &tail, 8);
    return;
  }
  move_bytes(d, s, len - 1);
  std::atomic_ref<uint8_t>(d[len - 1]).store(s[len - 1], std::memory_order_release);
}

}  // namespace softhca
