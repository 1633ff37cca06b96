#include "hca/memory_keys.h"

#include <gtest/gtest.h>

#include <array>

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
  static constexpr uint64_t kSlots = 4096;
  alignas(64) std::array<uint8_t, 64 * 1024> region_{};
  HeapState heap_state_ = [this] {
    HeapState h;
    RegionHeap::format(h, kSlots + MemoryKeys::slot_bytes(kCapacity), region_.size());
    return h;
  }();
  MemoryKeysState state_ = [] {
    MemoryKeysState st;
    MemoryKeys::format(st, kCapacity, kSlots);
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

}  // namespace
}  // namespace softhca::hca
