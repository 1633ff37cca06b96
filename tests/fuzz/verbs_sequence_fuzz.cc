// libFuzzer target: bytes drive a sequence of verbs calls through the public C API on the
// in-process runtime (SOFTHCA_NUM_DEVICES=1, one device softhca_0): create and destroy PDs, MRs,
// CQs, QPs and AHs; ibv_modify_qp with random masks and attributes (and, so the data path is
// reached, the valid RESET->INIT->RTR->RTS steps to another QP of the pool); ibv_post_send and
// ibv_post_recv with random work requests; ibv_poll_cq and ibv_query_qp. Nothing may crash,
// leak or trip ASan/UBSan; every call answers 0 or an errno of the set verbs use, every
// completion has a status and opcode of the enums and a wr_id that was posted; every object is
// destroyed at the end of each input (which must succeed).
//
// The fuzzer plays a well-behaved application in one respect only: what it hands the library is
// its own memory (SGEs and inline data point into its buffer, UD WRs carry an AH it created), as
// the verbs contract requires. Keys, lengths, remote addresses, opcodes, flags and attributes are
// arbitrary: checking those is the library's and the device's job.
//
// Input: a sequence of operations, each one byte (which operation) followed by its arguments.
#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "fuzz_check.h"

namespace softhca::fuzz {
namespace {

constexpr size_t kPoolMax = 4;               // objects of each kind alive at once
constexpr size_t kBufBytes = 64 * 1024;      // the application's memory: every SGE points into it
constexpr uint32_t kMaxWrsPerPost = 4;
constexpr uint32_t kMaxSgesPerWr = 4;
constexpr size_t kMaxOpsPerInput = 64;
constexpr uint8_t kPort = 1;

ibv_context* the_context() {
  static ibv_context* ctx = [] {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    check(list != nullptr && n >= 1, "softhca_0 is listed (SOFTHCA_NUM_DEVICES=1)");
    ibv_context* c = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    check(c != nullptr, "softhca_0 opens");
    return c;
  }();
  return ctx;
}

uint8_t* the_buffer() {
  static uint8_t* buf = static_cast<uint8_t*>(std::aligned_alloc(4096, kBufBytes));
  return buf;
}

// The errnos a verbs call may answer with; anything else (or a negative value) is a bug.
bool valid_errno(int e) {
  switch (e) {
    case 0:
    case EPERM:
    case ENOENT:
    case EAGAIN:
    case ENOMEM:
    case EFAULT:
    case EBUSY:
    case EINVAL:
    case ENOSYS:
    case EOPNOTSUPP:
      return true;
    default:
      return false;
  }
}

void check_errno(int e, const char* what) { check(valid_errno(e), what); }

bool known_opcode(ibv_wc_opcode op) {
  switch (op) {
    case IBV_WC_SEND:
    case IBV_WC_RDMA_WRITE:
    case IBV_WC_RDMA_READ:
    case IBV_WC_COMP_SWAP:
    case IBV_WC_FETCH_ADD:
    case IBV_WC_BIND_MW:
    case IBV_WC_LOCAL_INV:
    case IBV_WC_RECV:
    case IBV_WC_RECV_RDMA_WITH_IMM:
      return true;
    default:
      return false;
  }
}

class Session {
 public:
  explicit Session(ByteReader& in) : in_(in), ctx_(the_context()), buf_(the_buffer()) {
    ibv_port_attr port{};
    check(ibv_query_port(ctx_, kPort, &port) == 0, "port 1 answers");
    lid_ = port.lid;
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void run() {
    for (size_t i = 0; i < kMaxOpsPerInput && !in_.empty(); ++i) step(in_.u8());
  }

  // Destroys everything, children first; each must succeed now.
  ~Session() {
    drain_cqs();
    for (ibv_qp* qp : qps_) check(ibv_destroy_qp(qp) == 0, "destroy QP at the end");
    for (ibv_ah* ah : ahs_) check(ibv_destroy_ah(ah) == 0, "destroy AH at the end");
    for (ibv_mr* mr : mrs_) check(ibv_dereg_mr(mr) == 0, "dereg MR at the end");
    for (ibv_cq* cq : cqs_) check(ibv_destroy_cq(cq) == 0, "destroy CQ at the end");
    for (ibv_pd* pd : pds_) check(ibv_dealloc_pd(pd) == 0, "dealloc PD at the end");
  }

 private:
  template <class T>
  T* pick(const std::vector<T*>& pool) {
    return pool.empty() ? nullptr : pool[in_.below(static_cast<uint32_t>(pool.size()))];
  }
  template <class T>
  static void forget(std::vector<T*>& pool, T* obj) {
    pool.erase(std::find(pool.begin(), pool.end(), obj));
  }

  void step(uint8_t op) {
    switch (op % 16) {
      case 0: return alloc_pd();
      case 1: return dealloc_pd();
      case 2: return reg_mr();
      case 3: return dereg_mr();
      case 4: return create_cq();
      case 5: return destroy_cq();
      case 6: return create_qp();
      case 7: return destroy_qp();
      case 8: return modify_qp_random();
      case 9: return connect();
      case 10: return post_send();
      case 11: return post_recv();
      case 12: return poll();
      case 13: return query_qp();
      case 14: return create_ah();
      default: return poll();
    }
  }

  void alloc_pd() {
    if (pds_.size() >= kPoolMax) return;
    ibv_pd* pd = ibv_alloc_pd(ctx_);
    check(pd != nullptr, "ibv_alloc_pd succeeds");
    pds_.push_back(pd);
  }
  void dealloc_pd() {
    ibv_pd* pd = pick(pds_);
    if (pd == nullptr) return;
    const int e = ibv_dealloc_pd(pd);
    check(e == 0 || e == EBUSY, "ibv_dealloc_pd: 0 or EBUSY");
    if (e == 0) forget(pds_, pd);
  }
  void reg_mr() {
    ibv_pd* pd = pick(pds_);
    if (pd == nullptr || mrs_.size() >= kPoolMax) return;
    const size_t offset = in_.below(kBufBytes);
    const size_t length = in_.below(static_cast<uint32_t>(kBufBytes - offset) + 1);
    const int access = static_cast<int>(in_.u32());
    errno = 0;
    ibv_mr* mr = ibv_reg_mr(pd, buf_ + offset, length, access);
    if (mr == nullptr) return check_errno(errno, "ibv_reg_mr: a verbs errno");
    mrs_.push_back(mr);
  }
  void dereg_mr() {
    ibv_mr* mr = pick(mrs_);
    if (mr == nullptr) return;
    check(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr succeeds");
    forget(mrs_, mr);
  }
  void create_cq() {
    if (cqs_.size() >= kPoolMax) return;
    static constexpr int kSizes[] = {-1, 0, 1, 2, 16, 64, 255, 1 << 30};
    const int cqe = kSizes[in_.below(8)];
    const int vector = static_cast<int>(in_.below(3)) - 1;
    errno = 0;
    ibv_cq* cq = ibv_create_cq(ctx_, cqe, nullptr, nullptr, vector);
    if (cq == nullptr) return check_errno(errno, "ibv_create_cq: a verbs errno");
    cqs_.push_back(cq);
  }
  void destroy_cq() {
    ibv_cq* cq = pick(cqs_);
    if (cq == nullptr) return;
    const int e = ibv_destroy_cq(cq);
    check(e == 0 || e == EBUSY, "ibv_destroy_cq: 0 or EBUSY");
    if (e == 0) forget(cqs_, cq);
  }
  void create_qp() {
    ibv_pd* pd = pick(pds_);
    ibv_cq* scq = pick(cqs_);
    ibv_cq* rcq = pick(cqs_);
    if (pd == nullptr || scq == nullptr || rcq == nullptr || qps_.size() >= kPoolMax) return;
    static constexpr ibv_qp_type kTypes[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET};
    ibv_qp_init_attr ia{};
    ia.send_cq = scq;
    ia.recv_cq = rcq;
    ia.qp_type = kTypes[in_.below(4)];
    ia.sq_sig_all = in_.flag() ? 1 : 0;
    ia.cap.max_send_wr = in_.below(130);
    ia.cap.max_recv_wr = in_.below(130);
    ia.cap.max_send_sge = in_.below(2 * kMaxSgesPerWr);
    ia.cap.max_recv_sge = in_.below(2 * kMaxSgesPerWr);
    ia.cap.max_inline_data = in_.below(600);
    errno = 0;
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    if (qp == nullptr) return check_errno(errno, "ibv_create_qp: a verbs errno");
    qps_.push_back(qp);
  }
  void destroy_qp() {
    ibv_qp* qp = pick(qps_);
    if (qp == nullptr) return;
    check(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp succeeds");
    forget(qps_, qp);
  }

  uint32_t some_qpn() {
    ibv_qp* other = pick(qps_);
    return in_.flag() || other == nullptr ? in_.u32() & 0xffffff : other->qp_num;
  }

  void modify_qp_random() {
    ibv_qp* qp = pick(qps_);
    if (qp == nullptr) return;
    ibv_qp_attr a{};
    a.qp_state = static_cast<ibv_qp_state>(in_.below(8));
    a.cur_qp_state = static_cast<ibv_qp_state>(in_.below(8));
    a.path_mtu = static_cast<ibv_mtu>(in_.below(7));
    a.qkey = in_.u32();
    a.rq_psn = in_.u32();
    a.sq_psn = in_.u32();
    a.dest_qp_num = some_qpn();
    a.qp_access_flags = in_.u32();
    a.ah_attr.dlid = in_.flag() ? lid_ : in_.u16();
    a.ah_attr.port_num = in_.flag() ? kPort : in_.u8();
    a.ah_attr.is_global = in_.u8() & 1;
    a.ah_attr.grh.sgid_index = in_.u8();
    a.ah_attr.sl = in_.u8();
    a.pkey_index = in_.flag() ? 0 : in_.u16();
    a.port_num = in_.flag() ? kPort : in_.u8();
    a.max_rd_atomic = in_.u8();
    a.max_dest_rd_atomic = in_.u8();
    a.min_rnr_timer = in_.u8();
    a.timeout = in_.u8();
    a.retry_cnt = in_.u8();
    a.rnr_retry = in_.u8();
    const int mask = static_cast<int>(in_.u32() & ((IBV_QP_RATE_LIMIT << 1) - 1));
    check_errno(ibv_modify_qp(qp, &a, mask), "ibv_modify_qp: 0 or a verbs errno");
  }

  // The valid steps to RTS, connected to a QP of the pool (possibly itself), with fuzzed PSNs,
  // MTU and rights, so that posts reach the device's data path.
  void connect() {
    ibv_qp* qp = pick(qps_);
    if (qp == nullptr) return;
    const uint32_t dest = some_qpn();
    const uint32_t psn = in_.u32() & 0xffffff;
    const unsigned int access = in_.u8() & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    const auto mtu = static_cast<ibv_mtu>(1 + in_.below(5));
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = kPort;
    a.qkey = 0x11111111;
    a.qp_access_flags = access;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
               (qp->qp_type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
    check_errno(ibv_modify_qp(qp, &a, mask), "connect INIT: 0 or a verbs errno");
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = dest;
    a.rq_psn = psn;
    a.ah_attr.dlid = lid_;
    a.ah_attr.port_num = kPort;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    mask = IBV_QP_STATE;
    if (qp->qp_type != IBV_QPT_UD) mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (qp->qp_type == IBV_QPT_RC) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    check_errno(ibv_modify_qp(qp, &a, mask), "connect RTR: 0 or a verbs errno");
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = psn;
    a.timeout = 1;  // 8 us: a lost request fails fast
    a.retry_cnt = 1;
    a.rnr_retry = 1;
    a.max_rd_atomic = 4;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (qp->qp_type == IBV_QPT_RC)
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    check_errno(ibv_modify_qp(qp, &a, mask), "connect RTS: 0 or a verbs errno");
  }

  // An SGE in the application's buffer, with a key of the pool (or any key) and any length that
  // stays inside the buffer.
  ibv_sge some_sge() {
    const uint32_t offset = in_.below(kBufBytes);
    ibv_mr* mr = pick(mrs_);
    ibv_sge s{};
    s.addr = reinterpret_cast<uintptr_t>(buf_ + offset);
    s.length = in_.below(static_cast<uint32_t>(kBufBytes - offset) + 1);
    s.lkey = mr != nullptr && !in_.flag() ? mr->lkey : in_.u32();
    return s;
  }

  ibv_ah* some_ah() {
    if (ahs_.empty()) create_ah();
    return ahs_.empty() ? nullptr : ahs_[in_.below(static_cast<uint32_t>(ahs_.size()))];
  }

  void create_ah() {
    ibv_pd* pd = pick(pds_);
    if (pd == nullptr || ahs_.size() >= kPoolMax) return;
    ibv_ah_attr attr{};
    attr.dlid = in_.flag() ? lid_ : in_.u16();
    attr.port_num = in_.flag() ? kPort : in_.u8();
    attr.sl = in_.u8() & 0xf;
    errno = 0;
    ibv_ah* ah = ibv_create_ah(pd, &attr);
    if (ah == nullptr) return check_errno(errno, "ibv_create_ah: a verbs errno");
    ahs_.push_back(ah);
  }

  void post_send() {
    ibv_qp* qp = pick(qps_);
    if (qp == nullptr) return;
    const bool ud = qp->qp_type == IBV_QPT_UD;
    ibv_ah* ah = ud ? some_ah() : nullptr;
    if (ud && ah == nullptr) return;  // a UD WR must name an AH the application owns
    const uint32_t nwr = 1 + in_.below(kMaxWrsPerPost);
    std::array<ibv_send_wr, kMaxWrsPerPost> wrs{};
    std::array<std::array<ibv_sge, kMaxSgesPerWr>, kMaxWrsPerPost> sges{};
    for (uint32_t i = 0; i < nwr; ++i) {
      ibv_send_wr& wr = wrs[i];
      wr.wr_id = next_wr_id_++;
      wr.opcode = static_cast<ibv_wr_opcode>(in_.below(12));
      wr.send_flags = in_.u8() & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE);
      wr.num_sge = static_cast<int>(in_.below(kMaxSgesPerWr + 1));
      for (int s = 0; s < wr.num_sge; ++s) sges[i][s] = some_sge();
      wr.sg_list = sges[i].data();
      wr.imm_data = in_.u32();
      ibv_mr* target = pick(mrs_);
      const uint64_t raddr = in_.flag() ? in_.u64() : reinterpret_cast<uintptr_t>(buf_ + in_.below(kBufBytes));
      const uint32_t rkey = target != nullptr && !in_.flag() ? target->rkey : in_.u32();
      if (ud) {
        wr.wr.ud.ah = ah;
        wr.wr.ud.remote_qpn = some_qpn();
        wr.wr.ud.remote_qkey = in_.flag() ? 0x11111111 : in_.u32();
      } else if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        wr.wr.atomic.remote_addr = raddr;
        wr.wr.atomic.rkey = rkey;
        wr.wr.atomic.compare_add = in_.u64();
        wr.wr.atomic.swap = in_.u64();
      } else {
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = rkey;
      }
      if (i > 0) wrs[i - 1].next = &wr;
    }
    ibv_send_wr* bad = nullptr;
    const int e = ibv_post_send(qp, wrs.data(), &bad);
    check_errno(e, "ibv_post_send: 0 or a verbs errno");
    check((e == 0) == (bad == nullptr), "ibv_post_send: bad_wr set exactly on error");
    for (uint32_t i = 0; i < nwr && &wrs[i] != bad; ++i) posted_.insert(wrs[i].wr_id);
  }

  void post_recv() {
    ibv_qp* qp = pick(qps_);
    if (qp == nullptr) return;
    const uint32_t nwr = 1 + in_.below(kMaxWrsPerPost);
    std::array<ibv_recv_wr, kMaxWrsPerPost> wrs{};
    std::array<std::array<ibv_sge, kMaxSgesPerWr>, kMaxWrsPerPost> sges{};
    for (uint32_t i = 0; i < nwr; ++i) {
      ibv_recv_wr& wr = wrs[i];
      wr.wr_id = next_wr_id_++;
      wr.num_sge = static_cast<int>(in_.below(kMaxSgesPerWr + 1));
      for (int s = 0; s < wr.num_sge; ++s) sges[i][s] = some_sge();
      wr.sg_list = sges[i].data();
      if (i > 0) wrs[i - 1].next = &wr;
    }
    ibv_recv_wr* bad = nullptr;
    const int e = ibv_post_recv(qp, wrs.data(), &bad);
    check_errno(e, "ibv_post_recv: 0 or a verbs errno");
    check((e == 0) == (bad == nullptr), "ibv_post_recv: bad_wr set exactly on error");
    for (uint32_t i = 0; i < nwr && &wrs[i] != bad; ++i) posted_.insert(wrs[i].wr_id);
  }

  void poll_one_cq(ibv_cq* cq, int n) {
    std::array<ibv_wc, 16> wc{};
    const int got = ibv_poll_cq(cq, n, wc.data());
    check(got >= 0 && got <= n, "ibv_poll_cq returns 0..n");
    for (int i = 0; i < got; ++i) {
      check(wc[i].status <= IBV_WC_TM_RNDV_INCOMPLETE, "a completion status of the enum");
      check(wc[i].status != IBV_WC_SUCCESS || known_opcode(wc[i].opcode),
            "a successful completion has an opcode of the enum");
      check(posted_.count(wc[i].wr_id) == 1, "a completion is for a WR that was posted");
    }
  }
  void poll() {
    ibv_cq* cq = pick(cqs_);
    if (cq != nullptr) poll_one_cq(cq, 1 + static_cast<int>(in_.below(16)));
  }
  void drain_cqs() {
    for (ibv_cq* cq : cqs_) poll_one_cq(cq, 16);
  }

  void query_qp() {
    ibv_qp* qp = pick(qps_);
    if (qp == nullptr) return;
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    const int e = ibv_query_qp(qp, &attr, static_cast<int>(in_.u32()), &init);
    check_errno(e, "ibv_query_qp: 0 or a verbs errno");
    if (e == 0) check(attr.qp_state <= IBV_QPS_UNKNOWN, "a QP state of the enum");
  }

  ByteReader& in_;
  ibv_context* ctx_;
  uint8_t* buf_;
  uint16_t lid_ = 0;
  uint64_t next_wr_id_ = 1;
  std::set<uint64_t> posted_;
  std::vector<ibv_pd*> pds_;
  std::vector<ibv_mr*> mrs_;
  std::vector<ibv_cq*> cqs_;
  std::vector<ibv_qp*> qps_;
  std::vector<ibv_ah*> ahs_;
};

}  // namespace
}  // namespace softhca::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The private in-process runtime with one device: nothing shared with other processes.
  setenv("SOFTHCA_NUM_DEVICES", "1", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  softhca::fuzz::ByteReader in(std::span<const uint8_t>(data, size));
  softhca::fuzz::Session session(in);
  session.run();
  return 0;
}
