// Memory keys (MRs as the device knows them): translation of (key, address, length) to host
// addresses with the protection checks of IBA 10.6.3 — key exists, PD matches, range inside the
// region, access right granted. lkey == rkey, both index<<8 | an 8-bit variant.
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

class MemoryKeys {
 public:
  explicit MemoryKeys(uint32_t capacity) : table_(1, capacity) {}

  // Returns the key, or 0 when the table is full.
  uint32_t create(const hwif::CreateMkeyIn& in);
  bool destroy(uint32_t key);
  [[nodiscard]] const Mkey* find(uint32_t key) const;

  // required_access: 0 for a local read (gather), else the MkeyAccess bit needed.
  [[nodiscard]] Translation translate(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t length,
                                      uint32_t required_access) const;
  [[nodiscard]] uint32_t count_for_pd(uint32_t pdn) const;

 private:
  static uint32_t index_of(uint32_t key) { return key >> 8; }
  ObjectTable<Mkey> table_;
  uint8_t variant_ = 0;
};

}  // namespace softhca::hca
