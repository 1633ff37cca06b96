// Invalid and hostile packets at a receiving device (issues 7, 15): wrong destination LID or QPN, a
// source the QP is not connected to, PSNs outside the window, a wrong P_Key or Q_Key, opcodes of
// another transport or of none, headers cut at each boundary, RETH lengths that disagree with the
// payload. Each must be dropped and counted
// under exactly one DropReason (or, where the IB specification makes the responder answer, answered
// as it says), write nothing, complete nothing, and leave the QP taking the next valid packet.
// Every case is a row of docs/bad-input.md (tests/conformance/bad_input_table.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "bad_input_table.h"
#include "device_harness.h"
#include "hca/device_stats.h"

namespace softhca::test {
namespace {

using conformance::expect_row;
using fabric::BthOpcode;
using hca::DropReason;

constexpr uint32_t kRqPsn = 100;
constexpr uint32_t kSqPsn = 500;
constexpr uint64_t kTarget = 0x100;   // where a hostile WRITE would land in the harness buffer
constexpr uint64_t kProbe = 0x1000;   // where the valid WRITE that follows lands
constexpr uint32_t kQkey = 0x11111111;  // the harness's UD Q_Key
constexpr uint16_t kForeignPkey = 0x1234;  // not in the port's P_Key table (index 0 is 0xffff)

// Which drop counters rose between two snapshots: "unknown_qp +1", or "none".
std::string drops_between(const hca::DeviceStats& before, const hca::DeviceStats& after) {
  std::string out;
  for (size_t i = 0; i < before.dropped.size(); ++i) {
    const uint64_t d = after.dropped[i] - before.dropped[i];
    if (d == 0) continue;
    if (!out.empty()) out += ", ";
    out += std::string(hca::to_string(static_cast<DropReason>(i))) + " +" + std::to_string(d);
  }
  return out.empty() ? "no drop counted" : "dropped, " + out;
}

// The wire bytes of f with payload, then the same packet's bytes with the LRH PktLen and both CRCs
// made right again after `edit` changed them (a hostile sender, not a damaged link).
std::vector<uint8_t> wire(const fabric::PacketFields& f, std::span<const uint8_t> payload) {
  std::vector<uint8_t> out(fabric::kMaxPacketBytes);
  out.resize(fabric::serialize(f, payload, out));
  return out;
}
void reseal(std::vector<uint8_t>& p) {
  const size_t words = (p.size() - fabric::kVcrcBytes) / fabric::kWordBytes;
  p[4] = static_cast<uint8_t>((p[4] & 0xf8) | ((words >> 8) & 0x7));
  p[5] = static_cast<uint8_t>(words & 0xff);
  const size_t icrc_at = p.size() - fabric::kIcrcBytes - fabric::kVcrcBytes;
  const uint32_t icrc = fabric::compute_icrc(std::span<const uint8_t>(p).first(icrc_at));
  for (size_t i = 0; i < 4; ++i) p[icrc_at + i] = static_cast<uint8_t>(icrc >> (8 * i));
  const uint16_t vcrc = fabric::compute_vcrc(std::span<const uint8_t>(p).first(icrc_at + fabric::kIcrcBytes));
  p[p.size() - 2] = static_cast<uint8_t>(vcrc & 0xff);
  p[p.size() - 1] = static_cast<uint8_t>(vcrc >> 8);
}
// The first `keep` bytes of a packet (LRH onward), closed with a fresh ICRC and VCRC.
std::vector<uint8_t> cut(std::vector<uint8_t> p, size_t keep) {
  p.resize(keep);
  p.resize(keep + fabric::kIcrcBytes + fabric::kVcrcBytes);
  reseal(p);
  return p;
}

class HostilePackets : public ::testing::Test {
 protected:
  explicit HostilePackets(hwif::QpType type = hwif::QpType::kRc,
                          const hca::DeviceConfig& config = hca::default_device_config(0))
      : h(type, config) {}
  void SetUp() override {
    ASSERT_EQ(h.connect(kSqPsn, kRqPsn), 0);
    for (size_t i = 0; i < 64; ++i) h.buf()[kTarget + i] = static_cast<uint8_t>(0xa0 + i);
  }

  fabric::PacketFields write_only(uint32_t psn, uint64_t offset, uint32_t dma_len) {
    auto f = h.request(BthOpcode::kRcRdmaWriteOnly, psn);
    f.reth = fabric::RethFields{h.buf_addr() + offset, RKey(h.key()), dma_len};
    return f;
  }

