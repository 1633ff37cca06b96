// Thread domains and parent domains through the public verbs API (ibv_alloc_td(3),
// ibv_alloc_parent_domain(3)): a parent domain's alloc gives every ring and doorbell record of the
// QPs and CQs created on it — asked with mlx5dv's resource types, and the device really completes
// into that memory — and its free takes each back when they are destroyed; IBV_ALLOCATOR_USE_DEFAULT
// falls back to the library's own memory and a NULL from alloc fails the creation with ENOMEM;
// traffic through such a QP delivers its bytes; the domains hold their PD and TD (EBUSY) until
// they go; and bad attributes are EINVAL. A (softhca_0) sends to B (softhca_1), whose QP and
// receive CQ are in the parent domain.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "verbs_pair.h"

namespace softhca::conformance {
namespace {

// MLX5DV_RES_TYPE_* of <infiniband/mlx5dv.h>: (RDMA_DRIVER_MLX5 = 1) << 32 | n.
constexpr uint64_t kResQp = (uint64_t{1} << 32) | 1;
constexpr uint64_t kResDbr = (uint64_t{1} << 32) | 3;
constexpr uint64_t kResSrq = (uint64_t{1} << 32) | 4;
constexpr uint64_t kResCq = (uint64_t{1} << 32) | 5;
constexpr size_t kDstOff = 2 * kMiB;

// The caller's allocator: what it was asked for and what it still has out.
struct Allocator {
  enum class Mode { kAllocate, kUseDefault, kFail } mode = Mode::kAllocate;
  ibv_pd* expected_pd = nullptr;  // the parent domain every call must name
  struct Block {
    size_t size;
    uint64_t type;
  };
  std::map<void*, Block> live;
  std::map<uint64_t, int> allocs;  // by resource type
  int frees = 0;
  int bad_calls = 0;  // a call naming another PD, a misaligned block, a free of a block not out

