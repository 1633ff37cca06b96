// A fake device for the driver's unit tests: it records every MMIO write (doorbells, BlueFlame,
// CQ arms) and answers commands with fixed caps, handing out numbers and remembering what each
// create command said (ring addresses, sizes; for a CQ, the ring a ResizeCq moved it to), so tests
// can read the rings the driver wrote and write CQEs/EQEs by hand. It executes nothing.
#pragma once
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <vector>

#include "driver/provider.h"
#include "fake_kernel.h"
#include "hwif/cmd.h"
#include "hwif/cqe.h"
#include "hwif/device_interface.h"
#include "hwif/doorbell_record.h"
#include "pcie/counters.h"
#include "pcie/host_port.h"
#include "pcie/pcie_config.h"

namespace softhca::driver::testing {

struct MmioWrite {
  uint64_t offset = 0;
  std::vector<uint8_t> bytes;
};

class FakeDevice final : public hwif::MmioTarget, public hwif::CommandInterface {
 public:
  FakeDevice();
  void mmio_write(uint64_t bar_offset, const void* data, size_t len) override;
  int execute(hwif::CmdOpcode op, const void* in, size_t in_len, void* out, size_t out_len) override;

  hwif::DeviceCaps caps{};
  hwif::PortCaps port{};
  std::vector<MmioWrite> mmio;
  std::map<uint32_t, hwif::CreateQpIn> qps;
  std::map<uint32_t, hwif::CreateCqIn> cqs;
  std::map<uint32_t, hwif::CreateEqIn> eqs;        // completion channels' EQs
  std::map<uint32_t, hwif::CreateEqIn> async_eqs;  // contexts' async EQs
  std::map<uint32_t, hwif::CreateSrqIn> srqs;
  std::map<uint32_t, hwif::CreateMkeyIn> mkeys;
  std::vector<hwif::ModifyQpIn> modifies;
  // ResizeCq: each command as given (the CQ's entry in `cqs` then names the new ring), answered
  // with the producer index the test sets here for the CQ (the CQEs it wrote by hand).
  std::vector<hwif::ResizeCqIn> resizes;
  std::map<uint32_t, uint32_t> cq_pi;
  std::vector<hwif::CmdOpcode> log;
  // Makes the next command with this opcode fail with err.
  hwif::CmdOpcode fail_op = hwif::CmdOpcode::kQueryDevice;
  int fail_err = 0;

 private:
  uint32_t next_pdn_ = 1;
  uint32_t next_key_ = 0x100;
  uint32_t next_cqn_ = 0x20;
  uint32_t next_eqn_ = 3;
  uint32_t next_srqn_ = 0x40;
  uint32_t next_qpn_ = 0x1234;
  std::map<uint32_t, hwif::QpAttributes> qp_attr_;
};

// One device reached through a counted host port, a fake host kernel (DMA addresses that are not
// pointers), and a context opened on it.
class DeviceHarness {
 public:
  explicit DeviceHarness(BlueFlameMode mode = BlueFlameMode::kAuto, uint32_t uar_index = 0);
  ~DeviceHarness();
  DeviceHarness(const DeviceHarness&) = delete;
  DeviceHarness& operator=(const DeviceHarness&) = delete;

  ibv_context* ctx() const { return &vctx_->context; }
  ibv_pd* pd() const { return pd_; }

  // A CQ with the given depth (and optional channel).
  ibv_cq* cq(int cqe = 255, ibv_comp_channel* ch = nullptr);
  // A QP of the given kind on a fresh CQ pair (or the given CQ), left in RESET.
  ibv_qp* qp(ibv_qp_type type, uint32_t max_send_wr = 64, uint32_t max_send_sge = 1, uint32_t max_inline = 0,
             uint64_t send_ops = 0, bool sig_all = false, ibv_cq* cq = nullptr, uint32_t max_recv_wr = 16,
             uint32_t max_recv_sge = 1, ibv_srq* srq = nullptr);
  // Moves a QP RESET -> INIT -> RTR -> RTS through modify_qp.
  void to_rts(ibv_qp* qp);
  // Destroys a QP made by qp() before the harness would.
  int destroy(ibv_qp* qp);
  void to_state(ibv_qp* qp, ibv_qp_state s);

  // The rings the driver gave the device, found from their DMA addresses as the device would.
  uint8_t* sq(ibv_qp* qp);
  uint32_t sq_bbs(ibv_qp* qp);
  uint8_t* rq(ibv_qp* qp);
  hwif::QpDbRec* qp_dbrec(ibv_qp* qp);
  hwif::Cqe64* cqes(ibv_cq* cq);
  hwif::CqDbRec* cq_dbrec(ibv_cq* cq);

  // Host memory behind a DMA address the driver gave the device; fails the test if there is none.
  template <class T = uint8_t>
  T* host(uint64_t dma) const {
    uint8_t* p = kernel.host(dma);
    EXPECT_NE(p, nullptr) << "not a DMA address the kernel gave: 0x" << std::hex << dma;
    return reinterpret_cast<T*>(p);
  }

  FakeKernel kernel;  // first: outlives everything the context allocated
  FakeDevice dev;
  pcie::Counters counters;
  pcie::PcieConfig config;
  pcie::HostPort host_port{dev, counters, config};

 private:
  ibv_device device_{};
  verbs_context* vctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::vector<ibv_qp*> qps_;
  std::vector<ibv_cq*> cqs_;
};

// The device's CQE writer, by hand: fills a CQE at free-running index `index` of a ring of
// 2^log_nent entries, owner bit = pass & 1, op_own written last.
void write_cqe(hwif::Cqe64* ring, uint32_t log_nent, uint32_t index, const hwif::Cqe64& cqe, hwif::CqeOpcode op);

}  // namespace softhca::driver::testing