  // Feeds the hostile packet (by a callback, so any entry point can be used), then one valid
  // in-order packet, and says what happened: drops, packets sent, CQEs, the target bytes, and
  // whether the valid packet was accepted.
  template <class Inject>
  std::string outcome(Inject inject_hostile) {
    const std::vector<uint8_t> target_before(h.buf() + kTarget, h.buf() + kTarget + 64);
    const hca::DeviceStats before = h.device().stats();
    inject_hostile();
    const hca::DeviceStats after = h.device().stats();
    std::string out = drops_between(before, after);
    out += "; ";
    out += sent_summary(h.take_sent());
    out += h.take_cqes().empty() ? "; no CQE" : "; a CQE";
    out += std::equal(target_before.begin(), target_before.end(), h.buf() + kTarget) ? "; nothing written"
                                                                                     : "; memory WRITTEN";
    out += "; ";
    out += next_valid_accepted();
    return out;
  }

  std::string sent_summary(const std::vector<Captured>& sent) const {
    if (sent.empty()) return "nothing sent";
    std::string s;
    for (const Captured& c : sent) {
      if (!s.empty()) s += ", ";
      if (!c.f.aeth) {
        s += "a packet";
      } else if (fabric::is_ack(c.f.aeth->syndrome)) {
        s += "ACK";
      } else if (c.f.aeth->syndrome == fabric::nak_syndrome(fabric::NakCode::kPsnSequenceError)) {
        s += "NAK PSN sequence error";
      } else if (c.f.aeth->syndrome == fabric::nak_syndrome(fabric::NakCode::kInvalidRequest)) {
        s += "NAK invalid request";
      } else if (c.f.aeth->syndrome == fabric::nak_syndrome(fabric::NakCode::kRemoteAccessError)) {
        s += "NAK remote access error";
      } else {
        s += "another NAK";
      }
      s += " (PSN ";
      s += std::to_string(c.f.psn.value());
      s += ")";
    }
    return s;
  }

  // RC: a WRITE at the expected PSN lands and is acknowledged. Overridden for UD.
  virtual std::string next_valid_accepted() {
    const std::array<uint8_t, 4> data = {0xc1, 0xc2, 0xc3, 0xc4};
    auto f = write_only(expected_psn_, kProbe, 4);
    if (h.type() == hwif::QpType::kUc) f.opcode = BthOpcode::kUcRdmaWriteOnly;
    h.inject(f, data);
    const auto sent = h.take_sent();
    const bool acked = h.type() == hwif::QpType::kUc || (sent.size() == 1 && sent[0].f.aeth &&
                                                         fabric::is_ack(sent[0].f.aeth->syndrome));
    const bool landed = std::equal(data.begin(), data.end(), h.buf() + kProbe);
    return acked && landed ? "next valid WRITE accepted" : "next valid WRITE REFUSED";
  }

  // "QP RTS", "QP ERR", ...: the QP's state as QUERY_QP reports it.
  std::string qp_state() {
    hwif::QueryQpOut q{};
    if (hwif::exec_cmd(h.device(), hwif::QueryQpIn{h.qpn()}, q) != 0) return "QP NOT QUERIED";
    switch (q.attr.state) {
      case hwif::QpState::kRts: return "QP RTS";
      case hwif::QpState::kErr: return "QP ERR";
      default: return "QP in another state";
    }
  }

