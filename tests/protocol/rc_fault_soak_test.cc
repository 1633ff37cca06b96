// RC under faults, in one process (docs/reliability.md, "The soak tests"): two devices on the
// in-process carrier whose links lose, duplicate, reorder, corrupt and delay packets
// (SOFTHCA_FAULTS), four RC QP pairs, thousands of mixed operations (SEND, WRITE, WRITE with
// immediate, READ, compare-and-swap, fetch-and-add) of 1 byte to 3 MTUs. Expect: every byte where
// its operation put it, exactly once and in order; every completion once, in order, successful;
// each fetch-and-add answered with the sum of the adds before it (an atomic executed twice would
// break that); and the counters showing the retransmissions that made it so.
// Uses the conformance fixture (public verbs API) plus the runtime's stats dump for the counters.
#include <endian.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/runtime.h"
#include "verbs_pair.h"

namespace softhca::conformance {
namespace {

// The mix (loss 1%, duplicates 0.5%, reorder 1%, corruption 0.1%) plus a small delay.
constexpr const char* kFaults = "loss=0.01,dup=0.005,reorder=0.01,corrupt=0.001,delay=5us,seed=7";
constexpr uint32_t kQps = 4;
#if defined(__SANITIZE_ADDRESS__)
constexpr uint32_t kOpsPerQp = 1000;  // the instrumented data path is 10-50x slower
#else
constexpr uint32_t kOpsPerQp = 1500;
#endif
constexpr uint32_t kDepth = 32;       // send WRs in flight per QP
constexpr uint32_t kMtu = 1024;
constexpr uint32_t kMaxLen = 3 * kMtu;
// Per QP, a 1 MiB region of each buffer.
constexpr size_t kRegion = kMiB;
constexpr size_t kWriteArea = 256 * 1024;          // B: WRITE targets; A: source pattern
constexpr size_t kReadSrc = 256 * 1024;            // B: READ sources (never written)
constexpr size_t kSlots = 512 * 1024;              // A: READ landing slots; B: receive slots
constexpr size_t kSlotBytes = 4096;
constexpr size_t kAtomics = 900 * 1024;            // B: the counter and the CAS word; A: results
constexpr std::chrono::seconds kSoakDeadline{50};  // the whole soak; it takes ~1 s in release

enum class Op : uint8_t { kSend, kWrite, kWriteImm, kRead, kCas, kFetchAdd, kCount };

struct Expected {  // one posted send WR
  Op op;
  uint32_t len = 0;
  size_t src = 0;       // A offset of the bytes sent / B offset read
  uint64_t orig = 0;    // atomics: the value the responder must return
};
struct ExpectedRecv {
  bool imm = false;
  uint32_t len = 0;
  size_t src = 0;       // A offset of a SEND's bytes
  uint32_t imm_value = 0;
};

struct QpState {
  QpPair pair;
  uint32_t posted = 0;
  uint32_t completed = 0;
  std::deque<Expected> inflight;
  std::deque<ExpectedRecv> recvs;
  std::vector<uint8_t> write_image;  // what B's WRITE area must hold
  uint64_t counter = 0;              // B's fetch-and-add word
  uint64_t cas_word = 0;             // B's compare-and-swap word
  uint64_t adds = 0;
  uint32_t recv_completed = 0;
};

class RcFaultSoak : public VerbsPair {
 protected:
  void SetUp() override {
    // Read once, when the first device is opened (Runtime::process()): set before open().
    // SOFTHCA_SOAK_FAULTS, when set, replaces the mix (to explore others by hand).
    const char* other = std::getenv("SOFTHCA_SOAK_FAULTS");
    ::setenv("SOFTHCA_FAULTS", other != nullptr ? other : kFaults, 1);
  }
  size_t a_off(uint32_t q, size_t off) const { return q * kRegion + off; }

  void post_recv_slot(QpState& s, uint32_t q, uint32_t slot) {
    ibv_sge sge = b_.sge(q * kRegion + kSlots + slot * kSlotBytes, kSlotBytes);
    ASSERT_EQ(post_recv(s.pair.b, slot, std::span(&sge, 1)), 0);
  }

