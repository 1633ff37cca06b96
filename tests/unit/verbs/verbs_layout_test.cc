// The struct layouts that unmodified binaries compiled against rdma-core 44's <infiniband/verbs.h>
// hard-code (verbs-abi.md §2.1-2.3, x86-64): the static_asserts stop the build if the header this
// project compiles against ever disagrees; the tests show the inline wrappers' view of a context
// whose header is set the way ibv_open_device sets it. (Linked with softhca::verbs only because
// the inline ibv_query_port wrapper references the exported fallback.)
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

namespace {

#if defined(__x86_64__)
// verbs_context: the extended ops "grow up" before the embedded ibv_context, which must be last.
static_assert(sizeof(verbs_context) == 648);
static_assert(offsetof(verbs_context, context) == 320);
static_assert(offsetof(verbs_context, sz) == 312);
static_assert(offsetof(verbs_context, query_port) == 0);
static_assert(offsetof(verbs_context, create_cq_ex) == 200);
static_assert(offsetof(verbs_context, priv) == 208);
static_assert(offsetof(verbs_context, query_device_ex) == 216);
static_assert(offsetof(verbs_context, create_qp_ex) == 264);
static_assert(offsetof(verbs_context, create_srq_ex) == 280);
static_assert(offsetof(verbs_context, close_xrcd) == 296);

// ibv_context and the ops the inline data-path wrappers call without a NULL check.
static_assert(sizeof(ibv_context) == 328);
static_assert(offsetof(ibv_context, ops) == 8);
static_assert(offsetof(ibv_context, cmd_fd) == 264);
static_assert(offsetof(ibv_context, async_fd) == 268);
static_assert(offsetof(ibv_context, num_comp_vectors) == 272);
static_assert(offsetof(ibv_context, abi_compat) == 320);
static_assert(offsetof(ibv_context_ops, alloc_mw) == 56);
static_assert(offsetof(ibv_context_ops, bind_mw) == 64);
static_assert(offsetof(ibv_context_ops, dealloc_mw) == 72);
static_assert(offsetof(ibv_context_ops, poll_cq) == 88);
static_assert(offsetof(ibv_context_ops, req_notify_cq) == 96);
static_assert(offsetof(ibv_context_ops, post_srq_recv) == 160);
static_assert(offsetof(ibv_context_ops, post_send) == 200);
static_assert(offsetof(ibv_context_ops, post_recv) == 208);

// Objects whose plain fields applications read or whose function pointers they call.
static_assert(sizeof(ibv_device) == 664);
static_assert(offsetof(ibv_device, node_type) == 16);
static_assert(offsetof(ibv_device, name) == 24);
static_assert(offsetof(ibv_device, ibdev_path) == 408);
static_assert(sizeof(ibv_qp) == 160);
static_assert(offsetof(ibv_qp, qp_num) == 52);
static_assert(offsetof(ibv_qp, state) == 56);
static_assert(offsetof(ibv_qp, qp_type) == 60);
static_assert(sizeof(ibv_qp_ex) == 352);
static_assert(offsetof(ibv_qp_ex, qp_base) == 0);
static_assert(offsetof(ibv_qp_ex, wr_id) == 168);
static_assert(offsetof(ibv_qp_ex, wr_start) == 320);
static_assert(offsetof(ibv_qp_ex, wr_atomic_write) == 344);
static_assert(sizeof(ibv_cq) == 128);
static_assert(offsetof(ibv_cq, cqe) == 28);
static_assert(sizeof(ibv_cq_ex) == 288);
static_assert(offsetof(ibv_cq_ex, start_poll) == 144);
static_assert(offsetof(ibv_mr, lkey) == 36);
static_assert(offsetof(ibv_comp_channel, fd) == 8);
static_assert(sizeof(ibv_port_attr) == 52);
static_assert(sizeof(ibv_gid_entry) == 32);
static_assert(sizeof(ibv_device_attr_ex) == 400);
#endif

// A context header as ibv_open_device leaves it: sz = sizeof(verbs_context), abi_compat set.
struct ExtendedContext {
  verbs_context vctx{};
  ExtendedContext() {
    vctx.sz = sizeof(verbs_context);
    vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
  }
};

int fake_query_port(ibv_context*, uint8_t, ibv_port_attr*, size_t port_attr_len) {
  return static_cast<int>(port_attr_len);  // echoes the size the inline wrapper passes
}

TEST(VerbsLayout, TheContextHandleSitsThreeHundredTwentyBytesIntoTheVerbsContext) {
  ExtendedContext ext;
  ibv_context* ctx = &ext.vctx.context;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ctx) - reinterpret_cast<uintptr_t>(&ext.vctx), 320u);
  EXPECT_EQ(verbs_get_ctx(ctx), &ext.vctx);
}

TEST(VerbsLayout, AContextWithoutTheExtendedMarkerHasNoVerbsContext) {
  ExtendedContext ext;
  ext.vctx.context.abi_compat = nullptr;
  EXPECT_EQ(verbs_get_ctx(&ext.vctx.context), nullptr);
}

TEST(VerbsLayout, WithSzOf648EveryOpIsEligibleEvenTheFirst) {
  ExtendedContext ext;
  ext.vctx.query_port = fake_query_port;
  EXPECT_EQ(verbs_get_ctx_op(&ext.vctx.context, query_port), &ext.vctx);
  ext.vctx.sz = sizeof(verbs_context) - 1;  // one byte short: query_port (offset 0) is cut off
  EXPECT_EQ(verbs_get_ctx_op(&ext.vctx.context, query_port), nullptr);
}

TEST(VerbsLayout, TheQueryPortWrapperPassesTheFiftyTwoByteStructSize) {
  ExtendedContext ext;
  ext.vctx.query_port = fake_query_port;
  ibv_port_attr attr{};
  EXPECT_EQ(ibv_query_port(&ext.vctx.context, 1, &attr), 52);
}

TEST(VerbsLayout, ANullOpMakesTheInlineWrapperAnswerEopnotsupp) {
  ExtendedContext ext;
  ibv_cq_init_attr_ex cq_attr{};
  cq_attr.cqe = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(&ext.vctx.context, &cq_attr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

}  // namespace
