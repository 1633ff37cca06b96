// What libibverbs itself decides, before or instead of calling the driver: the op table of a
// context, the argument and comp_mask checks of the extended verbs, the EOPNOTSUPP convention of
// unsupported exports, and the pure helpers (strings, rates, kernel-struct copies, sysfs reads).
// None of these tests reaches the driver; the ones that need a device are in
// tests/conformance/c_api_smoke.c.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "verbs/glue.h"

namespace {

// A context as ibv_open_device leaves it, without a driver behind it: only the library's own
// checks may run on it.
struct BareContext {
  verbs_context vctx{};
  BareContext() {
    vctx.sz = sizeof(verbs_context);
    vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
    // Pretend an earlier layer filled everything, so the test sees what install overwrites.
    vctx.create_cq_ex = reinterpret_cast<decltype(vctx.create_cq_ex)>(0x1);
    softhca::verbs::install_context_ops(&vctx);
  }
  ibv_context* ctx() { return &vctx.context; }
};

TEST(VerbsContextOps, ANewContextOffersExactlyTheFourteenSupportedExtendedVerbs) {
  BareContext c;
  ibv_context* ctx = c.ctx();
  EXPECT_NE(verbs_get_ctx_op(ctx, query_port), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, query_device_ex), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, create_qp_ex), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, create_srq_ex), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, create_cq_ex), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, modify_cq), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, query_rt_values), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, alloc_td), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, dealloc_td), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, alloc_parent_domain), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, open_xrcd), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, close_xrcd), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, open_qp), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, get_srq_num), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, alloc_dm), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, free_dm), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx, reg_dm_mr), nullptr);
  EXPECT_EQ(verbs_get_ctx_op(ctx, modify_qp_rate_limit), nullptr);
  EXPECT_EQ(verbs_get_ctx_op(ctx, ibv_create_flow), nullptr);
}

