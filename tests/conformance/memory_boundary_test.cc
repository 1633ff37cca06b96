// Registered memory the application misuses, through the public verbs C API (issue 15, rows 6-9):
// deregistration gives the pages back (no shared memory kept over reg/dereg/munmap cycles); the
// device keeps the pages pinned at registration when the application unmaps, re-maps or protects
// its range, so one-sided operations neither crash nor reach the new memory; write access on memory
// the application cannot write is refused with EFAULT. Each case is a row of docs/bad-input.md.
// Runs on softhca_0 and softhca_1 with SOFTHCA_NUM_DEVICES=2 (private mode), on softhca_0 alone
// (loopback) in the shared runtime (memory_boundary_shared_test).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "bad_input_table.h"
#include "memfd_census.h"
#include "verbs_pair.h"

namespace softhca::conformance {

// How gtest shows the parameter (in test listings and ctest names).
void PrintTo(Topology topology, std::ostream* out) {
  *out << (topology == Topology::kTwoDevices ? "two devices" : "loopback");
}

namespace {

constexpr size_t kRegionBytes = 2 * 4096;
constexpr uint32_t kMsgBytes = 3000;
constexpr size_t kReadBackOff = 1 * kMiB;  // where A's buffer receives RDMA READs
constexpr size_t kSourceOff = 4096;        // where A's buffer holds what it writes

uint8_t* map_anonymous(size_t len, int prot = PROT_READ | PROT_WRITE) {
  void* p = ::mmap(nullptr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

std::string mr_or_errno(const ibv_mr* mr, int err) {
  return mr != nullptr ? "an MR" : "NULL, errno " + errno_name(err);
}

// Shmem of /proc/meminfo [bytes]: the whole system's, so only reported.
uint64_t system_shmem_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "Shmem:") return kib * 1024;
  }
  return 0;
}

// Parameterised by the topology the runtime offers (and registered as gtest registers parameterised
// suites, after every plain test: these rows come last in docs/bad-input.md).
class MemoryBoundary : public VerbsPair, public ::testing::WithParamInterface<Topology> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(open(GetParam()));
    ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, QpOptions{}, &p_));
    fill_pattern(a_.bytes().subspan(kSourceOff, kMsgBytes), 21);
  }
  void TearDown() override {
    for (ibv_mr* mr : regions_) EXPECT_EQ(ibv_dereg_mr(mr), 0) << "deregistering memory the application unmapped";
    for (const auto& [p, len] : mappings_) ::munmap(p, len);
    VerbsPair::TearDown();
  }

  // Maps kRegionBytes of fresh memory and registers it on e's PD with every right.
  ibv_mr* region(Endpoint& e, uint8_t** mapping) {
    *mapping = map_anonymous(kRegionBytes);
    EXPECT_NE(*mapping, nullptr);
    if (*mapping == nullptr) return nullptr;
    mappings_.emplace_back(*mapping, kRegionBytes);
    ibv_mr* mr = ibv_reg_mr(e.pd, *mapping, kRegionBytes, static_cast<int>(kAllAccess));
    EXPECT_NE(mr, nullptr) << errno_name(errno);
    if (mr != nullptr) regions_.push_back(mr);
    return mr;
  }

  // One signaled RDMA WRITE or READ from A of kMsgBytes, its completion status.
  ibv_wc_status one_sided(ibv_wr_opcode op, uint64_t local, uint32_t lkey, uint64_t remote, uint32_t rkey) {
    ibv_sge sge{local, kMsgBytes, lkey};
    SendArgs args;
    args.opcode = op;
    args.remote_addr = remote;
    args.rkey = rkey;
    EXPECT_EQ(post_send(p_.a, args, std::span(&sge, 1)), 0);
    return poll_one(a_.cq).status;
  }
  // A's pattern (at kSourceOff) written to `remote`.
  ibv_wc_status write_pattern(uint64_t remote, uint32_t rkey) {
    return one_sided(IBV_WR_RDMA_WRITE, a_.addr(kSourceOff), a_.mr->lkey, remote, rkey);
  }
  // `remote` read back into A's buffer (at kReadBackOff, cleared first): whether it is A's pattern
  // (`what` the test calls it).
  std::string read_back(uint64_t remote, uint32_t rkey, const std::string& what = "the bytes written") {
    std::memset(a_.buf + kReadBackOff, 0, kMsgBytes);
    const ibv_wc_status s = one_sided(IBV_WR_RDMA_READ, a_.addr(kReadBackOff), a_.mr->lkey, remote, rkey);
    const bool same = std::memcmp(a_.buf + kReadBackOff, a_.buf + kSourceOff, kMsgBytes) == 0;
    return "READ " + wc_status_name(s) + (same ? " returns " + what : " returns OTHER bytes");
  }
  // The application unmaps one of the test's mappings (TearDown must not unmap its address again:
  // a window may live there by then).
  void unmap(uint8_t* p) {
    ASSERT_EQ(::munmap(p, kRegionBytes), 0);
    std::erase_if(mappings_, [&](const auto& m) { return m.first == p; });
  }
  [[nodiscard]] bool is_pattern(const uint8_t* p) const { return std::memcmp(p, a_.buf + kSourceOff, kMsgBytes) == 0; }

  QpPair p_;
  std::vector<ibv_mr*> regions_;
  std::vector<std::pair<uint8_t*, size_t>> mappings_;
};

