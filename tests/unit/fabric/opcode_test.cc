#include "fabric/packet/opcode.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace softhca::fabric {
namespace {

TEST(Opcode, ExactlyTheRcUcAndUdOpcodesAreValid) {
  std::set<int> listed;
  for (BthOpcode op : kAllOpcodes) listed.insert(static_cast<int>(op));
  EXPECT_EQ(listed.size(), kAllOpcodes.size());
  for (int raw = 0; raw < 256; ++raw) {
    EXPECT_EQ(is_valid_opcode(static_cast<uint8_t>(raw)), listed.count(raw) == 1) << "opcode " << raw;
  }
}

TEST(Opcode, UcSendAndWriteCarryTheSameHeadersAsRc) {
  for (uint8_t code = 0; code <= 0x0b; ++code) {
    OpcodeInfo rc = opcode_info(code);
    const OpcodeInfo uc = opcode_info(static_cast<uint8_t>(0x20 | code));
    EXPECT_EQ(rc.service, Service::kRc);
    EXPECT_EQ(uc.service, Service::kUc);
    rc.service = Service::kUc;
    EXPECT_EQ(rc.kind, uc.kind);
    EXPECT_EQ(rc.position, uc.position);
    EXPECT_EQ(rc.ext_bytes(), uc.ext_bytes());
    EXPECT_EQ(rc.reth, uc.reth);
    EXPECT_EQ(rc.immdt, uc.immdt);
  }
}

TEST(Opcode, RdmaWriteFirstAndOnlyCarryARethMiddleAndLastDoNot) {
  EXPECT_TRUE(opcode_info(BthOpcode::kRcRdmaWriteFirst).reth);
  EXPECT_TRUE(opcode_info(BthOpcode::kRcRdmaWriteOnly).reth);
  EXPECT_TRUE(opcode_info(BthOpcode::kRcRdmaWriteOnlyImm).reth);
  EXPECT_FALSE(opcode_info(BthOpcode::kRcRdmaWriteMiddle).reth);
  EXPECT_FALSE(opcode_info(BthOpcode::kRcRdmaWriteLast).reth);
  EXPECT_FALSE(opcode_info(BthOpcode::kRcRdmaWriteLastImm).reth);
  EXPECT_TRUE(opcode_info(BthOpcode::kRcRdmaWriteLastImm).immdt);
}

TEST(Opcode, ReadResponseMiddleIsTheOnlyReadResponseWithoutAeth) {
  EXPECT_TRUE(opcode_info(BthOpcode::kRcRdmaReadResponseFirst).aeth);
  EXPECT_FALSE(opcode_info(BthOpcode::kRcRdmaReadResponseMiddle).aeth);
  EXPECT_TRUE(opcode_info(BthOpcode::kRcRdmaReadResponseLast).aeth);
  EXPECT_TRUE(opcode_info(BthOpcode::kRcRdmaReadResponseOnly).aeth);
  for (auto op : {BthOpcode::kRcRdmaReadResponseFirst, BthOpcode::kRcRdmaReadResponseMiddle,
                  BthOpcode::kRcRdmaReadResponseLast, BthOpcode::kRcRdmaReadResponseOnly}) {
    EXPECT_TRUE(opcode_info(op).has_payload);
  }
}

TEST(Opcode, RequestsAndAcknowledgesWithoutDataCarryNoPayload) {
  for (auto op : {BthOpcode::kRcRdmaReadRequest, BthOpcode::kRcAcknowledge, BthOpcode::kRcAtomicAcknowledge,
                  BthOpcode::kRcCompareSwap, BthOpcode::kRcFetchAdd}) {
    EXPECT_FALSE(opcode_info(op).has_payload) << opcode_name(op);
    EXPECT_EQ(opcode_info(op).position, PacketPosition::kOnly);
  }
}

TEST(Opcode, UdSendsCarryADethAndTheImmediateAfterIt) {
  const OpcodeInfo only = opcode_info(BthOpcode::kUdSendOnly);
  const OpcodeInfo imm = opcode_info(BthOpcode::kUdSendOnlyImm);
  EXPECT_EQ(only.service, Service::kUd);
  EXPECT_TRUE(only.deth && !only.immdt);
  EXPECT_TRUE(imm.deth && imm.immdt);
  EXPECT_EQ(imm.ext_bytes(), 12u);
}

TEST(Opcode, SendWithInvalidateCarriesAnIeth) {
  EXPECT_TRUE(opcode_info(BthOpcode::kRcSendLastInv).ieth);
  EXPECT_TRUE(opcode_info(BthOpcode::kRcSendOnlyInv).ieth);
  EXPECT_EQ(opcode_info(BthOpcode::kRcSendOnlyInv).kind, OpKind::kSend);
  EXPECT_EQ(opcode_info(BthOpcode::kRcSendLastInv).position, PacketPosition::kLast);
}

TEST(Opcode, EveryOpcodeHasItsOwnName) {
  std::set<std::string> names;
  for (BthOpcode op : kAllOpcodes) {
    EXPECT_NE(opcode_name(op), "unknown");
    names.insert(std::string(opcode_name(op)));
  }
  EXPECT_EQ(names.size(), kAllOpcodes.size());
  EXPECT_EQ(opcode_name(static_cast<BthOpcode>(0x15)), "unknown");
}

TEST(AethSyndrome, EncodesTypeInBits6To5AndValueInBits4To0) {
  EXPECT_EQ(ack_syndrome(0), 0x00);
  EXPECT_EQ(ack_syndrome(kAethCreditInvalid), 0x1f);
  EXPECT_EQ(rnr_nak_syndrome(0x0e), 0x2e);
  EXPECT_EQ(nak_syndrome(NakCode::kPsnSequenceError), 0x60);
  EXPECT_EQ(nak_syndrome(NakCode::kInvalidRequest), 0x61);
  EXPECT_EQ(nak_syndrome(NakCode::kRemoteAccessError), 0x62);
  EXPECT_EQ(nak_syndrome(NakCode::kRemoteOperationalError), 0x63);
  EXPECT_EQ(nak_syndrome(NakCode::kInvalidRdRequest), 0x64);
}

TEST(AethSyndrome, DecodesWhatItEncodes) {
  EXPECT_TRUE(is_ack(ack_syndrome(7)));
  EXPECT_EQ(syndrome_value(ack_syndrome(7)), 7);
  EXPECT_TRUE(is_rnr_nak(rnr_nak_syndrome(31)));
  EXPECT_EQ(syndrome_value(rnr_nak_syndrome(31)), 31);
  EXPECT_TRUE(is_nak(nak_syndrome(NakCode::kInvalidRequest)));
  EXPECT_EQ(syndrome_value(nak_syndrome(NakCode::kInvalidRequest)), 1);
  EXPECT_EQ(syndrome_type(0x40), AethType::kReserved);
  EXPECT_EQ(syndrome_type(0x80), AethType::kAck);  // bit 7 is reserved, not part of the type
}

}  // namespace
}  // namespace softhca::fabric
