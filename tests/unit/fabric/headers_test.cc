#include "fabric/packet/headers.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>

namespace softhca::fabric {
namespace {

TEST(Headers, HaveTheSizesOfTheSpec_W1) {
  EXPECT_EQ(sizeof(Lrh), 8u);
  EXPECT_EQ(sizeof(Grh), 40u);
  EXPECT_EQ(sizeof(Bth), 12u);
  EXPECT_EQ(sizeof(Reth), 16u);
  EXPECT_EQ(sizeof(Aeth), 4u);
  EXPECT_EQ(sizeof(Deth), 8u);
  EXPECT_EQ(sizeof(ImmDt), 4u);
  EXPECT_EQ(sizeof(AtomicEth), 28u);
  EXPECT_EQ(sizeof(AtomicAckEth), 8u);
  EXPECT_EQ(sizeof(Ieth), 4u);
}

TEST(Headers, LrhAccessorsReadTheBitFieldsWhereTheSpecPutsThem) {
  // VL 5, LVer 2 | SL 3, Rsv2 0, LNH 2 | DLID 0x1234 | Rsv5 all ones, PktLen 12 | SLID 0xabcd
  const std::array<uint8_t, 8> raw = {0x52, 0x32, 0x12, 0x34, 0xf8, 0x0c, 0xab, 0xcd};
  const Lrh lrh = load_as<Lrh>(raw.data());
  EXPECT_EQ(lrh.vl(), 5);
  EXPECT_EQ(lrh.lver(), 2);
  EXPECT_EQ(lrh.sl(), 3);
  EXPECT_EQ(lrh.lnh(), Lnh::kIbaLocal);
  EXPECT_EQ(lrh.dlid.get(), 0x1234);
  EXPECT_EQ(lrh.pkt_len_words(), 12);  // the reserved bits above PktLen are ignored
  EXPECT_EQ(lrh.slid.get(), 0xabcd);
}

TEST(Headers, LrhSetWritesZeroLVerAndReservedBits) {
  Lrh lrh{};
  lrh.set(0xf, 0x9, Lnh::kIbaGlobal, 0xc001, 0x7ff, 0x0042);
  std::array<uint8_t, 8> raw{};
  store_as(raw.data(), lrh);
  EXPECT_EQ(raw, (std::array<uint8_t, 8>{0xf0, 0x93, 0xc0, 0x01, 0x07, 0xff, 0x00, 0x42}));
  lrh.set_vl(0x3);
  EXPECT_EQ(lrh.vl(), 3);
  EXPECT_EQ(lrh.lver(), 0);
}

TEST(Headers, BthAccessorsReadTheBitFieldsWhereTheSpecPutsThem) {
  // opcode 0x0a | SE 1, M 1, PadCnt 2, TVer 5 | P_Key ffff | Resv8a 0xaa, DestQP 0x123456
  // | AckReq 1, Resv7 5, PSN 0xabcdef
  const std::array<uint8_t, 12> raw = {0x0a, 0xe5, 0xff, 0xff, 0xaa, 0x12, 0x34, 0x56, 0x85, 0xab, 0xcd, 0xef};
  const Bth bth = load_as<Bth>(raw.data());
  EXPECT_EQ(bth.raw_opcode(), 0x0a);
  EXPECT_TRUE(bth.se());
  EXPECT_TRUE(bth.m());
  EXPECT_EQ(bth.pad_count(), 2);
  EXPECT_EQ(bth.tver(), 5);
  EXPECT_EQ(bth.p_key(), 0xffff);
  EXPECT_EQ(bth.dest_qp(), 0x123456u);
  EXPECT_TRUE(bth.ack_req());
  EXPECT_EQ(bth.psn(), 0xabcdefu);
}

TEST(Headers, BthSetWritesZeroTVerResv8aAndResv7) {
  Bth bth{};
  bth.set(0x11, false, true, 3, 0x8001, 0xff123456, true, 0xff000001);
  std::array<uint8_t, 12> raw{};
  store_as(raw.data(), bth);
  EXPECT_EQ(raw, (std::array<uint8_t, 12>{0x11, 0x70, 0x80, 0x01, 0x00, 0x12, 0x34, 0x56, 0x80, 0x00, 0x00, 0x01}));
}

TEST(Headers, GrhWordZeroHoldsVersionTrafficClassAndFlowLabel) {
  Grh grh{};
  grh.set_word0(6, 0xab, 0xcdef1);
  std::array<uint8_t, 40> raw{};
  store_as(raw.data(), grh);
  EXPECT_EQ(raw[0], 0x6a);
  EXPECT_EQ(raw[1], 0xbc);
  EXPECT_EQ(raw[2], 0xde);
  EXPECT_EQ(raw[3], 0xf1);
  EXPECT_EQ(grh.ip_version(), 6);
  EXPECT_EQ(grh.traffic_class(), 0xab);
  EXPECT_EQ(grh.flow_label(), 0xcdef1u);
}

TEST(Headers, AethSplitsSyndromeAndMsn) {
  const std::array<uint8_t, 4> raw = {0x62, 0x00, 0x01, 0x02};
  const Aeth aeth = load_as<Aeth>(raw.data());
  EXPECT_EQ(aeth.syndrome(), 0x62);
  EXPECT_EQ(aeth.msn(), 0x102u);
}

TEST(Headers, DethSourceQpIgnoresTheReservedByte) {
  const std::array<uint8_t, 8> raw = {0x11, 0x22, 0x33, 0x44, 0xff, 0x00, 0x00, 0x07};
  const Deth deth = load_as<Deth>(raw.data());
  EXPECT_EQ(deth.qkey.get(), 0x11223344u);
  EXPECT_EQ(deth.src_qp(), 7u);
}

}  // namespace
}  // namespace softhca::fabric