TEST_P(MemoryBoundary, CyclesOfRegisteringAndDeregisteringALargeMappingKeepNoSharedMemory) {
  constexpr size_t kBytes = size_t{256} << 20;
  const int fds_before = test::open_memfds();
  const uint64_t mapped_before = test::mapped_memfd_bytes();
  const uint64_t shmem_before = system_shmem_bytes();
  int grew = 0;
  for (int cycle = 0; cycle < 8; ++cycle) {
    uint8_t* p = map_anonymous(kBytes);
    ASSERT_NE(p, nullptr);
    p[kBytes - 1] = static_cast<uint8_t>(cycle);
    ibv_mr* mr = ibv_reg_mr(a_.pd, p, kBytes, static_cast<int>(kAllAccess));
    ASSERT_NE(mr, nullptr) << errno_name(errno);
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
    ASSERT_EQ(::munmap(p, kBytes), 0);
    // Expect: after each cycle this process holds no more memfds, and maps no more of them.
    if (test::open_memfds() != fds_before || test::mapped_memfd_bytes() != mapped_before) ++grew;
  }
  RecordProperty("shmem_growth_bytes", std::to_string(static_cast<int64_t>(system_shmem_bytes() - shmem_before)));
  expect_row("8 x (mmap 256 MiB, ibv_reg_mr, ibv_dereg_mr, munmap)",
             "no shared memory kept: after every cycle no more memfds open or mapped than before",
             grew == 0 ? "no shared memory kept: after every cycle no more memfds open or mapped than before"
                       : std::to_string(grew) + " cycles kept shared memory",
             "real verbs unpin at dereg; munmap frees the pages");
}

TEST_P(MemoryBoundary, WritesFromOrIntoRegisteredMemoryTheApplicationUnmappedOrProtectedUseThePinnedPages) {
  // The source unmapped after registration: the device reads the pages it pinned.
  uint8_t* src = nullptr;
  ibv_mr* src_mr = region(a_, &src);
  ASSERT_NE(src_mr, nullptr);
  std::memcpy(src, a_.buf + kSourceOff, kMsgBytes);
  ASSERT_NO_FATAL_FAILURE(unmap(src));
  std::memset(b_.buf, 0, kMsgBytes);
  const ibv_wc_status from_unmapped = one_sided(IBV_WR_RDMA_WRITE, reinterpret_cast<uintptr_t>(src), src_mr->lkey,
                                                b_.addr(0), b_.mr->rkey);
  const std::string source = "source unmapped: " + wc_status_name(from_unmapped) +
                             (is_pattern(b_.buf) ? ", the target gets its bytes" : ", the target gets OTHER bytes");

  // The target made read-only: the bytes land in the pinned pages, which the application reads.
  uint8_t* ro = nullptr;
  ibv_mr* ro_mr = region(b_, &ro);
  ASSERT_NE(ro_mr, nullptr);
  ASSERT_EQ(::mprotect(ro, kRegionBytes, PROT_READ), 0);
  const ibv_wc_status into_ro = write_pattern(reinterpret_cast<uintptr_t>(ro), ro_mr->rkey);
  const std::string protect = "target PROT_READ: " + wc_status_name(into_ro) +
                              (is_pattern(ro) ? ", the application reads the bytes" : ", the application reads OTHER bytes");

  // The target unmapped: the bytes land in the pinned pages, where an RDMA READ finds them.
  uint8_t* gone = nullptr;
  ibv_mr* gone_mr = region(b_, &gone);
  ASSERT_NE(gone_mr, nullptr);
  ASSERT_NO_FATAL_FAILURE(unmap(gone));
  const ibv_wc_status into_gone = write_pattern(reinterpret_cast<uintptr_t>(gone), gone_mr->rkey);
  const std::string unmapped = "target unmapped: " + wc_status_name(into_gone) + ", " +
                               read_back(reinterpret_cast<uintptr_t>(gone), gone_mr->rkey);

  expect_row("RC RDMA WRITE from a registered source the application then unmapped; into a registered target it "
             "made PROT_READ; into one it unmapped",
             "source unmapped: IBV_WC_SUCCESS, the target gets its bytes; target PROT_READ: IBV_WC_SUCCESS, the "
             "application reads the bytes; target unmapped: IBV_WC_SUCCESS, READ IBV_WC_SUCCESS returns the bytes "
             "written",
             source + "; " + protect + "; " + unmapped, "the pages stay pinned until ibv_dereg_mr");
  EXPECT_EQ(query_state(p_.a), IBV_QPS_RTS);
}

