// Memory keys (MRs as the device knows them): translation of (key, address, length) to host
// addresses with the protection checks of IBA 10.6.3 — key exists, PD matches, range inside the
// region, access right granted. lkey == rkey, both index<<8 | an 8-bit variant. The table lives in
// the device region; MemoryKeys is a per-process view of it.
#pragma once
#include <cstdint>

#include "hca/object_table.h"
#include "hwif/cmd.h"

namespace softhca::hca {

struct Mkey {
  uint32_t pdn = 0;
  uint32_t access = 0;  // hwif::MkeyAccess bits; local read is always allowed
  uint64_t host_addr = 0;
  uint64_t iova = 0;
  uint64_t length = 0;
  uint32_t key = 0;
};

enum class KeyCheck : uint8_t { kOk, kBadKey, kBadPd, kOutOfBounds, kNoAccess };

struct Translation {
  KeyCheck result = KeyCheck::kBadKey;
  uint64_t host_addr = 0;
};

// The keys' state in the region: the table and the variant counter of the next key.
struct MemoryKeysState {
  TableState table;
  uint8_t variant = 0;
};

class MemoryKeys {
 public:
  MemoryKeys(RegionHeap& heap, MemoryKeysState& state) : st_(state), table_(heap, state.table) {}
  // Index 0 is never a key (a zero lkey means "no key" to the driver).
  static void format(MemoryKeysState& st, uint32_t capacity, uint64_t slots_offset) {
    st = MemoryKeysState{};
    ObjectTable<Mkey>::format(st.table, 1, capacity, slots_offset);
  }
  static constexpr uint64_t slot_bytes(uint32_t capacity) { return ObjectTable<Mkey>::slot_bytes(capacity); }

  // Returns the key, or 0 when the table or the region is full.
  uint32_t create(const hwif::CreateMkeyIn& in, uint32_t owner = 0);
  bool destroy(uint32_t key);
  [[nodiscard]] const Mkey* find(uint32_t key) const;

  // required_access: 0 for a local read (gather), else the MkeyAccess bit needed.
  [[nodiscard]] Translation translate(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t length,
                                      uint32_t required_access) const;
  [[nodiscard]] uint32_t count_for_pd(uint32_t pdn) const;
  // Destroys every key of `owner`.
  void destroy_owned(uint32_t owner);
  [[nodiscard]] uint32_t live() const { return table_.live(); }

 private:
  static uint32_t index_of(uint32_t key) { return key >> 8; }
  MemoryKeysState& st_;
  ObjectTable<Mkey> table_;
};

}  // namespace softhca::hca