  DeviceHarness h;
  uint32_t expected_psn_ = kRqPsn;
};

const std::string kDroppedClean = "; nothing sent; no CQE; nothing written; next valid WRITE accepted";

// ---- addressing and keys ------------------------------------------------------------------------

TEST_F(HostilePackets, ADestinationQpnThatDoesNotExistIsDroppedAsUnknownQp) {
  auto f = write_only(kRqPsn, kTarget, 8);
  f.dest_qp = Qpn(h.qpn() + 1);
  expect_row("packet: RC RDMA WRITE Only to a destination QPN that does not exist", "dropped, unknown_qp +1" + kDroppedClean,
             outcome([&] { h.inject(f, std::array<uint8_t, 8>{}); }));
}

TEST_F(HostilePackets, ADestinationLidOtherThanThePortsIsDroppedAsWrongLid) {
  auto f = write_only(kRqPsn, kTarget, 8);
  f.dlid = Lid(h.device().lid() + 7);
  expect_row("packet: RC RDMA WRITE Only whose DLID is not the port's LID", "dropped, wrong_lid +1" + kDroppedClean,
             outcome([&] { h.inject(f, std::array<uint8_t, 8>{}); }));
}

TEST_F(HostilePackets, AForeignPkeyIsDroppedAsBadPkey) {
  auto f = write_only(kRqPsn, kTarget, 8);
  f.pkey = kForeignPkey;
  expect_row("packet: RC RDMA WRITE Only with a P_Key (0x1234) other than the QP's", "dropped, bad_pkey +1" + kDroppedClean,
             outcome([&] { h.inject(f, std::array<uint8_t, 8>{}); }));
}

TEST_F(HostilePackets, AnOpcodeOfAnotherTransportIsDroppedAsWrongTransport) {
  auto uc = write_only(kRqPsn, kTarget, 8);
  uc.opcode = BthOpcode::kUcRdmaWriteOnly;
  expect_row("packet: UC RDMA WRITE Only to an RC QP", "dropped, wrong_transport +1" + kDroppedClean,
             outcome([&] { h.inject(uc, std::array<uint8_t, 8>{}); }));
  auto ud = h.request(BthOpcode::kUdSendOnly, kRqPsn);
  ud.deth = fabric::DethFields{kQkey, Qpn(DeviceHarness::kPeerQpn)};
  expect_row("packet: UD SEND Only to an RC QP", "dropped, wrong_transport +1" + kDroppedClean,
             outcome([&] { h.inject(ud, std::array<uint8_t, 8>{}); }));
}

TEST_F(HostilePackets, AnOpcodeOutsideTheTableIsDroppedAsMalformed) {
  std::vector<uint8_t> p = wire(write_only(kRqPsn, kTarget, 8), std::array<uint8_t, 8>{});
  p[fabric::kLrhBytes] = 0x1f;  // BTH OpCode: RC 0x1F is reserved (IBA table 38)
  reseal(p);
  expect_row("packet: RC RDMA WRITE Only with its BTH opcode set to the reserved 0x1F (CRCs valid)",
             "dropped, malformed +1" + kDroppedClean, outcome([&] { h.device().receive(p); }));
}

TEST_F(HostilePackets, ABadIcrcIsDroppedAsMalformed) {
  std::vector<uint8_t> p = wire(write_only(kRqPsn, kTarget, 8), std::array<uint8_t, 8>{});
  p[p.size() - fabric::kVcrcBytes - 1] ^= 0x01;  // an ICRC bit; then a VCRC that covers it
  const uint16_t vcrc = fabric::compute_vcrc(std::span<const uint8_t>(p).first(p.size() - fabric::kVcrcBytes));
  p[p.size() - 2] = static_cast<uint8_t>(vcrc & 0xff);
  p[p.size() - 1] = static_cast<uint8_t>(vcrc >> 8);
  expect_row("packet: RC RDMA WRITE Only with a wrong ICRC behind a valid VCRC", "dropped, malformed +1" + kDroppedClean,
             outcome([&] { h.device().receive(p); }));
}

// ---- PSNs ---------------------------------------------------------------------------------------

TEST_F(HostilePackets, AFuturePsnIsDroppedOnceNakedAndTheExpectedPsnStillTaken) {
  // IBA 9.7.5.1.2: a PSN ahead of the expected one is a sequence error, NAKed once per gap.
  const std::string expected = "dropped, psn_out_of_window +1; NAK PSN sequence error (PSN 100); no CQE; nothing "
                               "written; next valid WRITE accepted";
  expect_row("packet: RC RDMA WRITE Only 5 PSNs ahead of the expected PSN", expected,
             outcome([&] { h.inject(write_only(kRqPsn + 5, kTarget, 8), std::array<uint8_t, 8>{}); }),
             "IBA 9.7.5.1.2: one NAK per gap");
}

TEST_F(HostilePackets, APsnHalfTheSpaceBehindIsADuplicateAndNotExecuted) {
  // IBA 9.7.5.1.1: PSNs up to 2^23 behind the expected one are duplicates: acknowledged again
  // (with the last in-order PSN) and never executed a second time.
  const uint32_t far_behind = (kRqPsn - (1u << 23)) & Psn::kMask;
  const hca::DeviceStats before = h.device().stats();
  std::string observed = outcome([&] { h.inject(write_only(far_behind, kTarget, 8), std::array<uint8_t, 8>{}); });
  observed += "; duplicates +";
  observed += std::to_string(h.device().stats().duplicates - before.duplicates);
  expect_row("packet: RC RDMA WRITE Only 2^23 PSNs behind the expected PSN",
             "no drop counted; ACK (PSN 99); no CQE; nothing written; next valid WRITE accepted; duplicates +1",
             observed, "IBA 9.7.5.1.1: a duplicate");
}

// ---- where a packet comes from (IBA 9.6.1.5) -----------------------------------------------------

constexpr uint16_t kStrangerLid = 23;  // a LID on the subnet that the QP is not connected to

TEST_F(HostilePackets, AWriteFromAnotherLidThanThePathsIsDroppedAsBadSource) {
  // Everything a forger can learn or guess is right (QPN, PSN, rkey, VA); only the SLID is not the
  // peer's.
  auto f = write_only(kRqPsn, kTarget, 8);
  f.slid = Lid(kStrangerLid);
  const std::string observed = outcome([&] { h.inject(f, std::array<uint8_t, 8>{}); }) + "; " + qp_state();
  expect_row("packet: RC RDMA WRITE Only from an SLID other than the QP's path DLID (QPN, PSN, rkey and VA right)",
             "dropped, bad_source +1" + kDroppedClean + "; QP RTS", observed, "IBA 9.6.1.5");
}

TEST_F(HostilePackets, AWrongRkeyFromTheWrongSourceLeavesTheQpAsItWas) {
  auto f = write_only(kRqPsn, kTarget, 8);
  f.reth->rkey = RKey(h.key() ^ 0x5a5a00);  // names no key
  f.slid = Lid(kStrangerLid);
  std::string observed = outcome([&] { h.inject(f, std::array<uint8_t, 8>{}); }) + "; " + qp_state();
  expect_row("packet: RC RDMA WRITE Only with an rkey that names no MR, from an SLID other than the path's",
             "dropped, bad_source +1" + kDroppedClean + "; QP RTS", observed,
             "a packet failing the source check never changes QP state");
  // From the peer, the same packet (at the PSN now expected: the valid WRITE took 100) is the
  // peer's fault: NAKed, and the QP goes to error.
  f.slid = Lid(DeviceHarness::kPeerLid);
  f.psn = Psn(kRqPsn + 1);
  const hca::DeviceStats before = h.device().stats();
  h.inject(f, std::array<uint8_t, 8>{});
  observed = drops_between(before, h.device().stats()) + "; " + sent_summary(h.take_sent()) + "; " + qp_state();
  expect_row("packet: RC RDMA WRITE Only with an rkey that names no MR, from the QP's peer",
             "no drop counted; NAK remote access error (PSN 101); QP ERR", observed,
             "IBA 9.7.5.1.4 / 9.9.3.1: the responder NAKs and its QP goes to error");
}

TEST_F(HostilePackets, AStalePsnFromTheWrongSourceDrawsNoAck) {
  const uint32_t stale = (kRqPsn - 7) & Psn::kMask;
  auto f = write_only(stale, kTarget, 8);
  f.slid = Lid(kStrangerLid);
  const hca::DeviceStats before = h.device().stats();
  std::string observed = outcome([&] { h.inject(f, std::array<uint8_t, 8>{}); });
  observed += "; duplicates +" + std::to_string(h.device().stats().duplicates - before.duplicates);
  expect_row("packet: RC RDMA WRITE Only 7 PSNs behind the expected PSN, from an SLID other than the path's",
             "dropped, bad_source +1" + kDroppedClean + "; duplicates +0", observed,
             "from the peer it would draw an ACK (IBA 9.7.5.1.1); from elsewhere, nothing");
}

TEST_F(HostilePackets, PastInOrderAndFuturePsnsFromTheWrongSourceAreAllDroppedSilently) {
  const std::array<uint8_t, 8> data = {1, 2, 3, 4, 5, 6, 7, 8};
  auto from = [&](uint16_t slid, uint32_t psn) {
    auto f = write_only(psn, kTarget, 8);
    f.slid = Lid(slid);
    const hca::DeviceStats before = h.device().stats();
    h.inject(f, data);
    return drops_between(before, h.device().stats()) + "; " + sent_summary(h.take_sent());
  };
  // Expect: a past PSN from a stranger: dropped, no ACK.
  EXPECT_EQ(from(kStrangerLid, kRqPsn - 1), "dropped, bad_source +1; nothing sent");
  // Expect: the expected PSN from a stranger: dropped, no ACK, nothing written, the PSN still expected.
  EXPECT_EQ(from(kStrangerLid, kRqPsn), "dropped, bad_source +1; nothing sent");
  EXPECT_EQ(h.buf()[kTarget], 0xa0);
  // Expect: a future PSN from a stranger: dropped, no NAK (a sequence-error NAK stays the peer's).
  EXPECT_EQ(from(kStrangerLid, kRqPsn + 3), "dropped, bad_source +1; nothing sent");
  // Expect: the same three from the peer: a duplicate ACKed with the last PSN taken, ...
  EXPECT_EQ(from(DeviceHarness::kPeerLid, kRqPsn - 1), "no drop counted; ACK (PSN 99)");
  // Expect: ... the expected PSN written and ACKed, ...
  EXPECT_EQ(from(DeviceHarness::kPeerLid, kRqPsn), "no drop counted; ACK (PSN 100)");
  EXPECT_TRUE(std::equal(data.begin(), data.end(), h.buf() + kTarget));
  // Expect: ... and a gap NAKed once with the PSN now expected.
  EXPECT_EQ(from(DeviceHarness::kPeerLid, kRqPsn + 3), "dropped, psn_out_of_window +1; NAK PSN sequence error (PSN 101)");
  EXPECT_EQ(qp_state(), "QP RTS");
}

// ---- partitions (IBA 10.9) -----------------------------------------------------------------------

TEST(PkeyMatching, KeysMatchWhenEqualValidAndNotBothLimited) {
  EXPECT_TRUE(hca::pkeys_match(0xffff, 0xffff));   // full and full
  EXPECT_TRUE(hca::pkeys_match(0x7fff, 0xffff));   // limited and full, either way round
  EXPECT_TRUE(hca::pkeys_match(0xffff, 0x7fff));
  EXPECT_FALSE(hca::pkeys_match(0x7fff, 0x7fff));  // limited and limited
  EXPECT_FALSE(hca::pkeys_match(0x9234, 0xffff));  // another partition
  EXPECT_FALSE(hca::pkeys_match(0x8000, 0x8000));  // the invalid P_Key matches nothing, itself included
  EXPECT_FALSE(hca::pkeys_match(0x8000, 0x0000));
}

// A port whose P_Key table holds, at index 1, partition 0x1234 as a limited member; the QP uses it
// and its peer is a full member (requests carry 0x9234).
hca::DeviceConfig limited_member_port() {
  hca::DeviceConfig c = hca::default_device_config(0);
  c.port.pkeys[1] = 0x1234;
  return c;
}

class LimitedMemberPackets : public HostilePackets {
 protected:
  LimitedMemberPackets() : HostilePackets(hwif::QpType::kRc, limited_member_port()) {}
  void SetUp() override {
    h.use_pkey(1, 0x9234);
    HostilePackets::SetUp();
  }
};

TEST_F(LimitedMemberPackets, ALimitedMemberPkeyToALimitedMemberIsDroppedAsBadPkey) {
  auto f = write_only(kRqPsn, kTarget, 8);
  f.pkey = 0x1234;
  expect_row("packet: RC RDMA WRITE Only with P_Key 0x1234 (a limited member) to a QP whose P_Key table entry is 0x1234 "
             "(a limited member too)",
             "dropped, bad_pkey +1" + kDroppedClean, outcome([&] { h.inject(f, std::array<uint8_t, 8>{}); }),
             "IBA 10.9: limited members do not talk to each other");
}

class EmptyPkeyEntryPackets : public HostilePackets {
 protected:
  void SetUp() override {
    h.use_pkey(1, 0x8000);  // the default table's index 1 is empty (0x0000)
    HostilePackets::SetUp();
  }
};

TEST_F(EmptyPkeyEntryPackets, TheInvalidPkeyMatchesNoEntryNotEvenAnEmptyOne) {
  const hca::DeviceStats before = h.device().stats();
  h.inject(write_only(kRqPsn, kTarget, 8), std::array<uint8_t, 8>{});
  std::string observed = drops_between(before, h.device().stats()) + "; " + sent_summary(h.take_sent());
  observed += h.buf()[kTarget] == 0xa0 ? "; nothing written" : "; memory WRITTEN";
  expect_row("packet: RC RDMA WRITE Only with the invalid P_Key 0x8000 to a QP whose P_Key index names an empty "
             "table entry",
             "dropped, bad_pkey +1; nothing sent; nothing written", observed,
             "IBA 10.9: 0x0000 and 0x8000 are the invalid P_Key");
}

// ---- truncated headers --------------------------------------------------------------------------

struct CutCase {
  const char* name;
  const char* input;
  bool global;  // with a GRH
  size_t keep;  // bytes kept from the LRH on (before a fresh ICRC and VCRC), or 0: cut the frame raw
};

class TruncatedHeaders : public HostilePackets, public ::testing::WithParamInterface<CutCase> {};

TEST_P(TruncatedHeaders, AreDroppedAsMalformed) {
  const CutCase& c = GetParam();
  auto f = write_only(kRqPsn, kTarget, 8);
  if (c.global) f.grh = fabric::GrhFields{0, 0, 64, fabric::Gid{0xfe, 0x80}, fabric::Gid{0xfe, 0x80, 1}};
  std::vector<uint8_t> p = wire(f, std::array<uint8_t, 8>{1, 2, 3, 4, 5, 6, 7, 8});
  if (c.keep == 0) {
    p.resize(p.size() - 9);  // the frame ends inside the payload; PktLen and CRCs as they were
  } else {
    p = cut(p, c.keep);
  }
  expect_row(c.input, "dropped, malformed +1" + kDroppedClean, outcome([&] { h.device().receive(p); }));
}

constexpr size_t kLrh = fabric::kLrhBytes;
constexpr size_t kGrh = fabric::kGrhBytes;
constexpr size_t kBth = fabric::kBthBytes;
constexpr size_t kReth = fabric::kRethBytes;

INSTANTIATE_TEST_SUITE_P(
    EachBoundary, TruncatedHeaders,
    ::testing::Values(
        CutCase{"RawCut", "packet: RC RDMA WRITE Only whose frame ends 9 bytes early (PktLen and CRCs unchanged)",
                false, 0},
        CutCase{"LrhOnly", "packet: LRH alone, then ICRC and VCRC (PktLen and CRCs made valid)", false, kLrh},
        CutCase{"InsideBth", "packet: LRH and half a BTH (PktLen and CRCs made valid)", false, kLrh + kBth / 2},
        CutCase{"BthWithoutReth", "packet: LRH and the BTH of an RDMA WRITE Only, no RETH (PktLen and CRCs made valid)",
                false, kLrh + kBth},
        CutCase{"InsideReth", "packet: LRH, BTH and half the RETH of an RDMA WRITE Only (PktLen and CRCs made valid)",
                false, kLrh + kBth + kReth / 2},
        CutCase{"InsideGrh", "packet: LRH (LNH = GRH) and half a GRH (PktLen and CRCs made valid)", true,
                kLrh + kGrh / 2},
        CutCase{"GrhWithoutBth", "packet: LRH and a whole GRH, no BTH (PktLen and CRCs made valid)", true,
                kLrh + kGrh}),
    [](const ::testing::TestParamInfo<CutCase>& tp) { return std::string(tp.param.name); });

// ---- RETH lengths that disagree with the payload -------------------------------------------------

class UcHostilePackets : public HostilePackets {
 protected:
  UcHostilePackets() : HostilePackets(hwif::QpType::kUc) {}
};

TEST_F(UcHostilePackets, ARethLengthBeyondThePayloadIsDroppedAsMalformed) {
  auto f = write_only(kRqPsn, kTarget, 100);
  f.opcode = BthOpcode::kUcRdmaWriteOnly;
  expected_psn_ = kRqPsn + 1;
  expect_row("packet: UC RDMA WRITE Only whose RETH DMA length (100) is beyond its 8-byte payload",
             "dropped, malformed +1; nothing sent; no CQE; nothing written; next valid WRITE accepted",
             outcome([&] { h.inject(f, std::array<uint8_t, 8>{}); }), "UC: no NAK, the message is dropped");
}

TEST_F(UcHostilePackets, APayloadBeyondTheRethLengthIsDroppedAsMalformed) {
  auto f = write_only(kRqPsn, kTarget, 4);
  f.opcode = BthOpcode::kUcRdmaWriteOnly;
  expected_psn_ = kRqPsn + 1;
  expect_row("packet: UC RDMA WRITE Only carrying 8 bytes behind a RETH DMA length of 4",
             "dropped, malformed +1; nothing sent; no CQE; nothing written; next valid WRITE accepted",
             outcome([&] { h.inject(f, std::array<uint8_t, 8>{}); }), "UC: no NAK, the message is dropped");
}

TEST_F(HostilePackets, OnRcALengthMismatchIsNakedInvalidRequestAndWritesNothing) {
  // IBA 9.7.5.1.4 / table 46: a length error at an RC responder is an Invalid Request NAK, and
  // the responder QP goes to the error state (as rxe does); the QP then takes nothing.
  const hca::DeviceStats before = h.device().stats();
  h.inject(write_only(kRqPsn, kTarget, 100), std::array<uint8_t, 8>{});
  std::string observed = drops_between(before, h.device().stats()) + "; " + sent_summary(h.take_sent());
  observed += h.take_cqes().empty() ? "; no CQE" : "; a CQE";
  hwif::QueryQpOut q{};
  ASSERT_EQ(hwif::exec_cmd(h.device(), hwif::QueryQpIn{h.qpn()}, q), 0);
  observed += q.attr.state == hwif::QpState::kErr ? "; QP in error" : "; QP not in error";
  observed += h.buf()[kTarget] == 0xa0 ? "; nothing written" : "; memory WRITTEN";
  expect_row("packet: RC RDMA WRITE Only whose RETH DMA length (100) is beyond its 8-byte payload",
             "no drop counted; NAK invalid request (PSN 100); no CQE; QP in error; nothing written", observed,
             "IBA 9.7.5.1.4: the RC responder NAKs and its QP goes to error");
}

TEST_F(HostilePackets, OnRcAWriteLongerThanItsRethGivesTheResponderQpReqErrAndNoOtherEvent) {
  // IBA 11.6.3.1: an invalid request with no receive WQE to report it in is the affiliated
  // Invalid Request Local Work Queue Error (IBV_EVENT_QP_REQ_ERR) of the responder QP.
  EXPECT_TRUE(h.take_events().empty());
  h.inject(write_only(kRqPsn, kTarget, 100), std::array<uint8_t, 8>{});
  const std::vector<hwif::Eqe> events = h.take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, hwif::kEqeTypeWqInvalidRequest);
  EXPECT_EQ(events[0].element.get(), h.qpn());
}

TEST_F(HostilePackets, OnRcAWriteWithAnRkeyThatNamesNoMrGivesTheResponderQpAccessErr) {
  auto f = write_only(kRqPsn, kTarget, 8);
  f.reth->rkey = RKey(h.key() ^ 0x100);
  h.inject(f, std::array<uint8_t, 8>{});
  const std::vector<hwif::Eqe> events = h.take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, hwif::kEqeTypeWqAccessError);
  EXPECT_EQ(events[0].element.get(), h.qpn());
}