TEST_P(MemoryBoundary, AWriteThroughAnOldRkeyAfterTheApplicationMapsNewMemoryThereReachesTheOldPages) {
  uint8_t* p = nullptr;
  ibv_mr* mr = region(b_, &p);
  ASSERT_NE(mr, nullptr);
  ASSERT_NO_FATAL_FAILURE(unmap(p));
  ASSERT_EQ(::mmap(p, kRegionBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0), p);
  mappings_.emplace_back(p, kRegionBytes);
  const ibv_wc_status s = write_pattern(reinterpret_cast<uintptr_t>(p), mr->rkey);
  bool untouched = true;
  for (size_t i = 0; i < kRegionBytes; ++i) untouched = untouched && p[i] == 0;
  expect_row("munmap of a registered buffer, new memory mapped at its address (MAP_FIXED), then RC RDMA WRITE "
             "through the old rkey",
             "IBV_WC_SUCCESS; the new memory untouched; READ IBV_WC_SUCCESS returns the bytes written",
             wc_status_name(s) + (untouched ? "; the new memory untouched; " : "; the new memory WRITTEN; ") +
                 read_back(reinterpret_cast<uintptr_t>(p), mr->rkey),
             "the old rkey names the pages pinned at registration");
}

TEST_P(MemoryBoundary, RegisteringReadOnlyMemoryForWritingIsEfaultAndForReadingWorks) {
  uint8_t* ro = map_anonymous(kRegionBytes);
  ASSERT_NE(ro, nullptr);
  mappings_.emplace_back(ro, kRegionBytes);
  fill_pattern(std::span(ro, kMsgBytes), 21);  // A's pattern, for read_back
  ASSERT_EQ(::mprotect(ro, kRegionBytes, PROT_READ), 0);
  std::string writing;
  using Rights = std::pair<int, const char*>;
  for (const auto& [access, name] : {Rights{IBV_ACCESS_LOCAL_WRITE, "LOCAL_WRITE"},
                                     Rights{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "REMOTE_WRITE"},
                                     Rights{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC, "REMOTE_ATOMIC"}}) {
    errno = 0;
    ibv_mr* mr = ibv_reg_mr(b_.pd, ro, kRegionBytes, access);
    const int err = errno;
    writing += std::string(writing.empty() ? "" : ", ") + name + ": " + mr_or_errno(mr, err);
    if (mr != nullptr) regions_.push_back(mr);
  }
  errno = 0;
  ibv_mr* none = ibv_reg_mr(b_.pd, ro, kRegionBytes, 0);
  const std::string no_rights = mr_or_errno(none, errno);
  if (none != nullptr) regions_.push_back(none);
  ibv_mr* readable = ibv_reg_mr(b_.pd, ro, kRegionBytes, IBV_ACCESS_REMOTE_READ);
  std::string remote_read = mr_or_errno(readable, errno);
  if (readable != nullptr) {
    regions_.push_back(readable);
    remote_read += ", " + read_back(reinterpret_cast<uintptr_t>(ro), readable->rkey, "the mapping's bytes");
  }
  expect_row("ibv_reg_mr of a PROT_READ mapping with write rights; with none; with IBV_ACCESS_REMOTE_READ, then RC "
             "RDMA READ of it",
             "LOCAL_WRITE: NULL, errno EFAULT, REMOTE_WRITE: NULL, errno EFAULT, REMOTE_ATOMIC: NULL, errno EFAULT; "
             "none: an MR; REMOTE_READ: an MR, READ IBV_WC_SUCCESS returns the mapping's bytes",
             writing + "; none: " + no_rights + "; REMOTE_READ: " + remote_read,
             "the kernel pins with write access for those rights, which read-only pages refuse");
}

// Private mode has two devices; the shared runtime one, which both endpoints reach.
INSTANTIATE_TEST_SUITE_P(OnThisRuntime, MemoryBoundary,
                         ::testing::Values(std::getenv("SOFTHCA_NUM_DEVICES") != nullptr ? Topology::kTwoDevices
                                                                                          : Topology::kLoopback),
                         [](const ::testing::TestParamInfo<Topology>& param_info) {
                           return std::string(param_info.param == Topology::kTwoDevices ? "TwoDevices" : "Loopback");
                         });

}  // namespace
}  // namespace softhca::conformance
