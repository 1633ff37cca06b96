#include "tools/model_host_side.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "tools/model_sim_runtime.h"
#include "tools/model_workload.h"

namespace softhca::tools {

namespace {
constexpr uint32_t kMaxRdAtomic = 16;  // the device's max_qp_rd_atom
constexpr uint8_t kPort = 1;
constexpr size_t kPageBytes = 4096;

ibv_qp_type qp_type_of(Transport t) {
  switch (t) {
    case Transport::kRc: return IBV_QPT_RC;
    case Transport::kUc: return IBV_QPT_UC;
    case Transport::kUd: return IBV_QPT_UD;
  }
  return IBV_QPT_RC;
}
}  // namespace

void HostSide::FreeDeleter::operator()(void* p) const { std::free(p); }

HostSide::~HostSide() {
  for (ibv_qp* qp : qps_) ibv_destroy_qp(qp);
  for (ibv_cq* cq : cqs_) ibv_destroy_cq(cq);
  if (ah_ != nullptr) ibv_destroy_ah(ah_);
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  if (ctx_ != nullptr) ibv_close_device(ctx_);
}

void HostSide::create(const HostSideConfig& c) {
  transport_ = c.transport;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) fail("ibv_get_device_list", errno);
  for (int i = 0; i < n && ctx_ == nullptr; ++i) {
    if (name_ == ibv_get_device_name(list[i])) ctx_ = ibv_open_device(list[i]);
  }
  ibv_free_device_list(list);
  if (ctx_ == nullptr) throw std::runtime_error("device " + name_ + " not found in the sim runtime");
  pd_ = ibv_alloc_pd(ctx_);
  if (pd_ == nullptr) fail(name_ + ": ibv_alloc_pd", errno);
  const size_t rounded = (c.buffer_bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  buf_.reset(static_cast<uint8_t*>(std::aligned_alloc(kPageBytes, rounded)));
  if (!buf_) fail(name_ + ": buffer", ENOMEM);
  std::memset(buf_.get(), 0, rounded);
  mr_ = ibv_reg_mr(pd_, buf_.get(), rounded, static_cast<int>(c.access));
  if (mr_ == nullptr) fail(name_ + ": ibv_reg_mr", errno);
  for (uint32_t q = 0; q < c.qps; ++q) {
    ibv_cq* cq = ibv_create_cq(ctx_, static_cast<int>(c.send_depth + c.recv_depth), nullptr, nullptr, 0);
    if (cq == nullptr) fail(name_ + ": ibv_create_cq", errno);
    cqs_.push_back(cq);
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = qp_type_of(c.transport);
    init.sq_sig_all = 0;
    init.cap.max_send_wr = c.send_depth;
    init.cap.max_recv_wr = c.recv_depth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = c.max_inline;
    ibv_qp* qp = ibv_create_qp(pd_, &init);
    if (qp == nullptr) fail(name_ + ": ibv_create_qp", errno);
    qps_.push_back(qp);
  }
  peer_qpns_.assign(c.qps, 0);
  ibv_port_attr port{};
  if (int rc = ibv_query_port(ctx_, kPort, &port); rc != 0) fail(name_ + ": ibv_query_port", rc);
  lid_ = port.lid;
}

void HostSide::modify(ibv_qp* qp, ibv_qp_attr& a, int mask) {
  if (int rc = ibv_modify_qp(qp, &a, mask); rc != 0) fail(name_ + ": ibv_modify_qp", rc);
}

void HostSide::connect(uint32_t q, const HostSide& peer, ibv_mtu mtu, unsigned int remote_access) {
  ibv_qp* qp = qps_[q];
  peer_qpns_[q] = peer.qps_[q]->qp_num;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = kPort;
  if (transport_ == Transport::kUd) {
    a.qkey = kQkey;
    modify(qp, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    modify(qp, a, IBV_QP_STATE);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    modify(qp, a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    if (ah_ == nullptr) {
      ibv_gid gid{};
      if (int rc = ibv_query_gid(peer.ctx_, kPort, 0, &gid); rc != 0) fail(peer.name_ + ": ibv_query_gid", rc);
      ibv_ah_attr ah{};
      ah.dlid = peer.lid_;
      ah.port_num = kPort;
      ah.is_global = 1;  // every UD packet carries a GRH (W1: 40 bytes)
      ah.grh.dgid = gid;
      ah.grh.sgid_index = 0;
      ah.grh.hop_limit = 1;
      ah_ = ibv_create_ah(pd_, &ah);
      if (ah_ == nullptr) fail(name_ + ": ibv_create_ah", errno);
    }
    return;
  }
  a.qp_access_flags = remote_access;
  modify(qp, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = peer.qps_[q]->qp_num;
  a.ah_attr.dlid = peer.lid_;
  a.ah_attr.port_num = kPort;
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (transport_ == Transport::kRc) {
    a.max_dest_rd_atomic = kMaxRdAtomic;
    a.min_rnr_timer = 12;
    mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
  modify(qp, a, mask);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (transport_ == Transport::kRc) {
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = kMaxRdAtomic;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  modify(qp, a, mask);
}

void HostSide::post_receive(uint32_t q, uint64_t addr, uint32_t length, uint64_t wr_id) {
  ibv_sge sge{addr, length, mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qps_[q], &wr, &bad); rc != 0) fail(name_ + ": ibv_post_recv", rc);
}

}  // namespace softhca::tools