// ---- UD ------------------------------------------------------------------------------------------

class UdHostilePackets : public HostilePackets {
 protected:
  UdHostilePackets() : HostilePackets(hwif::QpType::kUd) {}
  void SetUp() override {
    HostilePackets::SetUp();
    h.post_recv(256, kProbe);
  }
  fabric::PacketFields datagram(uint32_t qkey) {
    auto f = h.request(BthOpcode::kUdSendOnly, 0);
    f.ack_req = false;
    f.deth = fabric::DethFields{qkey, Qpn(DeviceHarness::kPeerQpn)};
    return f;
  }
  // UD: a datagram with the right Q_Key is received into the posted buffer (after the GRH slot).
  std::string next_valid_accepted() override {
    const std::array<uint8_t, 4> data = {0xd1, 0xd2, 0xd3, 0xd4};
    h.inject(datagram(kQkey), data);
    const auto cqes = h.take_cqes();
    const bool received = cqes.size() == 1 && cqes[0].opcode == hwif::CqeOpcode::kRespSend &&
                          std::equal(data.begin(), data.end(), h.buf() + kProbe + 40);
    return received ? "next valid datagram received" : "next valid datagram NOT received";
  }
};

TEST_F(UdHostilePackets, AWrongQkeyIsDroppedAsBadQkey) {
  expect_row("packet: UD SEND Only with a Q_Key other than the QP's",
             "dropped, bad_qkey +1; nothing sent; no CQE; nothing written; next valid datagram received",
             outcome([&] { h.inject(datagram(kQkey ^ 1), std::array<uint8_t, 8>{}); }));
}

