// Byte copies on the data path.
#pragma once
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

}  // namespace softhca
