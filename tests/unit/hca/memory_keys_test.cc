#include "hca/memory_keys.h"

#include <gtest/gtest.h>

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
  MemoryKeys keys_{16};
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

}  // namespace
}  // namespace softhca::hca
