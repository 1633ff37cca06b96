#include "hca/transport/wire.h"

#include <array>

namespace softhca::hca {

using hwif::QpType;
using hwif::WqeOpcode;

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
    case QpType::kXrcIni: return s == fabric::Service::kXrc && is_response(op);
    case QpType::kXrcTgt: return s == fabric::Service::kXrc && !is_response(op);
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
