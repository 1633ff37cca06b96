#include "hca/transport/wire.h"

#include <array>

namespace softhca::hca {

using hwif::QpType;
using hwif::WqeOpcode;

PacketPosition position_of(uint32_t index, uint32_t count) {
  if (count <= 1) return PacketPosition::kOnly;
  if (index == 0) return PacketPosition::kFirst;
  return index + 1 == count ? PacketPosition::kLast : PacketPosition::kMiddle;
}

namespace {
// Operation codes 0x00-0x0b shared by RC and UC (IBA 9.2): SEND first..only-imm, WRITE the same.
uint8_t send_write_code(bool write, bool imm, PacketPosition pos) {
  const uint8_t base = write ? 0x06 : 0x00;
  switch (pos) {
    case PacketPosition::kFirst: return base + 0;
    case PacketPosition::kMiddle: return base + 1;
    case PacketPosition::kLast: return static_cast<uint8_t>(base + (imm ? 3 : 2));
    case PacketPosition::kOnly: return static_cast<uint8_t>(base + (imm ? 5 : 4));
  }
  return base;
}
}  // namespace

BthOpcode request_opcode(QpType type, WqeOpcode op, PacketPosition pos) {
  const bool imm = op == WqeOpcode::kSendImm || op == WqeOpcode::kRdmaWriteImm;
  if (type == QpType::kUd) return imm ? BthOpcode::kUdSendOnlyImm : BthOpcode::kUdSendOnly;
  switch (op) {
    case WqeOpcode::kRdmaRead: return BthOpcode::kRcRdmaReadRequest;
    case WqeOpcode::kAtomicCs: return BthOpcode::kRcCompareSwap;
    case WqeOpcode::kAtomicFa: return BthOpcode::kRcFetchAdd;
    default: break;
  }
  const bool write = op == WqeOpcode::kRdmaWrite || op == WqeOpcode::kRdmaWriteImm;
  const uint8_t transport = type == QpType::kUc ? 0x20 : 0x00;
  return static_cast<BthOpcode>(transport | send_write_code(write, imm, pos));
}

bool is_response(BthOpcode op) {
  const fabric::OpKind k = fabric::opcode_info(op).kind;
  return k == fabric::OpKind::kRdmaReadResponse || k == fabric::OpKind::kAcknowledge ||
         k == fabric::OpKind::kAtomicAcknowledge;
}

bool matches_transport(BthOpcode op, QpType type) {
  const fabric::Service s = fabric::opcode_info(op).service;
  switch (type) {
    case QpType::kRc: return s == fabric::Service::kRc;
    case QpType::kUc: return s == fabric::Service::kUc;
    case QpType::kUd: return s == fabric::Service::kUd;
  }
  return false;
}

Picoseconds rnr_delay(uint8_t timer_code) {
  // IBA table 45, in microseconds x100 (0.01 ms units) to stay integral.
  static constexpr std::array<uint32_t, 32> kCentiMs = {
      65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
      256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
  return Picoseconds(static_cast<int64_t>(kCentiMs[timer_code & 0x1f]) * 10'000'000);
}

Picoseconds ack_timeout(uint8_t timeout) {
  if (timeout == 0) return Picoseconds(-1);
  return Picoseconds(static_cast<int64_t>(4'096'000) << (timeout & 0x1f));
}

}  // namespace softhca::hca