TEST_F(UdHostilePackets, ADatagramWithoutDethIsDroppedAsMalformed) {
  // A UD opcode whose DETH was cut away: the LRH and BTH stay, PktLen and CRCs made valid.
  std::vector<uint8_t> p = cut(wire(datagram(kQkey), std::array<uint8_t, 8>{}), kLrh + kBth);
  expect_row("packet: UD SEND Only cut after its BTH (no DETH; PktLen and CRCs made valid)",
             "dropped, malformed +1; nothing sent; no CQE; nothing written; next valid datagram received",
             outcome([&] { h.device().receive(p); }));
}

// QP1 (hca/management.cc): a CM MAD that no MAD agent of the host takes, and a datagram to QP1
// with another Q_Key than the GSI's, are dropped and counted; the QP beside them is not touched.
std::array<uint8_t, 256> cm_req_mad(uint64_t service_id) {
  std::array<uint8_t, 256> m{};
  m[0] = 1;     // base version
  m[1] = 0x07;  // CM class
  m[2] = 2;     // class version
  m[3] = 0x03;  // SEND
  m[17] = 0x10; // REQ
  for (int i = 0; i < 8; ++i) m[32 + i] = static_cast<uint8_t>(service_id >> (56 - 8 * i));
  return m;
}

TEST_F(UdHostilePackets, ACmReqToQp1ForAServiceNoAgentBoundIsCountedAndAnsweredWithRej8) {
  auto f = datagram(0x80010000u);
  f.dest_qp = Qpn(1);
  auto req = cm_req_mad(0x0000000001061D2Full);
  req[24] = 0x12;  // the REQ's Local Communication ID, which the REJ must name
  req[27] = 0x34;
  const hca::DeviceStats before = h.device().stats();
  h.inject(f, req);
  const std::vector<Captured> sent = h.take_sent();
  EXPECT_EQ(drops_between(before, h.device().stats()), "dropped, no_mad_agent +1");
  // One UD datagram from QP1 to the sender's QP1 with the GSI's Q_Key: REJ (0x12) of the REQ, reason 8.
  ASSERT_EQ(sent.size(), 1u);
  const Captured& rej = sent[0];
  EXPECT_EQ(rej.f.opcode, BthOpcode::kUdSendOnly);
  EXPECT_EQ(rej.f.dest_qp, Qpn(1));
  EXPECT_EQ(rej.f.dlid, f.slid);
  ASSERT_TRUE(rej.f.deth.has_value());
  EXPECT_EQ(rej.f.deth->qkey, 0x80010000u);
  EXPECT_EQ(rej.f.deth->src_qp, Qpn(1));
  ASSERT_EQ(rej.payload.size(), 256u);
  EXPECT_EQ(rej.payload[1], 0x07);   // CM class
  EXPECT_EQ(rej.payload[17], 0x12);  // REJ
  EXPECT_EQ(rej.payload[24] | rej.payload[25] | rej.payload[26] | rej.payload[27], 0) << "local comm id 0";
  EXPECT_EQ(rej.payload[28], 0x12);  // remote comm id: the REQ's
  EXPECT_EQ(rej.payload[31], 0x34);
  EXPECT_EQ(rej.payload[32] >> 6, 0) << "message REJected: REQ";
  EXPECT_EQ(rej.payload[34] << 8 | rej.payload[35], 8) << "reason 8, invalid service ID";
  EXPECT_TRUE(h.take_cqes().empty());
  EXPECT_EQ(next_valid_accepted(), "next valid datagram received");
}

