// Memory keys (MRs and memory windows as the device knows them): translation of (key, address,
// length) to host addresses with the protection checks of IBA 10.6.3 and 10.6.7 — key exists, PD
// matches, range inside the region, access right granted; a window only for remote access, only
// while bound, and a type 2 window only for the QP it is bound to. lkey == rkey = index << 8 | an 8-bit variant as in an mlx5 mkey,
// both drawn from the device's seed (docs/security.md "Keys and QPNs"). The table lives in the
// device region; MemoryKeys is a per-process view of it.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <utility>

#include "hca/object_table.h"
#include "hwif/cmd.h"

namespace softhca::hca {

// What a key names: a memory region, or a memory window of type 1 or 2 (IBA 10.6.7), which holds
// a copy of the part of its MR it is bound to (an MR with windows bound cannot change or go).
enum class KeyKind : uint8_t { kMr = 0, kWindow1 = 1, kWindow2 = 2 };

struct Mkey {
  uint32_t pdn = 0;
  uint32_t access = 0;  // hwif::MkeyAccess bits; local read is always allowed
  uint64_t host_addr = 0;
  uint64_t iova = 0;
  uint64_t length = 0;
  uint32_t key = 0;
  uint32_t dmn = 0;  // the device memory it lies in (hwif::CreateMkeyIn::dmn); 0: host memory
  KeyKind kind = KeyKind::kMr;
  uint32_t mr_key = 0;     // a window: the MR it is bound to (0: not bound)
  uint32_t bound_qpn = 0;  // a type 2 window: the QP it is bound to
  uint32_t windows = 0;    // an MR: the windows bound to it

  [[nodiscard]] bool is_window() const { return kind != KeyKind::kMr; }

  // Whether [addr, addr + len) lies inside the region (no overflow).
  [[nodiscard]] bool covers(uint64_t addr, uint64_t len) const {
    return addr >= iova && addr - iova <= length && len <= length - (addr - iova);
  }
  [[nodiscard]] uint64_t host_at(uint64_t addr) const { return host_addr + (addr - iova); }
};

enum class KeyCheck : uint8_t { kOk, kBadKey, kBadPd, kOutOfBounds, kNoAccess };

struct Translation {
  KeyCheck result = KeyCheck::kBadKey;
  uint64_t host_addr = 0;
  const Mkey* key = nullptr;  // the key that translated (kOk)
};

// A key and as much of its host memory, from its start, as one mapping of this process holds:
// what the express path (transport/express.cc) keeps of the last key it used, so the next message
// through the same key costs a comparison. Valid within one entry point of the device (keys change
// only by commands, which wait for it).
class MappedKey {
 public:
  MappedKey() = default;  // no key
  MappedKey(const Mkey& key, std::span<uint8_t> memory)
      : key_(key), memory_(memory.data()), limit_(std::min<uint64_t>(key.length, memory.size())) {}

  // The memory of [addr, addr + len) through key `k`, or nullptr when it is not this key, or not
  // inside the region, or not inside the part mapped.
  [[nodiscard]] uint8_t* at(uint32_t k, uint64_t addr, uint64_t len) const {
    const uint64_t off = addr - key_.iova;
    if (k != key_.key || k == 0 || addr < key_.iova || off > limit_ || len > limit_ - off) return nullptr;
    return memory_ + off;
  }
  [[nodiscard]] const Mkey& key() const { return key_; }

 private:
  Mkey key_{};  // key_.key == 0: none (index 0 is never a key)
  uint8_t* memory_ = nullptr;  // the region's first byte, mapped
  uint64_t limit_ = 0;         // bytes of the region from its start that are mapped
};

// The keys' state in the region: the table, the variants in the order keys get them (a random
// permutation of 1..255: variant 0 never occurs, so no key is 0 or kInvalidLkey), the next one's
// place in it, and the round keys of the index permutation. Drawn once, at format.
struct MemoryKeysState {
  static constexpr uint32_t kVariants = 255;
  TableState table;
  std::array<uint8_t, kVariants> variants{};
  uint8_t next_variant = 0;
  std::array<uint32_t, 4> index_keys{};
};

// The 24-bit index field of a key: a keyed permutation of the table's numbers (a 4-round Feistel
// network over two 12-bit halves, cycle-walked around 0), so that one key says nothing about the
// index of another. Not a cipher: it keeps a guess at a key as hard as the key's 32 bits, it does
// not withstand analysis of many keys.
struct KeyIndex {
  static constexpr uint32_t kBits = 24;
  static constexpr uint32_t kLimit = 1u << kBits;  // numbers and indexes lie in [1, kLimit)
  [[nodiscard]] static uint32_t of_number(const std::array<uint32_t, 4>& keys, uint32_t number);
  [[nodiscard]] static uint32_t number_of(const std::array<uint32_t, 4>& keys, uint32_t index);
};

class MemoryKeys {
 public:
  MemoryKeys(RegionHeap& heap, MemoryKeysState& state) : st_(state), table_(heap, state.table) {}
  // The keys' randomness comes from `seed` (the same seed, the same keys). Index 0 and variant 0
  // are never a key's (a zero lkey means "no key" to the driver). Throws std::invalid_argument
  // for a capacity that does not fit the 24-bit index.
  static void format(MemoryKeysState& st, uint32_t capacity, uint64_t slots_offset, uint64_t seed);
  static constexpr uint64_t slot_bytes(uint32_t capacity) { return ObjectTable<Mkey>::slot_bytes(capacity); }