  void post_one(QpState& s, uint32_t q, std::mt19937_64& rng) {
    const auto op = static_cast<Op>(rng() % static_cast<uint32_t>(Op::kCount));
    const uint32_t len = 1 + static_cast<uint32_t>(rng() % kMaxLen);
    const uint32_t slot = s.posted % kDepth;
    SendArgs args;
    args.wr_id = (uint64_t{q} << 32) | s.posted;
    Expected e{op, len, 0, 0};
    ibv_sge sge{};
    const size_t base = q * kRegion;
    switch (op) {
      case Op::kSend:
      case Op::kWrite:
      case Op::kWriteImm: {
        e.src = base + rng() % (kWriteArea - len);
        sge = a_.sge(e.src, len);
        if (op == Op::kSend) {
          args.opcode = IBV_WR_SEND;
          s.recvs.push_back({false, len, e.src, 0});
          break;
        }
        const size_t dst = rng() % (kWriteArea - len);
        args.opcode = op == Op::kWrite ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
        args.remote_addr = b_.addr(base + dst);
        args.rkey = b_.mr->rkey;
        args.imm_host = s.posted;
        std::memcpy(s.write_image.data() + dst, a_.buf + e.src, len);
        if (op == Op::kWriteImm) s.recvs.push_back({true, len, 0, s.posted});
        break;
      }
      case Op::kRead:
        e.src = base + kReadSrc + rng() % (kReadSrc - len);
        sge = a_.sge(base + kSlots + slot * kSlotBytes, len);
        args.opcode = IBV_WR_RDMA_READ;
        args.remote_addr = b_.addr(e.src);
        args.rkey = b_.mr->rkey;
        break;
      case Op::kCas: {
        e.len = 8;
        sge = a_.sge(base + kAtomics + slot * 8, 8);
        args.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
        args.remote_addr = b_.addr(base + kAtomics + 8);
        args.rkey = b_.mr->rkey;
        const bool hit = (rng() & 1) != 0;
        args.compare_add = hit ? s.cas_word : s.cas_word + 1;
        args.swap = rng();
        e.orig = s.cas_word;
        if (hit) s.cas_word = args.swap;
        break;
      }
      case Op::kFetchAdd:
      case Op::kCount: {
        e.op = Op::kFetchAdd;
        e.len = 8;
        sge = a_.sge(base + kAtomics + slot * 8, 8);
        args.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
        args.remote_addr = b_.addr(base + kAtomics);
        args.rkey = b_.mr->rkey;
        args.compare_add = 1 + rng() % 1000;
        e.orig = s.counter;
        s.counter += args.compare_add;
        s.adds += args.compare_add;
        break;
      }
    }
    ASSERT_EQ(post_send(s.pair.a, args, std::span(&sge, 1)), 0);
    s.inflight.push_back(e);
    ++s.posted;
  }

  // A send completion: the oldest WR of its QP, successful, with its data where it belongs.
  void check_send(std::array<QpState, kQps>& qps, const ibv_wc& wc) {
    const auto q = static_cast<uint32_t>(wc.wr_id >> 32);
    ASSERT_LT(q, kQps);
    QpState& s = qps[q];
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "QP " << q << " WR " << (wc.wr_id & 0xffffffff) << ": "
                                         << wc_status_name(wc.status);
    ASSERT_EQ(static_cast<uint32_t>(wc.wr_id), s.completed) << "completions out of order or lost on QP " << q;
    ASSERT_FALSE(s.inflight.empty());
    const Expected e = s.inflight.front();
    s.inflight.pop_front();
    const uint32_t slot = s.completed % kDepth;
    const size_t base = q * kRegion;
    if (e.op == Op::kRead) {
      ASSERT_EQ(std::memcmp(a_.buf + base + kSlots + slot * kSlotBytes, b_.buf + e.src, e.len), 0)
          << "READ " << s.completed << " of QP " << q;
    } else if (e.op == Op::kCas || e.op == Op::kFetchAdd) {
      uint64_t got = 0;
      std::memcpy(&got, a_.buf + base + kAtomics + slot * 8, 8);
      ASSERT_EQ(got, e.orig) << (e.op == Op::kCas ? "CAS " : "FETCH_ADD ") << s.completed << " of QP " << q;
    }
    ++s.completed;
  }

