// A GoogleTest fixture for conformance tests that use only the public C API of the system
// <infiniband/verbs.h>: two endpoints (softhca_0 and softhca_1, or both on softhca_0 for loopback),
// each with a PD, a CQ and one registered buffer, plus helpers that create QPs, connect them with
// ibv_modify_qp (LIDs from ibv_query_port), post, and poll with a deadline so that no test hangs.
// Leaves out: anything that is not in the C API (no softhca header is included). Sizes in bytes.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace softhca::conformance {

// Longest wait for a completion or an event before the test fails. Generous: the device completes
// same-process traffic before ibv_post_send returns, but RNR and ACK timers run on a thread.
inline constexpr std::chrono::seconds kDeadline{5};
inline constexpr uint8_t kPort = 1;
// A UD receive buffer starts with 40 bytes for the GRH, written only when a GRH is present
// (IBA 11.4.1.2; ibv_post_recv(3)).
inline constexpr size_t kGrhBytes = 40;
inline constexpr uint32_t kQkey = 0x11111111;
// First PSNs close to the 24-bit wrap, so that long messages cross it (IBA 9.7.1: PSNs are 24 bits).
inline constexpr uint32_t kPsnA = 0xfffff0;
inline constexpr uint32_t kPsnB = 0xffff00;
inline constexpr unsigned int kAllAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
inline constexpr size_t kMiB = size_t{1} << 20;

enum class Topology { kTwoDevices, kLoopback };

// One side of a connection. Every member is owned by the fixture.
struct Endpoint {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;  // send and receive CQ of the QPs created on this side
  ibv_mr* mr = nullptr;  // the whole buffer, kAllAccess
  uint8_t* buf = nullptr;
  size_t size = 0;
  uint16_t lid = 0;

  [[nodiscard]] uint64_t addr(size_t offset) const { return reinterpret_cast<uintptr_t>(buf + offset); }
  [[nodiscard]] ibv_sge sge(size_t offset, uint32_t length) const {
    return ibv_sge{addr(offset), length, mr->lkey};
  }
  [[nodiscard]] std::span<uint8_t> bytes() const { return {buf, size}; }
};

// How to create and connect a QP pair. The defaults make a working pair.
struct QpOptions {
  ibv_mtu path_mtu = IBV_MTU_1024;
  unsigned int access = kAllAccess;  // qp_access_flags (responder rights) of both QPs
  uint32_t max_send_wr = 64;
  uint32_t max_recv_wr = 64;
  uint32_t max_send_sge = 3;
  uint32_t max_recv_sge = 2;
  uint32_t max_inline_data = 0;
  int sq_sig_all = 1;
  uint8_t min_rnr_timer = 1;  // 0.01 ms (IBA table 45)
  uint8_t rnr_retry = 7;      // 7: retry for ever
  uint8_t timeout = 14;       // 4.096 us * 2^14 = 67 ms
  uint8_t retry_cnt = 7;
  uint8_t max_rd_atomic = 4;
  uint32_t qkey = kQkey;
  uint64_t send_ops_flags = 0;  // != 0: created with ibv_create_qp_ex for the ibv_wr_* interface
  ibv_srq* srq_b = nullptr;     // B's QP receives through this SRQ
  ibv_cq* recv_cq_b = nullptr;  // B's receive CQ instead of b.cq
  // B's QP is connected to A's QPN plus this (0: to A's QP). A's QP always targets B's QP.
  uint32_t dest_qpn_skew_b = 0;
  uint32_t dest_qpn_skew_a = 0;
};

struct QpPair {
  ibv_qp_type type = IBV_QPT_RC;
  ibv_qp* a = nullptr;
  ibv_qp* b = nullptr;
  ibv_ah* ah_to_b = nullptr;  // UD: on A's PD, addressing B's port
  ibv_ah* ah_to_a = nullptr;  // UD: on B's PD, addressing A's port
  uint32_t qkey = kQkey;
};

// The attributes and mask of the step into `to` (IBV_QPS_INIT, _RTR or _RTS) for a QP of `type`:
// exactly what the IB specification requires for that transition (IBA 10.3.1, as in the kernel's
// qp_state_table). dest_qpn, dlid and psn (rq_psn into RTR, sq_psn into RTS) are used where needed.
int step_attr(ibv_qp_type type, ibv_qp_state to, const QpOptions& o, uint32_t dest_qpn, uint16_t dlid, uint32_t psn,
              ibv_qp_attr* attr);
// The steps themselves. 0 or the errno ibv_modify_qp returned.
int modify_to_init(ibv_qp* qp, const QpOptions& o);
int modify_to_rtr(ibv_qp* qp, uint32_t dest_qpn, uint16_t dlid, uint32_t rq_psn, const QpOptions& o);
int modify_to_rts(ibv_qp* qp, uint32_t sq_psn, const QpOptions& o);
// The QP's state as ibv_query_qp reports it (IBV_QPS_UNKNOWN if the query fails).
ibv_qp_state query_state(ibv_qp* qp);