  static void* alloc(ibv_pd* pd, void* ctx, size_t size, size_t alignment, uint64_t type) {
    auto& a = *static_cast<Allocator*>(ctx);
    if (pd != a.expected_pd) ++a.bad_calls;
    ++a.allocs[type];
    if (a.mode == Mode::kUseDefault) return IBV_ALLOCATOR_USE_DEFAULT;
    if (a.mode == Mode::kFail) return nullptr;
    void* p = std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
    std::memset(p, 0xa5, size);  // the library must zero what it is given
    a.live[p] = Block{size, type};
    return p;
  }
  static void free(ibv_pd* pd, void* ctx, void* ptr, uint64_t type) {
    auto& a = *static_cast<Allocator*>(ctx);
    if (pd != a.expected_pd) ++a.bad_calls;
    auto it = a.live.find(ptr);
    if (it == a.live.end() || it->second.type != type) {
      ++a.bad_calls;
      return;
    }
    a.live.erase(it);
    ++a.frees;
    std::free(ptr);
  }
  // Whether a block of `type` holds a byte other than 0 (the device wrote into it).
  [[nodiscard]] bool written(uint64_t type) const {
    for (const auto& [p, b] : live) {
      if (b.type != type) continue;
      const auto* bytes = static_cast<const uint8_t*>(p);
      for (size_t i = 0; i < b.size; ++i)
        if (bytes[i] != 0 && bytes[i] != 0xf0) return true;  // 0xf0: an untouched CQE's op_own
    }
    return false;
  }
};

class ParentDomain : public VerbsPair {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices)); }
  void TearDown() override {
    for (ibv_qp* qp : qps_) EXPECT_EQ(ibv_destroy_qp(qp), 0);
    for (ibv_cq* cq : cqs_) EXPECT_EQ(ibv_destroy_cq(cq), 0);
    if (parent_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(parent_), 0);
    }
    if (td_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_td(td_), 0);
    }
    EXPECT_EQ(alloc_.bad_calls, 0);
    EXPECT_TRUE(alloc_.live.empty()) << alloc_.live.size() << " blocks never freed";
    VerbsPair::TearDown();
  }
  ibv_pd* make_parent(bool allocators = true, ibv_td* td = nullptr) {
    ibv_parent_domain_init_attr attr{};
    attr.pd = b_.pd;
    attr.td = td;
    if (allocators) {
      attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
      attr.alloc = Allocator::alloc;
      attr.free = Allocator::free;
      attr.pd_context = &alloc_;
    }
    parent_ = ibv_alloc_parent_domain(b_.ctx, &attr);
    alloc_.expected_pd = parent_;
    return parent_;
  }
  ibv_cq* make_cq() {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 31;
    attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    attr.parent_domain = parent_;
    attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    ibv_cq_ex* cq = ibv_create_cq_ex(b_.ctx, &attr);
    if (cq == nullptr) return nullptr;
    cqs_.push_back(ibv_cq_ex_to_cq(cq));
    return ibv_cq_ex_to_cq(cq);
  }
  ibv_qp* make_qp(ibv_cq* cq) {
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 8;
    init.cap.max_recv_wr = 8;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(parent_, &init);
    if (qp != nullptr) qps_.push_back(qp);
    return qp;
  }
  // Connects B's `qp` with a new QP of A and sends `len` bytes from A into B's buffer.
  void send_through(ibv_qp* qp, ibv_cq* cq, uint32_t len) {
    ibv_qp* a = create_qp(a_, IBV_QPT_RC, QpOptions{});
    ASSERT_NE(a, nullptr);
    const QpOptions o;
    ASSERT_EQ(modify_to_init(qp, o), 0);
    ASSERT_EQ(modify_to_rtr(qp, a->qp_num, a_.lid, kPsnA, o), 0);
    ASSERT_EQ(modify_to_rts(qp, kPsnB, o), 0);
    ASSERT_EQ(modify_to_init(a, o), 0);
    ASSERT_EQ(modify_to_rtr(a, qp->qp_num, b_.lid, kPsnB, o), 0);
    ASSERT_EQ(modify_to_rts(a, kPsnA, o), 0);
    fill_pattern(a_.bytes().first(len), 3);
    ibv_sge recv = b_.sge(kDstOff, len);
    ASSERT_EQ(post_recv(qp, 9, std::span(&recv, 1)), 0);
    ibv_sge sge = a_.sge(0, len);
    SendArgs args;
    args.wr_id = 1;
    ASSERT_EQ(post_send(a, args, std::span(&sge, 1)), 0);
    ASSERT_EQ(poll_one(a_.cq).status, IBV_WC_SUCCESS);
    const ibv_wc wc = poll_one(cq);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
    EXPECT_EQ(wc.wr_id, 9u);
    EXPECT_EQ(wc.byte_len, len);
    EXPECT_TRUE(same_bytes({b_.buf + kDstOff, len}, {a_.buf, len}));
  }

  Allocator alloc_;
  ibv_pd* parent_ = nullptr;
  ibv_td* td_ = nullptr;
  std::vector<ibv_qp*> qps_;
  std::vector<ibv_cq*> cqs_;
};

