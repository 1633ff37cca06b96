#include "fake_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "base/endian.h"

namespace softhca::driver::testing {

FakeDevice::FakeDevice() {
  caps.fw_ver = (uint64_t{16} << 32) | (uint64_t{35} << 16) | 2000;
  caps.node_guid = 0x0102030405060708;
  caps.max_mr_size = uint64_t{1} << 40;
  caps.page_size_cap = 4096;
  caps.vendor_id = 0x02c9;
  caps.vendor_part_id = 4115;
  caps.max_qp = 1024;
  caps.max_qp_wr = 16384;
  caps.max_sge = 30;
  caps.max_sge_rd = 30;
  caps.max_cq = 1024;
  caps.max_cqe = 4194303;
  caps.max_mr = 1024;
  caps.max_pd = 1024;
  caps.max_qp_rd_atom = 16;
  caps.max_qp_init_rd_atom = 16;
  caps.max_srq = 256;
  caps.max_srq_wr = 16383;
  caps.max_srq_sge = 31;
  caps.max_ah = 1024;
  caps.max_inline_data = 512;
  caps.max_msg_sz = 1u << 30;
  caps.num_comp_vectors = 2;
  caps.num_uars = 8;
  caps.max_pkeys = 2;
  caps.phys_port_cnt = 1;
  caps.atomic_hca = true;
  port.state = hwif::PortState::kActive;
  port.lid = 7;
  port.max_msg_sz = 1u << 30;
  port.gids[0].raw[0] = 0xfe;
  port.gids[0].raw[1] = 0x80;
  port.gids[1].raw[15] = 0x11;
  port.pkeys[0] = 0xffff;
}

void FakeDevice::mmio_write(uint64_t bar_offset, const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  mmio.push_back(MmioWrite{bar_offset, std::vector<uint8_t>(p, p + len)});
}

int FakeDevice::execute(hwif::CmdOpcode op, const void* in, size_t /*in_len*/, void* out, size_t /*out_len*/) {
  log.push_back(op);
  if (fail_err != 0 && op == fail_op) {
    const int err = fail_err;
    fail_err = 0;
    return err;
  }
  using O = hwif::CmdOpcode;
  switch (op) {
    case O::kQueryDevice:
      static_cast<hwif::QueryDeviceOut*>(out)->caps = caps;
      return 0;
    case O::kQueryPort:
      if (static_cast<const hwif::QueryPortIn*>(in)->port != 1) return EINVAL;
      static_cast<hwif::QueryPortOut*>(out)->port = port;
      return 0;
    case O::kAllocPd:
      static_cast<hwif::AllocPdOut*>(out)->pdn = next_pdn_++;
      return 0;
    case O::kCreateMkey: {
      const auto& i = *static_cast<const hwif::CreateMkeyIn*>(in);
      auto& o = *static_cast<hwif::CreateMkeyOut*>(out);
      o.lkey = next_key_;
      o.rkey = next_key_ | 0x80000000;
      mkeys[next_key_] = i;
      next_key_ += 0x100;
      return 0;
    }
    case O::kCreateEq: {
      const uint32_t n = next_eqn_++;
      const auto& i = *static_cast<const hwif::CreateEqIn*>(in);
      (i.async_events ? async_eqs : eqs)[n] = i;
      static_cast<hwif::CreateEqOut*>(out)->eqn = n;
      return 0;
    }
    case O::kCreateCq: {
      const uint32_t n = next_cqn_++;
      cqs[n] = *static_cast<const hwif::CreateCqIn*>(in);
      static_cast<hwif::CreateCqOut*>(out)->cqn = n;
      return 0;
    }
    case O::kResizeCq: {
      const auto& i = *static_cast<const hwif::ResizeCqIn*>(in);
      resizes.push_back(i);
      hwif::CreateCqIn& c = cqs[i.cqn];
      c.ring_addr = i.ring_addr;
      c.log_nent = i.log_nent;
      static_cast<hwif::ResizeCqOut*>(out)->pi = cq_pi[i.cqn];
      return 0;
    }
    case O::kCreateSrq: {
      const uint32_t n = next_srqn_++;
      srqs[n] = *static_cast<const hwif::CreateSrqIn*>(in);
      static_cast<hwif::CreateSrqOut*>(out)->srqn = n;
      return 0;
    }
    case O::kQuerySrq:
      static_cast<hwif::QuerySrqOut*>(out)->limit = srqs[static_cast<const hwif::QuerySrqIn*>(in)->srqn].limit;
      return 0;
    case O::kModifySrq: {
      const auto& i = *static_cast<const hwif::ModifySrqIn*>(in);
      srqs[i.srqn].limit = i.limit;
      return 0;
    }
    case O::kCreateQp: {
      const uint32_t n = next_qpn_;
      next_qpn_ += 7;
      qps[n] = *static_cast<const hwif::CreateQpIn*>(in);
      static_cast<hwif::CreateQpOut*>(out)->qpn = n;
      return 0;
    }
    case O::kModifyQp: {
      const auto& i = *static_cast<const hwif::ModifyQpIn*>(in);
      modifies.push_back(i);
      hwif::QpAttributes& a = qp_attr_[i.qpn];
      if (i.attr_mask & IBV_QP_STATE) a.state = i.attr.state;
      if (i.attr_mask & IBV_QP_QKEY) a.qkey = i.attr.qkey;
      if (i.attr_mask & IBV_QP_DEST_QPN) a.dest_qpn = i.attr.dest_qpn;
      if (i.attr_mask & IBV_QP_AV) a.av = i.attr.av;
      if (i.attr_mask & IBV_QP_PATH_MTU) a.path_mtu = i.attr.path_mtu;
      return 0;
    }
    case O::kQueryQp:
      static_cast<hwif::QueryQpOut*>(out)->attr = qp_attr_[static_cast<const hwif::QueryQpIn*>(in)->qpn];
      return 0;
    case O::kDeallocPd:
    case O::kDestroyMkey:
    case O::kDestroyEq:
    case O::kDestroyCq:
    case O::kDestroySrq:
    case O::kDestroyQp:
      return 0;
    case O::kSetMadAgent:
      static_cast<hwif::SetMadAgentOut*>(out)->agent = 1;
      return 0;
    case O::kBindService: {
      const auto& b = *static_cast<const hwif::BindServiceIn*>(in);
      // A picked port is the first of the ephemeral range, as the real device's first pick.
      static_cast<hwif::BindServiceOut*>(out)->service_id = b.pick_port ? (b.service_id & ~0xffffull) | 32768 : b.service_id;
      return 0;
    }
    case O::kUnbindService:
    case O::kTrackConnection:
    case O::kUntrackConnection:
    case O::kAttachMcast:
    case O::kDetachMcast:
    case O::kSetPortState:
    case O::kModifyCq:
    case O::kModifyMkey:
      return 0;
    case O::kQueryClock:
      *static_cast<hwif::QueryClockOut*>(out) = {};
      return 0;
    case O::kOpenXrcd:
    case O::kCloseXrcd:
    case O::kOpenQp:
    case O::kAllocDm:
    case O::kFreeDm:
    case O::kAllocMw:
    case O::kDeallocMw:
      return EOPNOTSUPP;  // XRC, device memory and windows are tested against the device model (tests/conformance)
  }
  return EOPNOTSUPP;
}

DeviceHarness::DeviceHarness(BlueFlameMode mode, uint32_t uar_index) {
  DeviceLink link;
  link.host_port = &host_port;
  link.cmd = &dev;
  link.uar_index = uar_index;
  link.blueflame = mode;
  link.kernel = &kernel;
  vctx_ = open_context(&device_, link, -1);
  EXPECT_NE(vctx_, nullptr);
  pd_ = alloc_pd(ctx());
  EXPECT_NE(pd_, nullptr);
}

DeviceHarness::~DeviceHarness() {
  for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) EXPECT_EQ(destroy_qp(*it), 0);
  for (auto it = cqs_.rbegin(); it != cqs_.rend(); ++it) EXPECT_EQ(destroy_cq(*it), 0);
  EXPECT_EQ(dealloc_pd(pd_), 0);
  EXPECT_EQ(close_context(ctx()), 0);
  // Everything the driver took from the host kernel was given back, exactly once.
  EXPECT_EQ(kernel.buffers_held(), 0u);
  EXPECT_EQ(kernel.pins_held(), 0u);
  EXPECT_EQ(kernel.vectors_held(), 0u);
  EXPECT_EQ(kernel.mismatches, 0);
}