  void check_recv(std::array<QpState, kQps>& qps, const ibv_wc& wc) {
    uint32_t q = kQps;
    for (uint32_t i = 0; i < kQps; ++i) {
      if (qps[i].pair.b->qp_num == wc.qp_num) q = i;
    }
    ASSERT_LT(q, kQps);
    QpState& s = qps[q];
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "receive on QP " << q << ": " << wc_status_name(wc.status);
    ASSERT_FALSE(s.recvs.empty()) << "a receive completion nobody sent, QP " << q;
    const ExpectedRecv r = s.recvs.front();
    s.recvs.pop_front();
    ASSERT_EQ(wc.byte_len, r.len);
    if (r.imm) {
      ASSERT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
      ASSERT_EQ(be32toh(wc.imm_data), r.imm_value);
    } else {
      ASSERT_EQ(wc.opcode, IBV_WC_RECV);
      const size_t at = q * kRegion + kSlots + wc.wr_id * kSlotBytes;
      ASSERT_EQ(std::memcmp(b_.buf + at, a_.buf + r.src, r.len), 0) << "SEND data, QP " << q;
    }
    ++s.recv_completed;
    ASSERT_NO_FATAL_FAILURE(post_recv_slot(s, q, static_cast<uint32_t>(wc.wr_id)));
  }
};

uint64_t fnv1a(std::span<const uint8_t> bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ULL;
  return h;
}

TEST_F(RcFaultSoak, EveryByteAndCompletionArrivesExactlyOnceThroughLossDuplicatesReorderAndCorruption) {
  ASSERT_NO_FATAL_FAILURE(open(Topology::kTwoDevices, kQps * kRegion));
  fill_pattern(a_.bytes(), 1);
  fill_pattern(b_.bytes(), 2);
  QpOptions o;
  o.max_send_wr = kDepth;
  o.max_recv_wr = kDepth;
  o.timeout = 8;  // 4.096 us * 2^8 = 1 ms: a lost tail packet costs a millisecond, not 67
  o.retry_cnt = 7;
  o.max_rd_atomic = 4;
  std::array<QpState, kQps> qps;
  for (uint32_t q = 0; q < kQps; ++q) {
    QpState& s = qps[q];
    ASSERT_NO_FATAL_FAILURE(connect(IBV_QPT_RC, o, &s.pair));
    s.write_image.assign(b_.buf + q * kRegion, b_.buf + q * kRegion + kWriteArea);
    std::memset(b_.buf + q * kRegion + kAtomics, 0, 16);
    for (uint32_t slot = 0; slot < kDepth; ++slot) ASSERT_NO_FATAL_FAILURE(post_recv_slot(s, q, slot));
  }
  std::mt19937_64 rng(7);
  const auto deadline = std::chrono::steady_clock::now() + kSoakDeadline;
  std::array<ibv_wc, 32> wcs;
  for (;;) {
    bool done = true;
    for (uint32_t q = 0; q < kQps; ++q) {
      QpState& s = qps[q];
      while (s.posted < kOpsPerQp && s.posted - s.completed < kDepth) ASSERT_NO_FATAL_FAILURE(post_one(s, q, rng));
      done = done && s.completed == kOpsPerQp && s.recvs.empty();
    }
    if (done) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (uint32_t q = 0; q < kQps; ++q) {
        ADD_FAILURE() << "QP " << q << ": posted " << qps[q].posted << ", completed " << qps[q].completed
                      << ", receives awaited " << qps[q].recvs.size();
      }
      runtime::Runtime::process().dump_stats("/dev/stdout");
      FAIL() << "the soak did not finish in time";
    }
    const int na = ibv_poll_cq(a_.cq, static_cast<int>(wcs.size()), wcs.data());
    ASSERT_GE(na, 0);
    for (int i = 0; i < na; ++i) {
      check_send(qps, wcs[i]);
      if (HasFatalFailure()) {
        runtime::Runtime::process().dump_stats("/dev/stdout");  // the counters, to tell why
        return;
      }
    }
    const int nb = ibv_poll_cq(b_.cq, static_cast<int>(wcs.size()), wcs.data());
    ASSERT_GE(nb, 0);
    for (int i = 0; i < nb; ++i) ASSERT_NO_FATAL_FAILURE(check_recv(qps, wcs[i]));
    if (na == 0 && nb == 0) ::usleep(50);  // waiting for a retransmission timer
  }
  // Nothing more arrives: no completion was duplicated.
  EXPECT_TRUE(cq_is_empty(a_.cq));
  EXPECT_TRUE(cq_is_empty(b_.cq));
  for (uint32_t q = 0; q < kQps; ++q) {
    const QpState& s = qps[q];
    const std::span<const uint8_t> area(b_.buf + q * kRegion, kWriteArea);
    EXPECT_EQ(fnv1a(area), fnv1a(s.write_image)) << "WRITE area checksum, QP " << q;
    EXPECT_TRUE(same_bytes(area, s.write_image));
    uint64_t counter = 0;
    uint64_t cas = 0;
    std::memcpy(&counter, b_.buf + q * kRegion + kAtomics, 8);
    std::memcpy(&cas, b_.buf + q * kRegion + kAtomics + 8, 8);
    EXPECT_EQ(counter, s.adds) << "the fetch-and-add counter is the sum of the adds, QP " << q;
    EXPECT_EQ(cas, s.cas_word);
    // The READ sources were never written.
    std::vector<uint8_t> pattern(b_.size);
    fill_pattern(pattern, 2);
    EXPECT_EQ(std::memcmp(b_.buf + q * kRegion + kReadSrc, pattern.data() + q * kRegion + kReadSrc, kReadSrc), 0);
  }

