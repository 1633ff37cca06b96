#include "hca/memory_keys.h"

#include <stdexcept>
#include <utility>

#include "sim/random_stream.h"

namespace softhca::hca {

namespace {

constexpr uint32_t kHalfBits = KeyIndex::kBits / 2;
constexpr uint32_t kHalfMask = (1u << kHalfBits) - 1;

// A Feistel round's function: the top 12 bits of a 32-bit product (Fibonacci hashing) of the
// half mixed with the round key.
constexpr uint32_t round_of(uint32_t half, uint32_t key) {
  return ((half ^ key) * 0x9e3779b1u) >> (32 - kHalfBits);
}

uint32_t feistel(const std::array<uint32_t, 4>& keys, uint32_t x) {
  uint32_t l = x >> kHalfBits;
  uint32_t r = x & kHalfMask;
  for (const uint32_t k : keys) l = std::exchange(r, l ^ round_of(r, k));
  return (l << kHalfBits) | r;
}

uint32_t feistel_inverse(const std::array<uint32_t, 4>& keys, uint32_t y) {
  uint32_t l = y >> kHalfBits;
  uint32_t r = y & kHalfMask;
  for (size_t i = keys.size(); i-- > 0;) r = std::exchange(l, r ^ round_of(l, keys[i]));
  return (l << kHalfBits) | r;
}

}  // namespace

// Cycle walking: the permutation of [0, 2^24) restricted to [1, 2^24) by applying it again to the
// one number it takes to 0, which is a permutation of [1, 2^24) too.
uint32_t KeyIndex::of_number(const std::array<uint32_t, 4>& keys, uint32_t number) {
  uint32_t x = feistel(keys, number);
  while (x == 0) x = feistel(keys, x);
  return x;
}

uint32_t KeyIndex::number_of(const std::array<uint32_t, 4>& keys, uint32_t index) {
  uint32_t x = feistel_inverse(keys, index);
  while (x == 0) x = feistel_inverse(keys, x);
  return x;
}

void MemoryKeys::format(MemoryKeysState& st, uint32_t capacity, uint64_t slots_offset, uint64_t seed) {
  if (capacity >= KeyIndex::kLimit) throw std::invalid_argument("hca::MemoryKeys: max_mr must be below 2^24");
  st = MemoryKeysState{};
  ObjectTable<Mkey>::format(st.table, 1, capacity, slots_offset);
  sim::RandomStream random = sim::RandomStream::for_component(seed, "hca/memory_keys");
  for (uint32_t i = 0; i < MemoryKeysState::kVariants; ++i) st.variants[i] = static_cast<uint8_t>(i + 1);
  for (uint32_t i = MemoryKeysState::kVariants - 1; i > 0; --i) {  // Fisher-Yates
    std::swap(st.variants[i], st.variants[random.below(i + 1)]);
  }
  st.next_variant = static_cast<uint8_t>(random.below(MemoryKeysState::kVariants));
  for (uint32_t& k : st.index_keys) k = static_cast<uint32_t>(random.next() >> 32);
}

uint32_t MemoryKeys::create(const hwif::CreateMkeyIn& in, uint32_t owner) {
  Mkey* m = nullptr;
  const uint32_t number = table_.insert(owner, &m);
  if (number == 0) return 0;
  m->pdn = in.pdn;
  m->access = in.access;
  m->host_addr = in.host_addr;
  m->iova = in.iova;
  m->length = in.length;
  m->dmn = in.dmn;
  // Consecutive keys get consecutive variants of the permutation, so a slot used again within 255
  // keys never gets the key it had: a deregistered key stays invalid.
  const uint8_t variant = st_.variants[st_.next_variant];
  st_.next_variant = static_cast<uint8_t>((st_.next_variant + 1) % MemoryKeysState::kVariants);
  m->key = (KeyIndex::of_number(st_.index_keys, number) << 8) | variant;
  return m->key;
}

uint32_t MemoryKeys::create_window(uint32_t pdn, KeyKind kind, uint32_t owner) {
  hwif::CreateMkeyIn in;
  in.pdn = pdn;
  const uint32_t key = create(in, owner);
  if (key != 0) find(key)->kind = kind;
  return key;
}

Mkey* MemoryKeys::find_index(uint32_t key) { return table_.find(number_of(key)); }

bool MemoryKeys::destroy(uint32_t key) {
  const Mkey* m = find(key);
  return m != nullptr && table_.erase(number_of(key));
}

const Mkey* MemoryKeys::find(uint32_t key) const {
  const Mkey* m = table_.find(number_of(key));
  return (m != nullptr && m->key == key) ? m : nullptr;
}

Mkey* MemoryKeys::find_owned(uint32_t key, uint32_t owner) {
  const uint32_t number = number_of(key);
  Mkey* m = table_.find(number);
  return (m != nullptr && m->key == key && table_.owner_of(number) == owner) ? m : nullptr;
}

uint32_t MemoryKeys::count_for_pd(uint32_t pdn) const {
  uint32_t n = 0;
  table_.for_each([&](uint32_t, const Mkey& m) { n += (m.pdn == pdn) ? 1 : 0; });
  return n;
}

void MemoryKeys::destroy_owned(uint32_t owner) {
  table_.for_each_of(owner, [&](uint32_t index) { table_.erase(index); });
}

}  // namespace softhca::hca
