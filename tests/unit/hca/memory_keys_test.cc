#include "hca/memory_keys.h"

#include <gtest/gtest.h>

#include <array>
#include <bitset>
#include <memory>
#include <set>
#include <vector>

#include "hwif/wqe.h"

namespace softhca::hca {
namespace {

using namespace hwif;

class MemoryKeysTest : public ::testing::Test {
 protected:
  uint32_t make(uint32_t access) {
    CreateMkeyIn in;
    in.pdn = 1;
    in.access = access;
    in.host_addr = 0x10000;
    in.iova = 0x7000;
    in.length = 0x1000;
    return keys_.create(in);
  }
  // The keys' state and heap in a small region, as the device lays them out.
  static constexpr uint32_t kCapacity = 16;
  static constexpr uint64_t kSeed = 7;
  static constexpr uint64_t kSlots = 4096;
  alignas(64) std::array<uint8_t, 64 * 1024> region_{};
  HeapState heap_state_ = [this] {
    HeapState h;
    RegionHeap::format(h, kSlots + MemoryKeys::slot_bytes(kCapacity), region_.size());
    return h;
  }();
  MemoryKeysState state_ = [] {
    MemoryKeysState st;
    MemoryKeys::format(st, kCapacity, kSlots, kSeed);
    return st;
  }();
  RegionHeap heap_{region_.data(), heap_state_};
  MemoryKeys keys_{heap_, state_};
};

TEST_F(MemoryKeysTest, AnAddressInsideTheRegionTranslatesToItsHostAddress) {
  const uint32_t k = make(kAccessLocalWrite | kAccessRemoteWrite);
  const Translation t = keys_.translate(k, 1, 0x7010, 0x20, kAccessRemoteWrite);
  EXPECT_EQ(t.result, KeyCheck::kOk);
  EXPECT_EQ(t.host_addr, 0x10010u);
}

TEST_F(MemoryKeysTest, TheWholeRegionIsInBoundsAndOneByteMoreIsNot) {
  const uint32_t k = make(kAccessLocalWrite);
  EXPECT_EQ(keys_.translate(k, 1, 0x7000, 0x1000, 0).result, KeyCheck::kOk);
  EXPECT_EQ(keys_.translate(k, 1, 0x7000, 0x1001, 0).result, KeyCheck::kOutOfBounds);
  EXPECT_EQ(keys_.translate(k, 1, 0x6fff, 1, 0).result, KeyCheck::kOutOfBounds);
  EXPECT_EQ(keys_.translate(k, 1, 0x8000, 1, 0).result, KeyCheck::kOutOfBounds);
  EXPECT_EQ(keys_.translate(k, 1, UINT64_MAX, 2, 0).result, KeyCheck::kOutOfBounds);
}

TEST_F(MemoryKeysTest, AnotherPdOrAMissingRightIsRefused) {
  const uint32_t k = make(kAccessLocalWrite | kAccessRemoteRead);
  EXPECT_EQ(keys_.translate(k, 2, 0x7000, 8, 0).result, KeyCheck::kBadPd);
  EXPECT_EQ(keys_.translate(k, 1, 0x7000, 8, kAccessRemoteWrite).result, KeyCheck::kNoAccess);
  EXPECT_EQ(keys_.translate(k, 1, 0x7000, 8, kAccessRemoteRead).result, KeyCheck::kOk);
}

TEST_F(MemoryKeysTest, ADestroyedKeyIsGoneAndItsSlotGetsANewVariant) {
  const uint32_t k = make(kAccessLocalWrite);
  ASSERT_TRUE(keys_.destroy(k));
  EXPECT_EQ(keys_.translate(k, 1, 0x7000, 8, 0).result, KeyCheck::kBadKey);
  const uint32_t k2 = make(kAccessLocalWrite);
  EXPECT_NE(k2, k);  // same slot, new 8-bit variant: the old key stays invalid
  EXPECT_EQ(keys_.translate(k, 1, 0x7000, 8, 0).result, KeyCheck::kBadKey);
  EXPECT_FALSE(keys_.destroy(k));
}

TEST_F(MemoryKeysTest, TheTableRefusesKeysBeyondItsCapacityAndReusesTheLastFreedSlot) {
  std::array<uint32_t, kCapacity> keys{};
  for (uint32_t& k : keys) ASSERT_NE(k = make(kAccessLocalWrite), 0u);
  EXPECT_EQ(make(kAccessLocalWrite), 0u);  // Expect: full
  ASSERT_TRUE(keys_.destroy(keys[3]));
  ASSERT_TRUE(keys_.destroy(keys[7]));
  EXPECT_EQ(make(kAccessLocalWrite) >> 8, keys[7] >> 8);  // Expect: LIFO reuse, as before
  EXPECT_EQ(make(kAccessLocalWrite) >> 8, keys[3] >> 8);
  EXPECT_EQ(keys_.live(), kCapacity);
}

TEST_F(MemoryKeysTest, DestroyOwnedRemovesExactlyThatOwnersKeys) {
  CreateMkeyIn in;
  in.pdn = 1;
  in.length = 8;
  const uint32_t a = keys_.create(in, 1), b = keys_.create(in, 2), c = keys_.create(in, 1);
  keys_.destroy_owned(1);
  EXPECT_EQ(keys_.find(a), nullptr);
  EXPECT_EQ(keys_.find(c), nullptr);
  EXPECT_NE(keys_.find(b), nullptr);
  EXPECT_EQ(keys_.live(), 1u);
}

TEST_F(MemoryKeysTest, AKeyCacheAnswersAsTranslateWhetherItHoldsTheKeyOrNot) {
  const uint32_t a = make(kAccessLocalWrite);
  const uint32_t b = make(kAccessLocalWrite | kAccessRemoteWrite);
  struct Ask {
    uint32_t key, pdn;
    uint64_t addr, len;
    uint32_t access;
  };
  // Each asked twice in a row (the second from the cache), and keys alternating (a miss each).
  const std::array<Ask, 7> asks = {{{a, 1, 0x7010, 0x20, 0},
                                    {a, 1, 0x7000, 0x1001, 0},
                                    {a, 2, 0x7000, 8, 0},
                                    {a, 1, 0x7000, 8, kAccessRemoteWrite},
                                    {b, 1, 0x7ff8, 8, kAccessRemoteWrite},
                                    {b | 0x80, 1, 0x7000, 8, 0},
                                    {0, 1, 0x7000, 8, 0}}};
  KeyCache cache;
  for (const Ask& q : asks) {
    for (int round = 0; round < 2; ++round) {
      const Translation want = keys_.translate(q.key, q.pdn, q.addr, q.len, q.access);
      const Translation got = cache.translate(keys_, q.key, q.pdn, q.addr, q.len, q.access);
      EXPECT_EQ(got.result, want.result) << "key " << q.key << " round " << round;
      EXPECT_EQ(got.host_addr, want.host_addr);
    }
  }
  // A cache lives for one entry point, which no command interrupts; a new one asks the table.
  ASSERT_TRUE(keys_.destroy(a));
  EXPECT_EQ(KeyCache{}.translate(keys_, a, 1, 0x7000, 8, 0).result, KeyCheck::kBadKey);
}

TEST_F(MemoryKeysTest, KeysStayUniqueAndNoneIsZeroOrTheReceiveTerminator) {
  std::set<uint32_t> live;
  for (uint32_t i = 0; i < kCapacity; ++i) {
    const uint32_t k = make(kAccessLocalWrite);
    EXPECT_NE(k >> 8, 0u);               // Expect: index 0 never used
    EXPECT_NE(k & 0xff, 0u);             // Expect: variant 0 never used, so ...
    EXPECT_NE(k, hwif::kInvalidLkey);    // ... no key is 0 or the receive SGE terminator
    EXPECT_TRUE(live.insert(k).second);  // Expect: unique
  }
  // Deregister and register one at a time, 1000 times: every new key differs from every live key
  // and from the key just destroyed (its slot is the one used again).
  uint32_t victim = *live.begin();
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(keys_.destroy(victim));
    live.erase(victim);
    const uint32_t k = make(kAccessLocalWrite);
    EXPECT_NE(k, victim);
    EXPECT_TRUE(live.insert(k).second) << "key 0x" << std::hex << k << " handed out twice";
    EXPECT_EQ(keys_.translate(victim, 1, 0x7000, 8, 0).result, KeyCheck::kBadKey);
    victim = k;
  }
}

// The first key a device formatted with `seed` hands out.
uint32_t first_key(uint64_t seed) {
  alignas(64) static std::array<uint8_t, 64 * 1024> region{};
  constexpr uint64_t kSlots = 4096;
  HeapState heap_state;
  RegionHeap::format(heap_state, kSlots + MemoryKeys::slot_bytes(16), region.size());
  MemoryKeysState st;
  MemoryKeys::format(st, 16, kSlots, seed);
  RegionHeap heap(region.data(), heap_state);
  MemoryKeys keys(heap, st);
  CreateMkeyIn in;
  in.pdn = 1;
  in.length = 8;
  return keys.create(in);
}

TEST(MemoryKeySeeds, DevicesWithDifferentSeedsHandOutDifferentFirstKeys) {
  // Before: every fresh device's first key was 0x101. Now index and variant come from the seed.
  std::set<uint32_t> keys, indexes, variants;
  for (uint64_t seed = 1; seed <= 32; ++seed) {
    const uint32_t k = first_key(seed);
    keys.insert(k);
    indexes.insert(k >> 8);
    variants.insert(k & 0xff);
  }
  EXPECT_EQ(keys.size(), 32u);
  EXPECT_EQ(indexes.size(), 32u);   // 32 seeds, 32 indexes of 2^24 - 1 for the same table slot
  EXPECT_GE(variants.size(), 24u);  // 32 draws of 255: a repeat or two, never mostly the same
  EXPECT_EQ(keys.count(0x101), 0u);
}

TEST(MemoryKeySeeds, TheSameSeedGivesTheSameKeys) {
  // Sim mode: a run with the same seed is the same run.
  for (uint64_t seed : {0ull, 1ull, 0xfeedull}) EXPECT_EQ(first_key(seed), first_key(seed)) << seed;
}

TEST(KeyIndexPermutation, EveryIndexIsTheImageOfExactlyOneNumberAndZeroOfNone) {
  const std::array<uint32_t, 4> round_keys = {0x01234567, 0x89abcdef, 0xdeadbeef, 0x0badf00d};
  auto seen = std::make_unique<std::bitset<KeyIndex::kLimit>>();
  for (uint32_t n = 1; n < KeyIndex::kLimit; ++n) {
    const uint32_t index = KeyIndex::of_number(round_keys, n);
    ASSERT_GT(index, 0u);
    ASSERT_LT(index, KeyIndex::kLimit);
    ASSERT_FALSE(seen->test(index)) << "index " << index << " twice";
    seen->set(index);
    if (n % 4099 == 0) {
      ASSERT_EQ(KeyIndex::number_of(round_keys, index), n);  // a sample of inverses
    }
  }
  EXPECT_EQ(seen->count(), KeyIndex::kLimit - 1);
  // Neighbouring numbers land far apart: one key says nothing about the next one's index.
  const uint32_t a = KeyIndex::of_number(round_keys, 1), b = KeyIndex::of_number(round_keys, 2);
  EXPECT_GT(a > b ? a - b : b - a, 256u);
}

TEST(MappedKey, GivesMemoryOnlyForItsKeyInsideTheRegionAndTheMappedPart) {
  std::array<uint8_t, 0x100> memory{};
  Mkey key;
  key.key = 0x105;
  key.iova = 0x7000;
  key.length = 0x200;  // the region: 0x200 bytes, of which the first 0x100 are mapped
  const MappedKey m(key, memory);
  EXPECT_EQ(m.at(0x105, 0x7000, 0x100), memory.data());
  EXPECT_EQ(m.at(0x105, 0x70f8, 8), memory.data() + 0xf8);
  EXPECT_EQ(m.at(0x105, 0x70f9, 8), nullptr);   // Expect: past the mapped part
  EXPECT_EQ(m.at(0x106, 0x7000, 8), nullptr);   // Expect: another key
  EXPECT_EQ(m.at(0x105, 0x6fff, 8), nullptr);   // Expect: before the region
  EXPECT_EQ(m.at(0x105, UINT64_MAX, 2), nullptr);
  EXPECT_EQ(MappedKey{}.at(0, 0, 0), nullptr);  // Expect: key 0 is no key
  key.length = 0x80;  // a region shorter than the mapping
  const MappedKey short_region(key, memory);
  EXPECT_EQ(short_region.at(0x105, 0x7078, 8), memory.data() + 0x78);
  EXPECT_EQ(short_region.at(0x105, 0x7079, 8), nullptr);  // Expect: past the region's end
  // A region whose I/O addresses run up to the top of the 64-bit space: an address below it
  // must not come back in through the wrap.
  std::array<uint8_t, 0x2000> high_memory{};
  key.iova = 0xffff'ffff'ffff'f000ull;
  key.length = 0x2000;
  const MappedKey high(key, high_memory);
  EXPECT_EQ(high.at(0x105, 0xffff'ffff'ffff'f000ull, 8), high_memory.data());
  EXPECT_EQ(high.at(0x105, 0x800, 8), nullptr);  // Expect: below the region, though iova + 0x1800 wraps to it
}

}  // namespace
}  // namespace softhca::hca