  // The counters: faults happened and were recovered from by retransmission.
  char path[] = "/tmp/softhca-soak-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  runtime::Runtime::process().dump_stats(path);
  nlohmann::json stats;
  std::ifstream(path) >> stats;
  ::unlink(path);
  uint64_t retransmitted = 0, lost = 0, corrupted = 0, duplicated = 0, reordered = 0, malformed = 0, duplicates = 0;
  for (const auto& d : stats["devices"]) {
    retransmitted += d["packets"]["retransmitted"].get<uint64_t>();
    duplicates += d["packets"]["duplicates"].get<uint64_t>();
    malformed += d["packets"]["dropped"]["malformed"].get<uint64_t>();
    ASSERT_TRUE(d.contains("faults")) << d.dump();
    lost += d["faults"]["lost"].get<uint64_t>();
    corrupted += d["faults"]["corrupted"].get<uint64_t>();
    duplicated += d["faults"]["duplicated"].get<uint64_t>();
    reordered += d["faults"]["reordered"].get<uint64_t>();
  }
  std::printf("soak: %u ops on %u QPs; faults: %llu lost, %llu corrupted, %llu duplicated, %llu reordered; "
              "%llu retransmitted, %llu duplicates seen, %llu malformed dropped\n",
              kQps * kOpsPerQp, kQps, static_cast<unsigned long long>(lost), static_cast<unsigned long long>(corrupted),
              static_cast<unsigned long long>(duplicated), static_cast<unsigned long long>(reordered),
              static_cast<unsigned long long>(retransmitted), static_cast<unsigned long long>(duplicates),
              static_cast<unsigned long long>(malformed));
  EXPECT_GT(lost, 0u);
  EXPECT_GT(duplicated, 0u);
  EXPECT_GT(reordered, 0u);
  EXPECT_GT(retransmitted, 0u);
  EXPECT_GT(duplicates, 0u);
  EXPECT_EQ(malformed, corrupted);  // every corrupted packet, and nothing else, failed its ICRC
}

}  // namespace
}  // namespace softhca::conformance