TEST(VerbsContextOps, ExtendedCqVerbsRefuseNullArgumentsBeforeTheDriver) {
  BareContext c;
  errno = 0;
  EXPECT_EQ(c.vctx.create_cq_ex(c.ctx(), nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(c.vctx.query_rt_values(c.ctx(), nullptr), EINVAL);
  EXPECT_EQ(ibv_query_rt_values_ex(c.ctx(), nullptr), EINVAL);
  ibv_cq cq{};
  cq.context = c.ctx();
  EXPECT_EQ(ibv_modify_cq(&cq, nullptr), EINVAL);
}

TEST(VerbsContextOps, UnsupportedExtendedVerbsAnswerEopnotsuppThroughTheInlineWrappers) {
  BareContext c;
  ibv_qp qp{};
  qp.context = c.ctx();
  ibv_qp_rate_limit_attr rl{};
  EXPECT_EQ(ibv_modify_qp_rate_limit(&qp, &rl), EOPNOTSUPP);
}

// As libibverbs' ibv_cmd_open_xrcd and ibv_cmd_open_qp, before any device is asked.
TEST(VerbsContextOps, OpenXrcdAndOpenQpCheckTheirCompMasksBeforeTheDriver) {
  BareContext c;
  ibv_xrcd_init_attr xrcd_attr{};
  errno = 0;
  EXPECT_EQ(ibv_open_xrcd(c.ctx(), &xrcd_attr), nullptr);  // FD and OFLAGS are required
  EXPECT_EQ(errno, EINVAL);
  xrcd_attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS | IBV_XRCD_INIT_ATTR_RESERVED;
  errno = 0;
  EXPECT_EQ(ibv_open_xrcd(c.ctx(), &xrcd_attr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);

  ibv_qp_open_attr open_attr{};
  open_attr.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_TYPE;  // no XRCD
  open_attr.qp_type = IBV_QPT_XRC_RECV;
  errno = 0;
  EXPECT_EQ(ibv_open_qp(c.ctx(), &open_attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_xrcd xrcd{};
  xrcd.context = c.ctx();
  open_attr.comp_mask |= IBV_QP_OPEN_ATTR_XRCD;
  open_attr.xrcd = &xrcd;
  open_attr.qp_type = IBV_QPT_RC;  // only a TGT QP can be opened
  errno = 0;
  EXPECT_EQ(ibv_open_qp(c.ctx(), &open_attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// A context whose driver leaves the window ops empty (softhca's fills them: MemoryWindow.*):
// ibv_alloc_mw says EOPNOTSUPP, and the two ops verbs.h calls unchecked still answer.
TEST(VerbsContextOps, WithoutDriverWindowOpsAllocMwIsEopnotsuppAndTheUncheckedOpsStillAnswer) {
  BareContext c;
  ibv_pd pd{};
  pd.context = c.ctx();
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(&pd, IBV_MW_TYPE_1), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ASSERT_NE(c.vctx.context.ops.dealloc_mw, nullptr);
  ASSERT_NE(c.vctx.context.ops.bind_mw, nullptr);
  EXPECT_EQ(c.vctx.context.ops.dealloc_mw(nullptr), EOPNOTSUPP);
  EXPECT_EQ(c.vctx.context.ops.bind_mw(nullptr, nullptr, nullptr), EOPNOTSUPP);
}

TEST(VerbsContextOps, QueryDeviceExRejectsAnInputCompMask) {
  BareContext c;
  ibv_query_device_ex_input input{};
  input.comp_mask = 1;
  ibv_device_attr_ex attr{};
  EXPECT_EQ(c.vctx.query_device_ex(c.ctx(), &input, &attr, sizeof(attr)), EINVAL);
  EXPECT_EQ(ibv_query_device_ex(c.ctx(), &input, &attr), EINVAL);
}

TEST(VerbsContextOps, CreateQpExOfAnXrcRecvQpNeedsAnXrcdOfTheContextAndCreationFlagsAreNotSupported) {
  BareContext c;
  BareContext other;
  ibv_pd pd{};
  pd.context = c.ctx();
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_XRC_RECV;
  attr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(c.ctx(), &attr), nullptr);  // no XRCD given
  EXPECT_EQ(errno, EINVAL);
  ibv_xrcd foreign{};
  foreign.context = other.ctx();
  attr.xrcd = &foreign;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(c.ctx(), &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);

  attr.qp_type = IBV_QPT_RC;
  attr.pd = &pd;
  attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  attr.create_flags = IBV_QP_CREATE_SCATTER_FCS;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(c.ctx(), &attr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST(VerbsContextOps, CreateQpExWithAnUndefinedCompMaskBitIsInvalid) {
  BareContext c;
  ibv_pd pd{};
  pd.context = c.ctx();
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.pd = &pd;
  attr.comp_mask = IBV_QP_INIT_ATTR_PD | (1u << 7);
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(c.ctx(), &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST(VerbsContextOps, CreateQpExNeedsAPdOfTheSameContext) {
  BareContext c;
  BareContext other;
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  attr.send_ops_flags = IBV_QP_EX_WITH_SEND;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(c.ctx(), &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);

  ibv_pd foreign_pd{};
  foreign_pd.context = other.ctx();
  attr.comp_mask |= IBV_QP_INIT_ATTR_PD;
  attr.pd = &foreign_pd;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(c.ctx(), &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST(VerbsContextOps, CreateSrqExOfAnXrcSrqNeedsItsXrcdAndCqAndTagMatchingIsNotSupported) {
  BareContext c;
  ibv_pd pd{};
  pd.context = c.ctx();
  ibv_srq_init_attr_ex attr{};
  attr.comp_mask =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  attr.srq_type = IBV_SRQT_XRC;
  attr.pd = &pd;  // but no XRCD and no CQ
  errno = 0;
  EXPECT_EQ(ibv_create_srq_ex(c.ctx(), &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.srq_type = IBV_SRQT_TM;
  errno = 0;
  EXPECT_EQ(ibv_create_srq_ex(c.ctx(), &attr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST(VerbsArgumentChecks, RemoteWriteOrAtomicWithoutLocalWriteIsRejectedBeforeTheDriver) {
  ibv_pd pd{};  // never handed to the driver: the check comes first
  char buf[64];
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(&pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr_iova2(&pd, buf, sizeof(buf), 0, IBV_ACCESS_REMOTE_ATOMIC), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST(VerbsArgumentChecks, GidQueriesRejectFlagsAndShortEntries) {
  BareContext c;
  ibv_gid_entry entry{};
  EXPECT_EQ(ibv_query_gid_ex(c.ctx(), 1, 0, &entry, 1), EINVAL);
  EXPECT_EQ(_ibv_query_gid_ex(c.ctx(), 1, 0, &entry, 0, sizeof(entry) - 1), EINVAL);
  EXPECT_EQ(ibv_query_gid_table(c.ctx(), &entry, 1, 1), -EINVAL);
}

TEST(VerbsArgumentChecks, NullHandlesAreRefusedNotDereferenced) {
  errno = 0;
  EXPECT_EQ(ibv_get_device_name(nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_close_device(nullptr), EINVAL);
  EXPECT_EQ(ibv_dealloc_pd(nullptr), EINVAL);
  EXPECT_EQ(ibv_modify_qp(nullptr, nullptr, IBV_QP_STATE), EINVAL);
  EXPECT_EQ(ibv_resize_cq(nullptr, 16), EINVAL);
  ibv_gid gid{};
  EXPECT_EQ(ibv_attach_mcast(nullptr, &gid, 0), EINVAL);
  EXPECT_EQ(ibv_detach_mcast(nullptr, &gid, 0), EINVAL);
}

TEST(VerbsUnsupported, IntVerbsReturnEopnotsupp) {
  EXPECT_EQ(ibv_query_ece(nullptr, nullptr), EOPNOTSUPP);
  EXPECT_EQ(ibv_set_ece(nullptr, nullptr), EOPNOTSUPP);
}

TEST(VerbsUnsupported, ObjectVerbsReturnNullWithErrnoEopnotsupp) {
  errno = 0;
  EXPECT_EQ(ibv_import_device(0), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(ibv_import_pd(nullptr, 1), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(ibv_import_mr(nullptr, 1), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(ibv_reg_dmabuf_mr(nullptr, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

// libibverbs' own checks of ibv_rereg_mr: an input error, and the driver is never asked (this MR
// has none behind it).
TEST(VerbsRereg, InputErrorsAreFoundBeforeTheDriver) {
  ibv_mr mr{};
  char byte = 0;
  const struct {
    ibv_mr* mr;
    int flags;
    void* addr;
    size_t length;
    int access;
  } cases[] = {
      {nullptr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, 0, 0},
      {&mr, IBV_REREG_MR_FLAGS_SUPPORTED + 1, nullptr, 0, 0},
      {&mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, 1, 0},
      {&mr, IBV_REREG_MR_CHANGE_TRANSLATION, &byte, 0, 0},
      {&mr, IBV_REREG_MR_CHANGE_TRANSLATION, &byte, 1, IBV_ACCESS_LOCAL_WRITE},
      {&mr, IBV_REREG_MR_CHANGE_PD, nullptr, 0, 0},
  };
  for (const auto& c : cases) {
    errno = 0;
    EXPECT_EQ(ibv_rereg_mr(c.mr, c.flags, nullptr, c.addr, c.length, c.access), IBV_REREG_MR_ERR_INPUT) << c.flags;
    EXPECT_EQ(errno, EINVAL) << c.flags;
  }
}

// UNNEEDED is a promise about behaviour: a range given to ibv_dontfork_range is not hidden from a
// fork child (rdma-core with fork support off would madvise it MADV_DONTFORK, and the child's read
// of it would fault), so the child reads the parent's bytes.
TEST(VerbsFork, ForkSupportIsReportedUnneededAndNoRangeIsHiddenFromAChild) {
  EXPECT_EQ(ibv_fork_init(), 0);
  EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
  constexpr size_t kBytes = 4096;
  void* page = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  auto* bytes = static_cast<volatile uint8_t*>(page);
  bytes[100] = 42;
  ASSERT_EQ(ibv_dontfork_range(page, kBytes), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(bytes[100]);  // a hidden page would kill the child with SIGSEGV instead
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 42);
  EXPECT_EQ(ibv_dofork_range(page, kBytes), 0);
  munmap(page, kBytes);
}

TEST(VerbsStrings, StatusesStatesAndEventsReadAsInRdmaCore) {
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR), "Work Request Flushed Error");
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_RNR_RETRY_EXC_ERR), "RNR retry counter exceeded");
  EXPECT_STREQ(ibv_wc_status_str(static_cast<ibv_wc_status>(999)), "unknown");
  EXPECT_STREQ(ibv_port_state_str(IBV_PORT_ACTIVE), "active");
  EXPECT_STREQ(ibv_port_state_str(static_cast<ibv_port_state>(42)), "unknown");
  EXPECT_STREQ(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter");
  EXPECT_STREQ(ibv_node_type_str(IBV_NODE_UNKNOWN), "unknown");
  EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_PORT_ACTIVE), "port active");
  EXPECT_STREQ(ibv_event_type_str(static_cast<ibv_event_type>(-5)), "unknown");
}

TEST(VerbsRates, MultiplesOfTwoPointFiveGbpsRoundTrip) {
  EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_2_5_GBPS), 1);
  EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
  EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_120_GBPS), 48);
  EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_14_GBPS), -1);
  EXPECT_EQ(mult_to_ibv_rate(4), IBV_RATE_10_GBPS);
  EXPECT_EQ(mult_to_ibv_rate(3), IBV_RATE_MAX);
  for (int r = IBV_RATE_2_5_GBPS; r <= IBV_RATE_1200_GBPS; ++r) {
    const auto rate = static_cast<ibv_rate>(r);
    EXPECT_EQ(mbps_to_ibv_rate(ibv_rate_to_mbps(rate)), rate) << "rate " << r;
  }
  EXPECT_EQ(ibv_rate_to_mbps(IBV_RATE_14_GBPS), 14062);
  EXPECT_EQ(ibv_rate_to_mbps(IBV_RATE_MAX), -1);
}

TEST(VerbsKernAbi, QpAttributesFromTheKernelCopyFieldByField) {
  ib_uverbs_qp_attr src{};
  src.qp_state = IBV_QPS_RTS;
  src.cur_qp_state = IBV_QPS_RTR;
  src.path_mtu = IBV_MTU_2048;
  src.dest_qp_num = 0x123456;
  src.ah_attr.dlid = 7;
  src.ah_attr.grh.dgid[15] = 0xaa;
  src.max_inline_data = 60;
  src.timeout = 14;
  ibv_qp_attr dst{};
  ibv_copy_qp_attr_from_kern(&dst, &src);
  EXPECT_EQ(dst.cur_qp_state, IBV_QPS_RTR);
  EXPECT_EQ(dst.path_mtu, IBV_MTU_2048);
  EXPECT_EQ(dst.dest_qp_num, 0x123456u);
  EXPECT_EQ(dst.ah_attr.dlid, 7);
  EXPECT_EQ(dst.ah_attr.grh.dgid.raw[15], 0xaa);
  EXPECT_EQ(dst.cap.max_inline_data, 60u);
  EXPECT_EQ(dst.timeout, 14);
}

TEST(VerbsSysfs, AFileIsReadWithoutItsTrailingNewline) {
  char dir[] = "/tmp/softhca_sysfs_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/attr";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("MT_0000000010\n", f);
  std::fclose(f);
  char buf[64];
  EXPECT_EQ(ibv_read_sysfs_file(dir, "attr", buf, sizeof(buf)), 13);
  EXPECT_STREQ(buf, "MT_0000000010");
  char small[4];
  EXPECT_EQ(ibv_read_sysfs_file(dir, "attr", small, sizeof(small)), 3);
  EXPECT_STREQ(small, "MT_");
  EXPECT_EQ(ibv_read_sysfs_file(dir, "missing", buf, sizeof(buf)), -1);
  unlink(path.c_str());
  rmdir(dir);
}

}  // namespace
