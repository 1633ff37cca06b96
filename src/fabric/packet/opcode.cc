#include "fabric/packet/opcode.h"

namespace softhca::fabric {

// Compile-time checks of the opcode table against the IBA opcode list.
static_assert(opcode_info(BthOpcode::kRcRdmaWriteOnly).reth && opcode_info(BthOpcode::kRcRdmaWriteOnly).has_payload);
static_assert(opcode_info(BthOpcode::kRcRdmaWriteOnlyImm).ext_bytes() == kRethBytes + kImmDtBytes);
static_assert(!opcode_info(BthOpcode::kRcRdmaWriteMiddle).reth);
static_assert(opcode_info(BthOpcode::kRcAcknowledge).ext_bytes() == kAethBytes);
static_assert(!opcode_info(BthOpcode::kRcAcknowledge).has_payload);
static_assert(opcode_info(BthOpcode::kRcAtomicAcknowledge).ext_bytes() == kAethBytes + kAtomicAckEthBytes);
static_assert(opcode_info(BthOpcode::kRcCompareSwap).ext_bytes() == kAtomicEthBytes);
static_assert(opcode_info(BthOpcode::kRcRdmaReadResponseMiddle).ext_bytes() == 0);
static_assert(opcode_info(BthOpcode::kUdSendOnlyImm).ext_bytes() == kDethBytes + kImmDtBytes);
static_assert(opcode_info(BthOpcode::kUcRdmaWriteFirst).service == Service::kUc);
static_assert(opcode_info(BthOpcode::kXrcRdmaWriteOnlyImm).ext_bytes() == kXrcethBytes + kRethBytes + kImmDtBytes);
static_assert(opcode_info(BthOpcode::kXrcAcknowledge).ext_bytes() == kAethBytes && !opcode_info(BthOpcode::kXrcAcknowledge).xrceth);
static_assert(opcode_info(BthOpcode::kXrcSendMiddle).xrceth && opcode_info(BthOpcode::kXrcSendMiddle).service == Service::kXrc);
static_assert(!is_valid_opcode(0x15) && !is_valid_opcode(0x2c) && !is_valid_opcode(0x60) && !is_valid_opcode(0x81));
static_assert([] {
  int n = 0;
  for (int raw = 0; raw < 256; ++raw) n += is_valid_opcode(static_cast<uint8_t>(raw)) ? 1 : 0;
  return n;
}() == static_cast<int>(kAllOpcodes.size()));

std::string_view opcode_name(BthOpcode op) {
  switch (op) {
    case BthOpcode::kRcSendFirst: return "RC SEND First";
    case BthOpcode::kRcSendMiddle: return "RC SEND Middle";
    case BthOpcode::kRcSendLast: return "RC SEND Last";
    case BthOpcode::kRcSendLastImm: return "RC SEND Last with Immediate";
    case BthOpcode::kRcSendOnly: return "RC SEND Only";
    case BthOpcode::kRcSendOnlyImm: return "RC SEND Only with Immediate";
    case BthOpcode::kRcRdmaWriteFirst: return "RC RDMA WRITE First";
    case BthOpcode::kRcRdmaWriteMiddle: return "RC RDMA WRITE Middle";
    case BthOpcode::kRcRdmaWriteLast: return "RC RDMA WRITE Last";
    case BthOpcode::kRcRdmaWriteLastImm: return "RC RDMA WRITE Last with Immediate";
    case BthOpcode::kRcRdmaWriteOnly: return "RC RDMA WRITE Only";
    case BthOpcode::kRcRdmaWriteOnlyImm: return "RC RDMA WRITE Only with Immediate";
    case BthOpcode::kRcRdmaReadRequest: return "RC RDMA READ Request";
    case BthOpcode::kRcRdmaReadResponseFirst: return "RC RDMA READ Response First";
    case BthOpcode::kRcRdmaReadResponseMiddle: return "RC RDMA READ Response Middle";
    case BthOpcode::kRcRdmaReadResponseLast: return "RC RDMA READ Response Last";
    case BthOpcode::kRcRdmaReadResponseOnly: return "RC RDMA READ Response Only";
    case BthOpcode::kRcAcknowledge: return "RC Acknowledge";
    case BthOpcode::kRcAtomicAcknowledge: return "RC ATOMIC Acknowledge";
    case BthOpcode::kRcCompareSwap: return "RC CmpSwap";
    case BthOpcode::kRcFetchAdd: return "RC FetchAdd";
    case BthOpcode::kRcSendLastInv: return "RC SEND Last with Invalidate";
    case BthOpcode::kRcSendOnlyInv: return "RC SEND Only with Invalidate";
    case BthOpcode::kUcSendFirst: return "UC SEND First";
    case BthOpcode::kUcSendMiddle: return "UC SEND Middle";
    case BthOpcode::kUcSendLast: return "UC SEND Last";
    case BthOpcode::kUcSendLastImm: return "UC SEND Last with Immediate";
    case BthOpcode::kUcSendOnly: return "UC SEND Only";
    case BthOpcode::kUcSendOnlyImm: return "UC SEND Only with Immediate";
    case BthOpcode::kUcRdmaWriteFirst: return "UC RDMA WRITE First";
    case BthOpcode::kUcRdmaWriteMiddle: return "UC RDMA WRITE Middle";
    case BthOpcode::kUcRdmaWriteLast: return "UC RDMA WRITE Last";
    case BthOpcode::kUcRdmaWriteLastImm: return "UC RDMA WRITE Last with Immediate";
    case BthOpcode::kUcRdmaWriteOnly: return "UC RDMA WRITE Only";
    case BthOpcode::kUcRdmaWriteOnlyImm: return "UC RDMA WRITE Only with Immediate";
    case BthOpcode::kUdSendOnly: return "UD SEND Only";
    case BthOpcode::kUdSendOnlyImm: return "UD SEND Only with Immediate";
    case BthOpcode::kXrcSendFirst: return "XRC SEND First";
    case BthOpcode::kXrcSendMiddle: return "XRC SEND Middle";
    case BthOpcode::kXrcSendLast: return "XRC SEND Last";
    case BthOpcode::kXrcSendLastImm: return "XRC SEND Last with Immediate";
    case BthOpcode::kXrcSendOnly: return "XRC SEND Only";
    case BthOpcode::kXrcSendOnlyImm: return "XRC SEND Only with Immediate";
    case BthOpcode::kXrcRdmaWriteFirst: return "XRC RDMA WRITE First";
    case BthOpcode::kXrcRdmaWriteMiddle: return "XRC RDMA WRITE Middle";
    case BthOpcode::kXrcRdmaWriteLast: return "XRC RDMA WRITE Last";
    case BthOpcode::kXrcRdmaWriteLastImm: return "XRC RDMA WRITE Last with Immediate";
    case BthOpcode::kXrcRdmaWriteOnly: return "XRC RDMA WRITE Only";
    case BthOpcode::kXrcRdmaWriteOnlyImm: return "XRC RDMA WRITE Only with Immediate";
    case BthOpcode::kXrcRdmaReadRequest: return "XRC RDMA READ Request";
    case BthOpcode::kXrcRdmaReadResponseFirst: return "XRC RDMA READ Response First";
    case BthOpcode::kXrcRdmaReadResponseMiddle: return "XRC RDMA READ Response Middle";
    case BthOpcode::kXrcRdmaReadResponseLast: return "XRC RDMA READ Response Last";
    case BthOpcode::kXrcRdmaReadResponseOnly: return "XRC RDMA READ Response Only";
    case BthOpcode::kXrcAcknowledge: return "XRC Acknowledge";
    case BthOpcode::kXrcAtomicAcknowledge: return "XRC ATOMIC Acknowledge";
    case BthOpcode::kXrcCompareSwap: return "XRC CmpSwap";
    case BthOpcode::kXrcFetchAdd: return "XRC FetchAdd";
    case BthOpcode::kXrcSendLastInv: return "XRC SEND Last with Invalidate";
    case BthOpcode::kXrcSendOnlyInv: return "XRC SEND Only with Invalidate";
  }
  return "unknown";
}

}  // namespace softhca::fabric
