// One host's verbs objects for a timing-model workload: a context on its sim device, a PD, one
// registered buffer, and per QP a CQ and a QP of the workload's transport (RC, UC or UD; UD with
// an address handle to the peer, with a GRH). Control path only: posting is the generators' job.
#pragma once
#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace softhca::tools {

enum class Transport : uint8_t;

struct HostSideConfig {
  Transport transport{};
  uint32_t qps = 1;
  uint32_t send_depth = 1;        // max_send_wr (and the CQ's depth, with recv_depth)
  uint32_t recv_depth = 1;        // max_recv_wr
  uint32_t max_inline = 0;        // max_inline_data
  size_t buffer_bytes = 0;        // rounded up to whole 4 KiB pages
  unsigned int access = 0;        // the buffer's access flags
};

class HostSide {
 public:
  // The Q_Key of every UD QP of the workloads (any value both sides agree on).
  static constexpr uint32_t kQkey = 0x11111111;

  explicit HostSide(const char* name) : name_(name) {}
  HostSide(const HostSide&) = delete;
  HostSide& operator=(const HostSide&) = delete;
  ~HostSide();

  // Opens the device and creates the objects; separate from the constructor so that the
  // destructor releases whatever was made when a step fails. Throws std::runtime_error.
  void create(const HostSideConfig& c);
  // Brings QP q to RTS towards the peer's QP q: RC and UC through INIT -> RTR -> RTS; UD through
  // the same states with its Q_Key, and an address handle to the peer's port (GRH to its GID 0).
  // `remote_access`: what the peer may do to this side's memory (RC, UC).
  void connect(uint32_t q, const HostSide& peer, ibv_mtu mtu, unsigned int remote_access);
  // Posts one receive of `length` bytes at `addr` of the buffer on QP q.
  void post_receive(uint32_t q, uint64_t addr, uint32_t length, uint64_t wr_id);

  [[nodiscard]] uint8_t* buffer() const { return buf_.get(); }
  [[nodiscard]] uint64_t addr() const { return reinterpret_cast<uintptr_t>(buf_.get()); }
  [[nodiscard]] ibv_mr* mr() const { return mr_; }
  [[nodiscard]] ibv_qp* qp(uint32_t q) const { return qps_[q]; }
  [[nodiscard]] ibv_cq* cq(uint32_t q) const { return cqs_[q]; }
  [[nodiscard]] const std::string& name() const { return name_; }
  // UD: the address handle towards the peer and the peer's QP number for QP q.
  [[nodiscard]] ibv_ah* ah() const { return ah_; }
  [[nodiscard]] uint32_t peer_qpn(uint32_t q) const { return peer_qpns_[q]; }

 private:
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  void modify(ibv_qp* qp, ibv_qp_attr& a, int mask);

  std::string name_;
  Transport transport_{};
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::unique_ptr<uint8_t, FreeDeleter> buf_;
  ibv_mr* mr_ = nullptr;
  ibv_ah* ah_ = nullptr;
  std::vector<ibv_cq*> cqs_;
  std::vector<ibv_qp*> qps_;
  std::vector<uint32_t> peer_qpns_;
  uint16_t lid_ = 0;
};

}  // namespace softhca::tools