  // Returns the key, or 0 when the table or the region is full.
  uint32_t create(const hwif::CreateMkeyIn& in, uint32_t owner = 0);
  // An unbound window of PD `pdn`: 0 when the table is full.
  uint32_t create_window(uint32_t pdn, KeyKind kind, uint32_t owner);
  bool destroy(uint32_t key);
  // The key's record, for a command to change in place (keys change only between entry points);
  // nullptr when `key` is not a key of `owner`.
  [[nodiscard]] Mkey* find_owned(uint32_t key, uint32_t owner);
  [[nodiscard]] const Mkey* find(uint32_t key) const;
  [[nodiscard]] Mkey* find(uint32_t key) { return const_cast<Mkey*>(std::as_const(*this).find(key)); }
  // The record of a window by its index (the key's upper 24 bits), whatever its variant now.
  [[nodiscard]] Mkey* find_index(uint32_t key);

  // required_access: 0 for a local read (gather), else the MkeyAccess bit needed.
  [[nodiscard]] Translation translate(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t length,
                                      uint32_t required_access) const {
    return check(find(key), pdn, addr, length, required_access);
  }
  // The checks of translate() on the key record `m` (null: no such key).
  // A remote peer's access through QP `qpn`: translate(), and a type 2 window only for the QP it is
  // bound to.
  [[nodiscard]] Translation translate_remote(uint32_t key, uint32_t pdn, uint32_t qpn, uint64_t addr,
                                             uint64_t length, uint32_t required_access) const {
    const Mkey* m = find(key);
    if (m != nullptr && m->kind == KeyKind::kWindow2 && m->bound_qpn != qpn) return {KeyCheck::kBadKey, 0};
    return check(m, pdn, addr, length, required_access);
  }
  [[nodiscard]] static Translation check(const Mkey* m, uint32_t pdn, uint64_t addr, uint64_t length,
                                         uint32_t required_access) {
    if (m == nullptr) return {KeyCheck::kBadKey, 0};
    // A window is a remote key, and opens nothing while unbound.
    if (m->is_window() && ((required_access & hwif::kAccessRemote) == 0 || m->mr_key == 0))
      return {KeyCheck::kBadKey, 0};
    if (m->pdn != pdn) return {KeyCheck::kBadPd, 0};
    if (!m->covers(addr, length)) return {KeyCheck::kOutOfBounds, 0};
    if ((m->access & required_access) != required_access) return {KeyCheck::kNoAccess, 0};
    return {KeyCheck::kOk, m->host_at(addr), m};
  }
  [[nodiscard]] uint32_t count_for_pd(uint32_t pdn) const;
  // Destroys every key of `owner`.
  void destroy_owned(uint32_t owner);
  [[nodiscard]] uint32_t live() const { return table_.live(); }

 private:
  // The table number of `key`'s index (0: none). The index permutation is fixed at format, so the
  // numbers of the last indexes looked up are remembered (direct-mapped): a key used again, as on
  // every message of a connection, costs a comparison instead of the Feistel rounds.
  [[nodiscard]] uint32_t number_of(uint32_t key) const {
    const uint32_t index = key >> 8;
    if (index == 0) return 0;
    Memo& m = memo_[index % memo_.size()];
    if (m.index != index) m = Memo{index, KeyIndex::number_of(st_.index_keys, index)};
    return m.number;
  }
  struct Memo {
    uint32_t index = 0;  // 0: empty (no key has index 0)
    uint32_t number = 0;
  };
  MemoryKeysState& st_;
  ObjectTable<Mkey> table_;
  mutable std::array<Memo, 64> memo_{};  // per process, like the view: used under the device lock
};

// MemoryKeys::translate() that keeps the last key it found for the next call, which then costs
// no table lookup when it names the same key (a run of WQEs gathering from one buffer). Valid within
// one entry point of the device, as MappedKey.
class KeyCache {
 public:
  [[nodiscard]] Translation translate(const MemoryKeys& keys, uint32_t key, uint32_t pdn, uint64_t addr,
                                      uint64_t length, uint32_t required_access) {
    if (key != last_.key || key == 0) {
      const Mkey* m = keys.find(key);
      if (m == nullptr) return {KeyCheck::kBadKey, 0};
      last_ = *m;
    }
    return MemoryKeys::check(&last_, pdn, addr, length, required_access);
  }

 private:
  Mkey last_{};  // key 0: none yet
};

}  // namespace softhca::hca