TEST_F(ParentDomain, TheCallersAllocatorHoldsTheRingsAndTheDeviceCompletesIntoThem) {
  ibv_td_init_attr td_attr{};
  td_ = ibv_alloc_td(b_.ctx, &td_attr);
  ASSERT_NE(td_, nullptr) << errno_name(errno);
  ASSERT_NE(make_parent(true, td_), nullptr) << errno_name(errno);
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr) << errno_name(errno);
  // Expect: the CQ's ring and its doorbell record from the caller.
  EXPECT_EQ(alloc_.allocs[kResCq], 1);
  EXPECT_EQ(alloc_.allocs[kResDbr], 1);
  ibv_qp* qp = make_qp(cq);
  ASSERT_NE(qp, nullptr) << errno_name(errno);
  // Expect: the send ring and the receive ring (QP), and the QP's doorbell record.
  EXPECT_EQ(alloc_.allocs[kResQp], 2);
  EXPECT_EQ(alloc_.allocs[kResDbr], 2);
  EXPECT_FALSE(alloc_.written(kResCq));  // zeroed by the library (the allocator filled 0xa5)
  ASSERT_NO_FATAL_FAILURE(send_through(qp, cq, 3000));
  // Expect: the receive's CQE was written into the caller's CQ memory.
  EXPECT_TRUE(alloc_.written(kResCq));
  EXPECT_TRUE(alloc_.written(kResQp));  // the receive WQE
  // Expect: the domains are held while in use.
  EXPECT_EQ(ibv_dealloc_pd(parent_), EBUSY);
  EXPECT_EQ(ibv_dealloc_pd(b_.pd), EBUSY);
  EXPECT_EQ(ibv_dealloc_td(td_), EBUSY);
  // Expect: destroying the QP gives its three blocks back.
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  qps_.clear();
  EXPECT_EQ(alloc_.frees, 3);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  cqs_.clear();
  EXPECT_EQ(alloc_.frees, 5);
}

TEST_F(ParentDomain, AnSrqInAParentDomainTakesItsRingFromTheAllocator) {
  ASSERT_NE(make_parent(), nullptr) << errno_name(errno);
  ibv_srq_init_attr attr{};
  attr.attr.max_wr = 16;
  attr.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(parent_, &attr);
  ASSERT_NE(srq, nullptr) << errno_name(errno);
  EXPECT_EQ(alloc_.allocs[kResSrq], 1);
  EXPECT_EQ(alloc_.allocs[kResDbr], 1);
  EXPECT_EQ(ibv_dealloc_pd(parent_), EBUSY);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(alloc_.frees, 2);
}

TEST_F(ParentDomain, UseDefaultFallsBackAndANullAllocationFailsWithEnomem) {
  ASSERT_NE(make_parent(), nullptr) << errno_name(errno);
  alloc_.mode = Allocator::Mode::kUseDefault;
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr) << errno_name(errno);
  ibv_qp* qp = make_qp(cq);
  ASSERT_NE(qp, nullptr) << errno_name(errno);
  EXPECT_EQ(alloc_.allocs[kResQp], 2);  // asked, and told to use the default
  ASSERT_NO_FATAL_FAILURE(send_through(qp, cq, 100));
  alloc_.mode = Allocator::Mode::kFail;
  errno = 0;
  EXPECT_EQ(make_qp(cq), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(make_cq(), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(alloc_.frees, 0);
}

TEST_F(ParentDomain, AParentDomainWithoutAllocatorsProtectsAsItsPd) {
  ASSERT_NE(make_parent(false), nullptr) << errno_name(errno);
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr) << errno_name(errno);
  ibv_qp* qp = make_qp(cq);
  ASSERT_NE(qp, nullptr) << errno_name(errno);
  // B's buffer is registered on b_.pd: the parent domain's QP may receive into it.
  ASSERT_NO_FATAL_FAILURE(send_through(qp, cq, 2048));
  EXPECT_TRUE(alloc_.allocs.empty());
}

TEST_F(ParentDomain, BadAttributesAreEinval) {
  ibv_td_init_attr td_attr{};
  td_attr.comp_mask = 1;
  errno = 0;
  EXPECT_EQ(ibv_alloc_td(b_.ctx, &td_attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_parent_domain_init_attr attr{};
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(b_.ctx, &attr), nullptr);  // no PD
  EXPECT_EQ(errno, EINVAL);
  attr.pd = a_.pd;  // another context's
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(b_.ctx, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.pd = b_.pd;
  attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT << 1;
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(b_.ctx, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
  attr.alloc = Allocator::alloc;  // without free
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(b_.ctx, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // A CQ's PD must be a parent domain.
  ibv_cq_init_attr_ex cq_attr{};
  cq_attr.cqe = 4;
  cq_attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  cq_attr.parent_domain = b_.pd;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(b_.ctx, &cq_attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softhca::conformance
