// Writes the seed corpora of the fuzz targets into DIR/<target>/ (DIR: tests/fuzz/corpus):
// a few valid inputs of each shape, from which libFuzzer mutates. Run after changing an input
// format:  build/fuzz/tests/fuzz/make_fuzz_corpus tests/fuzz/corpus
#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "cm/cma_header.h"
#include "cm/mad_codec.h"
#include "fabric/packet/packet.h"
#include "fabric/packet/roce.h"
#include "hwif/wqe.h"
#include "wqe_bench.h"

namespace softhca::fuzz {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

void write(const fs::path& dir, const std::string& name, const Bytes& bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Appends values in the order and sizes ByteReader takes them (little-endian, as memcpy on x86).
struct Writer {
  Bytes b;
  template <class T>
  Writer& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
    return *this;
  }
  Writer& u8(uint8_t v) { return put(v); }
  Writer& u16(uint16_t v) { return put(v); }
  Writer& u32(uint32_t v) { return put(v); }
  Writer& u64(uint64_t v) { return put(v); }
};

// ---- packet_parse_fuzz: mode byte, then the packet ---------------------------------------------

fabric::PacketFields local_fields(fabric::BthOpcode op) {
  fabric::PacketFields f;
  f.dlid = Lid(1);
  f.slid = Lid(2);
  f.opcode = op;
  f.dest_qp = Qpn(0x12);
  f.psn = Psn(100);
  f.ack_req = true;
  return f;
}

Bytes native(const fabric::PacketFields& f, const Bytes& payload) {
  Bytes out(fabric::kMaxPacketBytes + 1, 0);
  out[0] = 0;  // mode: native, nothing fixed
  const size_t n = fabric::serialize(f, payload, std::span<uint8_t>(out).subspan(1));
  out.resize(1 + n);
  return out;
}

Bytes roce(fabric::PacketFields f, const Bytes& payload) {
  f.grh = fabric::GrhFields{0, 0, 64, fabric::ipv4_mapped_gid(0x0a000001), fabric::ipv4_mapped_gid(0x0a000002)};
  Bytes out(fabric::kMaxPacketBytes + 1, 0);
  out[0] = 1;  // mode: RoCEv2, nothing fixed
  const size_t n = fabric::serialize_roce(f, payload, fabric::UdpPorts{}, std::span<uint8_t>(out).subspan(1));
  out.resize(1 + n);
  return out;
}

void packet_seeds(const fs::path& dir) {
  using fabric::BthOpcode;
  auto write_only = local_fields(BthOpcode::kRcRdmaWriteOnly);
  write_only.reth = fabric::RethFields{0x1000, RKey(0x1234), 8};
  write(dir, "rc_write_only", native(write_only, Bytes{1, 2, 3, 4, 5, 6, 7, 8}));
  auto ud = local_fields(BthOpcode::kUdSendOnlyImm);
  ud.deth = fabric::DethFields{0x11111111, Qpn(0x33)};
  ud.imm = 0x01020304;
  ud.grh = fabric::GrhFields{1, 0x12345, 8, fabric::Gid{0xfe, 0x80}, fabric::Gid{0xfe, 0x80, 1}};
  write(dir, "ud_send_imm_global", native(ud, Bytes(13, 0x5a)));
  auto ack = local_fields(BthOpcode::kRcAcknowledge);
  ack.aeth = fabric::AethFields{0x1f, 7};
  write(dir, "rc_ack", native(ack, {}));
  auto atomic = local_fields(BthOpcode::kRcFetchAdd);
  atomic.atomic_eth = fabric::AtomicEthFields{0x2000, RKey(0x55), 1, 0};
  write(dir, "roce_fetch_add", roce(atomic, {}));
  write(dir, "roce_send_only", roce(local_fields(BthOpcode::kRcSendOnly), Bytes(33, 0xa5)));
}

// ---- wqe_parse_fuzz: flags, log2 ring, first BB, producer, ring bytes ---------------------------

// One WQE in a 1 KiB ring at block 0; ds counts the 16-byte units written after the control.
struct WqeBuilder {
  Bytes ring = Bytes(kRingBytes, 0);
  size_t at = 16;
  template <class Seg>
  WqeBuilder& seg(const Seg& s) {
    std::memcpy(ring.data() + at, &s, sizeof s);
    at += sizeof s;
    return *this;
  }
  WqeBuilder& inline_data(const Bytes& data) {
    InlineHdr h{};
    h.byte_count = static_cast<uint32_t>(data.size()) | kInlineSegFlag;
    std::memcpy(ring.data() + at, &h, sizeof h);
    std::memcpy(ring.data() + at + sizeof h, data.data(), data.size());
    at += (sizeof h + data.size() + kDsBytes - 1) / kDsBytes * kDsBytes;
    return *this;
  }
  Bytes input(uint8_t flags, WqeOpcode op, uint32_t qpn) {
    CtrlSeg c{};
    c.set(op, 0, qpn, static_cast<uint32_t>(at / kDsBytes), kCtrlCqUpdate);
    std::memcpy(ring.data(), &c, sizeof c);
    Writer w;
    w.u8(flags).u8(4).u16(0).u16(1);  // parse ring of 16 BBs from block 0; producer 1
    w.b.insert(w.b.end(), ring.begin(), ring.end());
    return w.b;
  }
};

DataSeg data_seg(uint32_t key, uint64_t addr, uint32_t len) {
  DataSeg d{};
  d.byte_count = len;
  d.lkey = key;
  d.addr = addr;
  return d;
}

RaddrSeg raddr_seg(uint32_t key, uint64_t addr) {
  RaddrSeg r{};
  r.raddr = addr;
  r.rkey = key;
  return r;
}

void wqe_seeds(const fs::path& dir) {
  // The key and QPN the bench's fresh device gives (the same on every run).
  uint32_t key = 0, rc = 0, uc = 0, ud = 0;
  uint16_t lid = 0;
  {
    LoopbackBench b(QpType::kRc);
    key = b.key_a();
    rc = b.qpn();
    lid = b.lid();
  }
  {
    LoopbackBench b(QpType::kUc);
    uc = b.qpn();
  }
  {
    LoopbackBench b(QpType::kUd);
    ud = b.qpn();
  }
  constexpr uint8_t kRc = 0 << 1, kUc = 1 << 1, kUd = 2 << 1 | 1, kBlueFlame = 8;
  const uint64_t src = kBufAddr, dst = kBufAddr + 8192;
  write(dir, "rc_write_64",
        WqeBuilder{}.seg(raddr_seg(key, dst)).seg(data_seg(key, src, 64)).input(kRc, WqeOpcode::kRdmaWrite, rc));
  write(dir, "rc_send_300_blueflame",
        WqeBuilder{}.seg(data_seg(key, src, 300)).input(kRc | kBlueFlame, WqeOpcode::kSend, rc));
  write(dir, "rc_read_64",
        WqeBuilder{}.seg(raddr_seg(key, src)).seg(data_seg(key, dst, 64)).input(kRc, WqeOpcode::kRdmaRead, rc));
  AtomicSeg add{};
  add.swap_add = uint64_t{5};
  write(dir, "rc_fetch_add", WqeBuilder{}.seg(raddr_seg(key, dst)).seg(add).seg(data_seg(key, src, 8)).input(
                                 kRc, WqeOpcode::kAtomicFa, rc));
  write(dir, "uc_write_inline",
        WqeBuilder{}.seg(raddr_seg(key, dst)).inline_data(Bytes(40, 0x3c)).input(kUc, WqeOpcode::kRdmaWriteImm, uc));
  DatagramSeg dg{};
  dg.qkey = uint32_t{0x11111111};
  dg.dqp_dct = ud | kExtendedUdAv;
  dg.rlid = lid;
  write(dir, "ud_send_100", WqeBuilder{}.seg(dg).seg(data_seg(key, src, 100)).input(kUd, WqeOpcode::kSend, ud));
}

// ---- verbs_sequence_fuzz: operations, each a byte and its arguments -----------------------------

// Operation codes of verbs_sequence_fuzz.cc (Session::step).
enum Op : uint8_t {
  kAllocPd = 0, kRegMr = 2, kCreateCq = 4, kDestroyCq = 5, kCreateQp = 6, kDestroyQp = 7, kModifyQp = 8,
  kConnect = 9, kPostSend = 10, kPostRecv = 11, kPoll = 12, kQueryQp = 13,
};

// alloc PD, CQ (64 entries), a QP of `type` (16 WRs, 2 SGEs, 64 bytes inline), an MR over the
// whole buffer with every right, then connects the QP to itself.
Writer setup(uint32_t type) {
  Writer w;
  w.u8(kAllocPd);
  w.u8(kCreateCq).u32(4).u32(1);
  w.u8(kCreateQp).u32(0).u32(0).u32(0).u32(type).u8(1).u32(16).u32(16).u32(2).u32(2).u32(64);
  w.u8(kRegMr).u32(0).u32(0).u32(65536).u32(0xf);
  w.u8(kConnect).u32(0).u32(0).u8(0).u32(100).u8(0xe).u32(2);  // to itself, PSN 100, MTU 512
  return w;
}

// One SGE of the MR (offset, pick, length, keep the MR's key).
void sge(Writer& w, uint32_t offset, uint32_t length) { w.u32(offset).u32(0).u32(length).u8(0); }

void verbs_seeds(const fs::path& dir) {
  {
    Writer w = setup(0);  // RC
    w.u8(kPostRecv).u32(0).u32(0).u32(1);
    sge(w, 32768, 4096);
    // One SEND of 1000 bytes, signaled: opcode, flags, num_sge, the SGE, imm, target MR, address, rkey.
    w.u8(kPostSend).u32(0).u32(0).u32(IBV_WR_SEND).u8(IBV_SEND_SIGNALED).u32(1);
    sge(w, 0, 1000);
    w.u32(0).u32(0).u8(0).u32(8192).u8(0);
    w.u8(kPoll).u32(0).u32(15).u8(kPoll).u32(0).u32(15);
    w.u8(kQueryQp).u32(0).u32(~0u);
    write(dir, "rc_send_recv", w.b);
  }
  {
    Writer w = setup(0);  // RC: a WRITE and a READ in one post, then poll
    w.u8(kPostSend).u32(0).u32(1).u32(IBV_WR_RDMA_WRITE).u8(IBV_SEND_SIGNALED).u32(1);
    sge(w, 0, 256);
    w.u32(0).u32(0).u8(0).u32(16384).u8(0);
    w.u32(IBV_WR_RDMA_READ).u8(IBV_SEND_SIGNALED).u32(1);
    sge(w, 4096, 256);
    w.u32(0).u32(0).u8(0).u32(16384).u8(0);
    w.u8(kPoll).u32(0).u32(15);
    write(dir, "rc_write_read", w.b);
  }
  {
    Writer w = setup(2);  // UD, then a random modify and a destroy of the busy CQ
    w.u8(kPostRecv).u32(0).u32(0).u32(1);
    sge(w, 32768, 2048);
    w.u8(kModifyQp).u32(0);
    for (int i = 0; i < 24; ++i) w.u32(0x01010101u * static_cast<uint32_t>(i));
    w.u8(kDestroyCq).u32(0).u8(kDestroyQp).u32(0).u8(kDestroyCq).u32(0);
    write(dir, "ud_modify_destroy", w.b);
  }
}

// ---- cm_mad_fuzz: one 256-byte CM MAD ----------------------------------------------------------

Bytes mad(uint64_t tid, const cm::CmMessage& m) {
  const cm::MadBytes b = cm::encode(cm::CmMad{tid, 0, 0, 0, m});
  return Bytes(b.begin(), b.end());
}

void cm_seeds(const fs::path& dir) {
  // rdma_connect() to 192.168.1.20:7471 from 192.168.1.10:40000, PS_TCP (rdmacm.md 4.4, 4.10). The
  // fuzzer's table has a connection (comm id 1) waiting for a REP, so the REP, REJ and MRA name it.
  cm::Req req;
  req.local_comm_id = cm::CommId(0x11223344);
  req.service_id = cm::service_id_of(cm::PortSpace::kTcp, 7471);
  req.local_ca_guid = 0x0002c903000000aa;
  req.local_qpn = Qpn(0x111);
  req.starting_psn = Psn(0x1000);
  req.responder_resources = 1;
  req.initiator_depth = 1;
  req.remote_cm_response_timeout = 20;
  req.local_cm_response_timeout = 20;
  req.retry_count = 7;
  req.rnr_retry_count = 7;
  req.max_cm_retries = 15;
  req.path_mtu = 3;
  req.primary.local_lid = Lid(0xffff);
  req.primary.remote_lid = Lid(0xffff);
  req.primary.local_gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 10};
  req.primary.remote_gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 20};
  req.primary.hop_limit = 64;
  req.primary.local_ack_timeout = 17;
  cm::set_req_private_data(req, cm::CmaHeader::ipv4(0xc0a8010a, 40000, 0xc0a80114), {});
  write(dir, "req", mad(0x0000000111223344, req));

  cm::Rep rep;
  rep.local_comm_id = cm::CommId(0x55667788);
  rep.remote_comm_id = cm::CommId(1);
  rep.local_qpn = Qpn(0x222);
  rep.starting_psn = Psn(0x2000);
  rep.target_ack_delay = 15;
  rep.rnr_retry_count = 7;
  rep.local_ca_guid = 0x0002c903000000bb;
  write(dir, "rep", mad(0x0000000100000001, rep));

  cm::Rej rej;
  rej.remote_comm_id = cm::CommId(1);
  rej.reason = cm::RejReason::kInvalidServiceId;
  write(dir, "rej_no_listener", mad(0x0000000100000001, rej));

  cm::Mra mra;
  mra.remote_comm_id = cm::CommId(1);
  mra.service_timeout = 24;
  write(dir, "mra_req", mad(0x0000000100000001, mra));

  cm::Dreq dreq;
  dreq.local_comm_id = cm::CommId(0x55667788);
  dreq.remote_comm_id = cm::CommId(1);
  dreq.remote_qpn = Qpn(0x111);
  write(dir, "dreq", mad(0x0000000155667788, dreq));

  cm::SidrReq sidr;
  sidr.request_id = 0xcafef00d;
  sidr.service_id = cm::service_id_of(cm::PortSpace::kUdp, 7174);
  cm::set_sidr_req_private_data(sidr, cm::CmaHeader::ipv4(0xc0a8010a, 40000, 0xc0a80114), {});
  write(dir, "sidr_req", mad(0x00000001cafef00d, sidr));
}

}  // namespace
}  // namespace softhca::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_fuzz_corpus DIR   (writes DIR/<target>/<seed>)\n";
    return 2;
  }
  const std::filesystem::path root(argv[1]);
  softhca::fuzz::packet_seeds(root / "packet_parse_fuzz");
  softhca::fuzz::wqe_seeds(root / "wqe_parse_fuzz");
  softhca::fuzz::verbs_seeds(root / "verbs_sequence_fuzz");
  softhca::fuzz::cm_seeds(root / "cm_mad_fuzz");
  return 0;
}