ibv_cq* DeviceHarness::cq(int cqe, ibv_comp_channel* ch) {
  ibv_cq* c = create_cq(ctx(), cqe, ch, 0);
  EXPECT_NE(c, nullptr);
  if (c != nullptr) cqs_.push_back(c);
  return c;
}

ibv_qp* DeviceHarness::qp(ibv_qp_type type, uint32_t max_send_wr, uint32_t max_send_sge, uint32_t max_inline,
                          uint64_t send_ops, bool sig_all, ibv_cq* c, uint32_t max_recv_wr, uint32_t max_recv_sge,
                          ibv_srq* srq) {
  if (c == nullptr) c = cq();
  ibv_qp_init_attr a{};
  a.send_cq = c;
  a.recv_cq = c;
  a.srq = srq;
  a.qp_type = type;
  a.sq_sig_all = sig_all ? 1 : 0;
  a.cap.max_send_wr = max_send_wr;
  a.cap.max_send_sge = max_send_sge;
  a.cap.max_inline_data = max_inline;
  a.cap.max_recv_wr = max_recv_wr;
  a.cap.max_recv_sge = max_recv_sge;
  ibv_qp* q = create_qp(pd_, &a, send_ops);
  EXPECT_NE(q, nullptr) << "errno " << errno;
  if (q != nullptr) qps_.push_back(q);
  return q;
}