// Polls cq until n completions arrived (appended to out) or kDeadline passed.
::testing::AssertionResult poll_completions(ibv_cq* cq, size_t n, std::vector<ibv_wc>& out);
// One completion, or a failure (the returned wc then has status IBV_WC_GENERAL_ERR and wr_id ~0).
ibv_wc poll_one(ibv_cq* cq);
// True when ibv_poll_cq finds nothing right now (the device completes in-process traffic before
// ibv_post_send returns, so "nothing now" is "nothing at all" for what was already posted).
::testing::AssertionResult cq_is_empty(ibv_cq* cq);
// Waits for a completion event: poll() on the (non-blocking) channel fd with the deadline, then
// ibv_get_cq_event. Never blocks past kDeadline.
::testing::AssertionResult wait_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context);

// Deterministic bytes from a seeded generator (std::mt19937_64 is the same on every platform).
void fill_pattern(std::span<uint8_t> bytes, uint64_t seed);
// Equal bytes, or a failure naming the first differing offset and how many bytes differ.
::testing::AssertionResult same_bytes(std::span<const uint8_t> actual, std::span<const uint8_t> expected);

// Splits [offset, offset + length) into `parts` SGEs of near-equal lengths with `gap` bytes
// between them (the gaps must stay untouched). The last part takes the remainder.
std::vector<ibv_sge> split_sges(const Endpoint& e, size_t offset, uint32_t length, uint32_t parts, uint32_t gap);
// The bytes the SGEs name in `image` (an image of e's buffer), concatenated.
std::vector<uint8_t> gather(const Endpoint& e, std::span<const uint8_t> image, std::span<const ibv_sge> sges);
// Writes data into `image` (an image of e's buffer) where the SGEs name, starting `skip` bytes
// into the scatter list (UD receives skip the GRH slot).
void scatter(const Endpoint& e, std::span<uint8_t> image, std::span<const ibv_sge> sges, std::span<const uint8_t> data,
             size_t skip = 0);

// Symbolic names for the table and for failure messages.
std::string wc_status_name(ibv_wc_status status);
std::string wc_opcode_name(ibv_wc_opcode opcode);
std::string qp_state_name(ibv_qp_state state);
std::string errno_name(int err);

class VerbsPair : public ::testing::Test {
 protected:
  static constexpr size_t kDefaultBufferBytes = 4 * kMiB;

  void TearDown() override;

  // Opens both endpoints (fatal failure when a device is missing: SOFTHCA_NUM_DEVICES must be 2).
  void open(Topology topology, size_t buffer_bytes = kDefaultBufferBytes);
  // Creates a QP on e (send CQ = recv CQ = e.cq unless told otherwise). nullptr with errno on error;
  // caps, when given, receives the capabilities the QP reports.
  ibv_qp* create_qp(Endpoint& e, ibv_qp_type type, const QpOptions& o, ibv_srq* srq = nullptr,
                    ibv_cq* recv_cq = nullptr, ibv_qp_cap* caps = nullptr);
  // Creates a QP on A and one on B and takes both to RTS, connected to each other.
  void connect(ibv_qp_type type, const QpOptions& o, QpPair* out);
  // Extra objects the fixture destroys in TearDown.
  ibv_mr* reg_mr(Endpoint& e, size_t offset, size_t length, unsigned int access);
  ibv_cq* create_cq(Endpoint& e, int cqe, ibv_comp_channel* channel = nullptr, void* cq_context = nullptr);
  ibv_srq* create_srq(Endpoint& e, uint32_t max_wr, uint32_t max_sge);
  ibv_comp_channel* create_channel(Endpoint& e);
  ibv_ah* create_ah(Endpoint& e, uint16_t dlid);
  // A CQ the test made itself (ibv_create_cq_ex), destroyed with the extra CQs.
  void adopt_cq(ibv_cq* cq) { extra_cqs_.push_back(cq); }

  // Posts one receive; 0 or the errno of ibv_post_recv.
  static int post_recv(ibv_qp* qp, uint64_t wr_id, std::span<ibv_sge> sges);
  static int post_srq_recv(ibv_srq* srq, uint64_t wr_id, std::span<ibv_sge> sges);
  // Posts one send WR with the given SGEs; remote/rkey are for RDMA and atomics, ah for UD.
  struct SendArgs {
    ibv_wr_opcode opcode = IBV_WR_SEND;
    uint64_t wr_id = 0;
    unsigned int flags = IBV_SEND_SIGNALED;
    uint64_t remote_addr = 0;
    uint32_t rkey = 0;
    uint32_t imm_host = 0;  // sent as htobe32(imm_host)
    uint64_t compare_add = 0;
    uint64_t swap = 0;
    ibv_ah* ah = nullptr;
    uint32_t remote_qpn = 0;
    uint32_t remote_qkey = kQkey;
  };
  static ibv_send_wr make_wr(const SendArgs& args, std::span<ibv_sge> sges);
  static int post_send(ibv_qp* qp, const SendArgs& args, std::span<ibv_sge> sges);

  Endpoint a_;
  Endpoint b_;

 private:
  void open_endpoint(Endpoint& e, ibv_context* ctx, size_t buffer_bytes);

  std::vector<ibv_context*> contexts_;
  std::vector<ibv_qp*> qps_;
  std::vector<ibv_ah*> ahs_;
  std::vector<ibv_srq*> srqs_;
  std::vector<ibv_mr*> mrs_;
  std::vector<ibv_cq*> extra_cqs_;  // destroyed before the endpoints' CQs and the channels
  std::vector<ibv_cq*> cqs_;
  std::vector<ibv_comp_channel*> channels_;
  std::vector<ibv_pd*> pds_;
  std::vector<uint8_t*> buffers_;
};

}  // namespace softhca::conformance
