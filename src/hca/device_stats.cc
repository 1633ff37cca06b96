#include "hca/device_stats.h"

namespace softhca::hca {

std::string_view to_string(DropReason r) {
  switch (r) {
    case DropReason::kMalformed: return "malformed";
    case DropReason::kWrongLid: return "wrong_lid";
    case DropReason::kUnknownQp: return "unknown_qp";
    case DropReason::kWrongTransport: return "wrong_transport";
    case DropReason::kBadPkey: return "bad_pkey";
    case DropReason::kBadQkey: return "bad_qkey";
    case DropReason::kNoReceiveWqe: return "no_receive_wqe";
    case DropReason::kPsnOutOfWindow: return "psn_out_of_window";
    case DropReason::kBadSource: return "bad_source";
    case DropReason::kNoMadAgent: return "no_mad_agent";
    case DropReason::kNoMcastGroup: return "no_mcast_group";
    case DropReason::kPortDown: return "port_down";
    case DropReason::kCount: break;
  }
  return "?";
}

DeviceStats& DeviceStats::operator+=(const DeviceStats& o) {
  packets_sent += o.packets_sent;
  packets_received += o.packets_received;
  bytes_sent += o.bytes_sent;
  bytes_received += o.bytes_received;
  acks_sent += o.acks_sent;
  cqes_written += o.cqes_written;
  express_writes += o.express_writes;
  express_sends += o.express_sends;
  naks_sent += o.naks_sent;
  rnr_naks_sent += o.rnr_naks_sent;
  retransmitted_packets += o.retransmitted_packets;
  timeouts += o.timeouts;
  duplicates += o.duplicates;
  cq_overruns += o.cq_overruns;
  dma_faults += o.dma_faults;
  for (size_t i = 0; i < dropped.size(); ++i) dropped[i] += o.dropped[i];
  return *this;
}

}  // namespace softhca::hca
