#include "cm/qp_attributes.h"

namespace softhca::cm {

QpAttributes qp_attributes(Side side, const Req& req, const Rep& rep) {
  QpAttributes q;
  q.path_mtu = req.path_mtu;
  q.retry_cnt = req.retry_count;  // the REQ's retry count serves both QPs
  q.timeout = req.primary.local_ack_timeout;
  q.flow_label = req.primary.flow_label;
  q.traffic_class = req.primary.traffic_class;
  q.hop_limit = req.primary.hop_limit;
  q.sl = req.primary.sl;
  q.pkey = req.pkey;
  if (side == Side::kActive) {
    q.dest_qp_num = rep.local_qpn;
    q.rq_psn = req.starting_psn;
    q.sq_psn = rep.starting_psn;
    // The peer's resources bound what we may have outstanding, and the other way round.
    q.max_rd_atomic = rep.responder_resources;
    q.max_dest_rd_atomic = rep.initiator_depth;
    q.rnr_retry = rep.rnr_retry_count;  // each end tells the other how many RNR retries to use
    q.dgid = req.primary.remote_gid;
    q.sgid = req.primary.local_gid;
  } else {
    q.dest_qp_num = req.local_qpn;
    q.rq_psn = rep.starting_psn;
    q.sq_psn = req.starting_psn;
    q.max_rd_atomic = rep.initiator_depth;
    q.max_dest_rd_atomic = rep.responder_resources;
    q.rnr_retry = req.rnr_retry_count;
    q.dgid = req.primary.local_gid;
    q.sgid = req.primary.remote_gid;
  }
  return q;
}

}  // namespace softhca::cm