TEST_F(UdHostilePackets, ADatagramToQp1WithAnotherQkeyThanTheGsisIsDroppedAsBadQkey) {
  auto f = datagram(kQkey);
  f.dest_qp = Qpn(1);
  expect_row("packet: UD SEND Only to QP1 with a Q_Key other than the GSI's 0x80010000",
             "dropped, bad_qkey +1; nothing sent; no CQE; nothing written; next valid datagram received",
             outcome([&] { h.inject(f, cm_req_mad(0x0000000001061D2Full)); }));
}

// ---- sources of UC and UD packets, and GRH sources -----------------------------------------------

TEST_F(UcHostilePackets, AUcWriteFromAnotherLidThanThePathsIsDroppedAsBadSource) {
  auto f = write_only(kRqPsn, kTarget, 8);
  f.opcode = BthOpcode::kUcRdmaWriteOnly;
  f.slid = Lid(kStrangerLid);
  expect_row("packet: UC RDMA WRITE Only from an SLID other than the QP's path DLID",
             "dropped, bad_source +1" + kDroppedClean, outcome([&] { h.inject(f, std::array<uint8_t, 8>{}); }),
             "IBA 9.6.1.5");
}

TEST_F(UdHostilePackets, UdTakesDatagramsFromAnySourceWithTheRightQkey) {
  auto f = datagram(kQkey);
  f.slid = Lid(kStrangerLid);
  h.inject(f, std::array<uint8_t, 4>{9, 9, 9, 9});
  // Expect: received (UD is connectionless: the Q_Key is its check, IBA 9.6.1.5.2).
  const auto cqes = h.take_cqes();
  ASSERT_EQ(cqes.size(), 1u);
  EXPECT_EQ(cqes[0].opcode, hwif::CqeOpcode::kRespSend);
  EXPECT_EQ(h.device().stats().total_dropped(), 0u);
}

const hwif::Gid kPeerGid{{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x50, 0x56, 0xff, 0xfe, 0, 0, 0x09}};

class GlobalPathPackets : public HostilePackets {
 protected:
  void SetUp() override {
    h.use_global_path(kPeerGid);
    HostilePackets::SetUp();
  }
};

TEST_F(GlobalPathPackets, AGrhFromAnotherGidThanThePathsIsDroppedAsBadSource) {
  auto f = write_only(kRqPsn, kTarget, 8);
  f.grh->sgid[15] ^= 0x01;  // the peer's LID, another GID
  const std::string observed = outcome([&] { h.inject(f, std::array<uint8_t, 8>{}); }) + "; " + qp_state();
  expect_row("packet: RC RDMA WRITE Only with a GRH whose SGID is not the QP's path DGID (SLID right)",
             "dropped, bad_source +1" + kDroppedClean + "; QP RTS", observed, "IBA 9.6.1.5");
}

}  // namespace
}  // namespace softhca::test
