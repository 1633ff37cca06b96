// The control path: the context header, queries converted from the device's caps, memory
// registration rules, EBUSY on objects in use, and modify_qp's translation and state keeping.
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>

#include "fake_device.h"
#include "test_util.h"

namespace softhca::driver::testing {
namespace {

TEST(ControlPath, TheContextIsAnExtendedVerbsContextWithTheDataPathOpsFilled) {
  DeviceHarness h;
  ibv_context* c = h.ctx();
  verbs_context* v = verbs_get_ctx(c);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->sz, sizeof(verbs_context));
  EXPECT_EQ(c->abi_compat, reinterpret_cast<void*>(std::numeric_limits<uintptr_t>::max()));
  EXPECT_NE(c->ops.poll_cq, nullptr);
  EXPECT_NE(c->ops.req_notify_cq, nullptr);
  EXPECT_NE(c->ops.post_send, nullptr);
  EXPECT_NE(c->ops.post_recv, nullptr);
  EXPECT_NE(c->ops.post_srq_recv, nullptr);
  EXPECT_NE(verbs_get_ctx_op(c, query_port), nullptr);
  EXPECT_EQ(c->num_comp_vectors, 2);
}

TEST(ControlPath, QueryDeviceConvertsTheDeviceCaps) {
  DeviceHarness h;
  ibv_device_attr a{};
  ASSERT_EQ(query_device(h.ctx(), &a), 0);
  EXPECT_EQ(std::string(a.fw_ver), "16.35.2000");
  EXPECT_EQ(a.max_qp_wr, 16384);
  EXPECT_EQ(a.max_sge, 30);
  EXPECT_EQ(a.max_cqe, 4194303);
  EXPECT_EQ(a.atomic_cap, IBV_ATOMIC_HCA);
  EXPECT_EQ(a.phys_port_cnt, 1);
  EXPECT_EQ(a.vendor_part_id, 4115u);
  EXPECT_EQ(a.max_qp_rd_atom, 16);

  ibv_device_attr_ex x{};
  EXPECT_EQ(query_device_ex(h.ctx(), nullptr, &x, sizeof(ibv_device_attr) - 1), EINVAL);
  ASSERT_EQ(query_device_ex(h.ctx(), nullptr, &x, sizeof(x)), 0);
  EXPECT_EQ(x.orig_attr.max_qp_wr, 16384);
  EXPECT_EQ(x.phys_port_cnt_ex, 1u);
  // An older, shorter struct gets only what fits.
  std::array<uint8_t, sizeof(ibv_device_attr_ex) + 8> raw{};
  raw.fill(0xee);
  ASSERT_EQ(query_device_ex(h.ctx(), nullptr, reinterpret_cast<ibv_device_attr_ex*>(raw.data()), sizeof(ibv_device_attr) + 8), 0);
  EXPECT_EQ(raw[sizeof(ibv_device_attr) + 8], 0xee);
}

TEST(ControlPath, QueryPortHonoursTheCallersStructSizeAndRejectsBadPorts) {
  DeviceHarness h;
  std::array<uint8_t, sizeof(ibv_port_attr)> raw{};
  raw.fill(0xaa);
  ASSERT_EQ(query_port(h.ctx(), 1, reinterpret_cast<ibv_port_attr*>(raw.data()), 48), 0);
  for (size_t i = 48; i < raw.size(); ++i) EXPECT_EQ(raw[i], 0xaa) << i;
  ibv_port_attr p{};
  ASSERT_EQ(query_port(h.ctx(), 1, &p, sizeof(p)), 0);
  EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(p.lid, 7);
  EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(p.gid_tbl_len, static_cast<int>(hwif::kGidTableLen));
  EXPECT_EQ(p.active_mtu, IBV_MTU_4096);
  EXPECT_EQ(p.port_cap_flags2, 0);
  EXPECT_EQ(query_port(h.ctx(), 0, &p, sizeof(p)), EINVAL);
  EXPECT_EQ(query_port(h.ctx(), 2, &p, sizeof(p)), EINVAL);
}

TEST(ControlPath, GidAndPkeyQueriesCheckTheirIndex) {
  DeviceHarness h;
  ibv_gid gid{};
  ASSERT_EQ(query_gid(h.ctx(), 1, 0, &gid), 0);
  EXPECT_EQ(gid.raw[0], 0xfe);
  EXPECT_EQ(gid.raw[1], 0x80);
  ASSERT_EQ(query_gid(h.ctx(), 1, 1, &gid), 0);
  EXPECT_EQ(gid.raw[15], 0x11);
  EXPECT_EQ(query_gid(h.ctx(), 1, static_cast<int>(hwif::kGidTableLen), &gid), EINVAL);
  EXPECT_EQ(query_gid(h.ctx(), 1, -1, &gid), EINVAL);
  EXPECT_EQ(query_gid(h.ctx(), 0, 0, &gid), EINVAL);
  uint16_t pkey = 0;
  ASSERT_EQ(query_pkey(h.ctx(), 1, 0, &pkey), 0);
  EXPECT_EQ(pkey, 0xffff);
  EXPECT_EQ(query_pkey(h.ctx(), 1, static_cast<int>(hwif::kPkeyTableLen), &pkey), EINVAL);
}

TEST(ControlPath, RegMrChecksAccessFlagsAndFillsTheMrFields) {
  DeviceHarness h;
  std::array<uint8_t, 4096> buf{};
  EXPECT_EQ(reg_mr(h.pd(), buf.data(), buf.size(), addr_of(buf.data()), IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(reg_mr(h.pd(), buf.data(), buf.size(), addr_of(buf.data()), IBV_ACCESS_REMOTE_ATOMIC), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(reg_mr(h.pd(), buf.data(), buf.size(), addr_of(buf.data()), 1u << 15), nullptr);  // unknown bit
  EXPECT_EQ(errno, EINVAL);

  const unsigned int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_RELAXED_ORDERING;
  ibv_mr* mr = reg_mr(h.pd(), buf.data(), buf.size(), 0x10000, access);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->addr, buf.data());
  EXPECT_EQ(mr->length, buf.size());
  EXPECT_EQ(mr->pd, h.pd());
  EXPECT_EQ(mr->context, h.ctx());
  const hwif::CreateMkeyIn& in = h.dev.mkeys.at(mr->lkey);
  EXPECT_EQ(mr->rkey, mr->lkey | 0x80000000);
  EXPECT_EQ(in.host_addr, pcie::dma_address(FakeKernel::kSlot, addr_of(buf.data())));  // the pinned DMA address
  EXPECT_EQ(in.iova, 0x10000u);
  EXPECT_EQ(in.length, buf.size());
  EXPECT_EQ(in.access, static_cast<uint32_t>(hwif::kAccessLocalWrite | hwif::kAccessRemoteWrite | hwif::kAccessRemoteRead));
  EXPECT_EQ(in.pdn, h.pd()->handle);

  EXPECT_EQ(dealloc_pd(h.pd()), EBUSY);
  EXPECT_EQ(dereg_mr(mr), 0);
}

TEST(ControlPath, ObjectsInUseCannotBeDestroyedAndDeviceErrorsAreForwarded) {
  DeviceHarness h;
  ibv_cq* cq = h.cq();
  ibv_qp* qp = h.qp(IBV_QPT_RC, 16, 1, 0, 0, false, cq);
  EXPECT_EQ(destroy_cq(cq), EBUSY);
  EXPECT_EQ(dealloc_pd(h.pd()), EBUSY);
  ASSERT_EQ(h.destroy(qp), 0);

  ibv_cq* other = create_cq(h.ctx(), 7, nullptr, 0);
  ASSERT_NE(other, nullptr);
  h.dev.fail_op = hwif::CmdOpcode::kDestroyCq;
  h.dev.fail_err = EBUSY;
  EXPECT_EQ(destroy_cq(other), EBUSY);
  EXPECT_EQ(destroy_cq(other), 0);
}

TEST(ControlPath, CreateCqRoundsUpReportsNentMinusOneAndStartsWithInvalidCqes) {
  DeviceHarness h;
  ibv_cq* cq = h.cq(100);
  EXPECT_EQ(cq->cqe, 127);
  EXPECT_EQ(cq->context, h.ctx());
  const hwif::CreateCqIn& in = h.dev.cqs.at(cq->handle);
  EXPECT_EQ(in.log_nent, 7u);
  EXPECT_EQ(in.eqn, hwif::kNoEq);
  EXPECT_EQ(in.uar_index, 0u);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(h.cqes(cq)[i].op_own, 0xF0);
  EXPECT_EQ(create_cq(h.ctx(), 4194304, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST(ControlPath, ModifyQpTranslatesTheAttributesAndKeepsQpStateOnlyOnSuccess) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 1;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  ASSERT_EQ(modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  EXPECT_EQ(qp->state, IBV_QPS_INIT);
  const hwif::ModifyQpIn& m = h.dev.modifies.back();
  EXPECT_EQ(m.qpn, qp->qp_num);
  EXPECT_EQ(m.attr_mask, static_cast<uint32_t>(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
  EXPECT_EQ(m.attr.state, hwif::QpState::kInit);
  EXPECT_EQ(m.attr.pkey_index, 1);
  EXPECT_EQ(m.attr.access_flags, static_cast<uint32_t>(hwif::kAccessRemoteWrite | hwif::kAccessRemoteRead));

  ibv_qp_attr r{};
  r.qp_state = IBV_QPS_RTR;
  r.path_mtu = IBV_MTU_2048;
  r.dest_qp_num = 0x123456;
  r.rq_psn = 0x1abcdef;  // PSNs are 24 bits
  r.max_dest_rd_atomic = 4;
  r.min_rnr_timer = 12;
  r.ah_attr.dlid = 9;
  r.ah_attr.sl = 2;
  r.ah_attr.port_num = 1;
  r.ah_attr.is_global = 1;
  r.ah_attr.grh.dgid.raw[15] = 0x42;
  r.ah_attr.grh.hop_limit = 3;
  h.dev.fail_op = hwif::CmdOpcode::kModifyQp;
  h.dev.fail_err = EINVAL;
  const int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  EXPECT_EQ(modify_qp(qp, &r, mask), EINVAL);
  EXPECT_EQ(qp->state, IBV_QPS_INIT);
  ASSERT_EQ(modify_qp(qp, &r, mask), 0);
  EXPECT_EQ(qp->state, IBV_QPS_RTR);
  const hwif::ModifyQpIn& m2 = h.dev.modifies.back();
  EXPECT_EQ(m2.attr.path_mtu, hwif::Mtu::k2048);
  EXPECT_EQ(m2.attr.dest_qpn, 0x123456u);
  EXPECT_EQ(m2.attr.rq_psn, 0xabcdefu);
  EXPECT_EQ(m2.attr.max_dest_rd_atomic, 4);
  EXPECT_EQ(m2.attr.min_rnr_timer, 12);
  EXPECT_EQ(m2.attr.av.dlid, 9);
  EXPECT_EQ(m2.attr.av.sl, 2);
  EXPECT_TRUE(m2.attr.av.is_global);
  EXPECT_EQ(m2.attr.av.dgid.raw[15], 0x42);
  EXPECT_EQ(m2.attr.av.hop_limit, 3);

  ibv_qp_attr q{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(query_qp(qp, &q, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(q.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(q.dest_qp_num, 0x123456u);
  EXPECT_EQ(q.ah_attr.dlid, 9);
  EXPECT_EQ(q.cap.max_inline_data, 12u);  // one SGE, legacy RC: a one-block WQE (qp_caps.cc)
  EXPECT_EQ(qi.qp_type, IBV_QPT_RC);
  EXPECT_EQ(qi.send_cq, qp->send_cq);
}

TEST(ControlPath, ResettingAQpRewindsItsRingsToIndexZero) {
  DeviceHarness h;
  ibv_qp* qp = h.qp(IBV_QPT_RC);
  h.to_rts(qp);
  std::array<uint8_t, 8> buf{};
  ibv_sge sge{addr_of(buf.data()), 8, 1};
  ibv_send_wr wr = send_wr(1, &sge, 1);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  EXPECT_EQ(h.qp_dbrec(qp)->sq_counter.get(), 2u);
  h.to_state(qp, IBV_QPS_RESET);
  EXPECT_EQ(qp->state, IBV_QPS_RESET);
  EXPECT_EQ(h.qp_dbrec(qp)->sq_counter.get(), 0u);
  h.to_rts(qp);
  h.dev.mmio.clear();
  ASSERT_EQ(post_send(qp, &wr, &bad), 0);
  ASSERT_EQ(h.dev.mmio.size(), 1u);
  EXPECT_EQ(be32_at(h.dev.mmio[0].bytes.data()) >> 8, 0u);  // WQE index 0 again
}

TEST(ControlPath, SrqLimitCanBeModifiedAndQueriedButNotItsSize) {
  DeviceHarness h;
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 5;
  sa.attr.max_sge = 1;
  sa.attr.srq_limit = 2;
  ibv_srq* srq = create_srq(h.pd(), &sa);
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(sa.attr.max_wr, 7u);
  EXPECT_EQ(srq->context, h.ctx());
  ibv_srq_attr a{};
  a.srq_limit = 3;
  EXPECT_EQ(modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  a.max_wr = 100;
  EXPECT_EQ(modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL);
  ibv_srq_attr q{};
  ASSERT_EQ(query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 3u);
  EXPECT_EQ(q.max_wr, 7u);
  EXPECT_EQ(q.max_sge, 1u);
  EXPECT_EQ(dealloc_pd(h.pd()), EBUSY);
  EXPECT_EQ(destroy_srq(srq), 0);
  sa.attr.max_wr = 16384;
  EXPECT_EQ(create_srq(h.pd(), &sa), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softhca::driver::testing
