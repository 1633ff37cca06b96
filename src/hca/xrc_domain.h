// XRC domains as the device keeps them (IBA 11.2.4 "XRC domain"; ibv_open_xrcd(3)): one per file
// that processes opened it with (device and inode, as the kernel's inode table), or per anonymous
// open, with who holds it open; and the handle counts of a TGT QP shared through ibv_open_qp.
// Stored in the device region (plain bytes). Left out: more than kSlots processes holding one
// object (ENOMEM for the next).
#pragma once
#include <array>
#include <cstdint>
#include <type_traits>

namespace softhca::hca {

// Who holds an object shared between the processes of a host, and how often: each open or
// handle counts for its process, and a process's counts all go when it does (reclaim).
struct HandleRefs {
  static constexpr uint32_t kSlots = 8;
  std::array<uint32_t, kSlots> owner{};  // 0: a free slot
  std::array<uint32_t, kSlots> count{};

  // One more for `who`; false when kSlots other processes hold it already.
  bool add(uint32_t who) {
    uint32_t* free_slot = nullptr;
    for (uint32_t i = 0; i < kSlots; ++i) {
      if (owner[i] == who && count[i] != 0) {
        ++count[i];
        return true;
      }
      if (count[i] == 0 && free_slot == nullptr) free_slot = &count[i];
    }
    if (free_slot == nullptr) return false;
    const auto i = static_cast<uint32_t>(free_slot - count.data());
    owner[i] = who;
    count[i] = 1;
    return true;
  }
  // One fewer for `who`; false when it holds none.
  bool drop(uint32_t who) {
    for (uint32_t i = 0; i < kSlots; ++i) {
      if (owner[i] == who && count[i] != 0) {
        if (--count[i] == 0) owner[i] = 0;
        return true;
      }
    }
    return false;
  }
  // All of `who`'s; whether it held any.
  bool drop_all(uint32_t who) {
    bool held = false;
    for (uint32_t i = 0; i < kSlots; ++i) {
      if (owner[i] == who && count[i] != 0) {
        held = true;
        count[i] = 0;
        owner[i] = 0;
      }
    }
    return held;
  }
  [[nodiscard]] uint32_t held_by(uint32_t who) const {
    for (uint32_t i = 0; i < kSlots; ++i)
      if (owner[i] == who) return count[i];
    return 0;
  }
  [[nodiscard]] uint32_t total() const {
    uint32_t n = 0;
    for (uint32_t c : count) n += c;
    return n;
  }
};

struct XrcDomain {
  bool anonymous = false;  // opened with fd -1: never found by file
  uint64_t file_dev = 0;   // st_dev and st_ino of the file it was opened with
  uint64_t file_ino = 0;
  HandleRefs opens;
  uint32_t users = 0;      // XRC SRQs and TGT QPs in it
};

static_assert(std::is_trivially_copyable_v<HandleRefs> && std::is_trivially_copyable_v<XrcDomain>);

}  // namespace softhca::hca