int DeviceHarness::destroy(ibv_qp* q) {
  const int err = destroy_qp(q);
  if (err == 0) std::erase(qps_, q);
  return err;
}

void DeviceHarness::to_state(ibv_qp* q, ibv_qp_state s) {
  ibv_qp_attr a{};
  a.qp_state = s;
  ASSERT_EQ(modify_qp(q, &a, IBV_QP_STATE), 0);
}

void DeviceHarness::to_rts(ibv_qp* q) {
  to_state(q, IBV_QPS_INIT);
  to_state(q, IBV_QPS_RTR);
  to_state(q, IBV_QPS_RTS);
}

uint8_t* DeviceHarness::sq(ibv_qp* q) {
  return host(dev.qps.at(q->qp_num).sq_addr);
}
uint32_t DeviceHarness::sq_bbs(ibv_qp* q) { return 1u << dev.qps.at(q->qp_num).log_sq_bbs; }
uint8_t* DeviceHarness::rq(ibv_qp* q) {
  return host(dev.qps.at(q->qp_num).rq_addr);
}
hwif::QpDbRec* DeviceHarness::qp_dbrec(ibv_qp* q) {
  return host<hwif::QpDbRec>(dev.qps.at(q->qp_num).dbrec_addr);
}
hwif::Cqe64* DeviceHarness::cqes(ibv_cq* c) {
  return host<hwif::Cqe64>(dev.cqs.at(c->handle).ring_addr);
}
hwif::CqDbRec* DeviceHarness::cq_dbrec(ibv_cq* c) {
  return host<hwif::CqDbRec>(dev.cqs.at(c->handle).dbrec_addr);
}

void write_cqe(hwif::Cqe64* ring, uint32_t log_nent, uint32_t index, const hwif::Cqe64& cqe, hwif::CqeOpcode op) {
  hwif::Cqe64& slot = ring[index & ((1u << log_nent) - 1)];
  const auto op_own = static_cast<uint8_t>((static_cast<uint8_t>(op) << 4) | ((index >> log_nent) & 1));
  // The 63 bytes before op_own first, then op_own with release: a poller never sees a valid
  // opcode/owner with stale contents.
  std::memcpy(static_cast<void*>(&slot), &cqe, offsetof(hwif::Cqe64, op_own));
  std::atomic_ref<uint8_t>(slot.op_own).store(op_own, std::memory_order_release);
}

}  // namespace softhca::driver::testing
