// The device model: one HCA with one port. It decodes BAR writes (doorbells, BlueFlame, CQ arm),
// executes commands, runs the send pipeline (fetch -> prepare -> execute -> complete) and the
// RC/UC/UD transports, and DMA-reads/writes host memory through its PCIe device port.
// Single-threaded logic: the caller serialises every entry point (runtime holds the device lock);
// time comes from the EngineClock, packets leave through the PacketPort.
#pragma once
#include <array>
#include <cstdint>
#include <span>

#include "base/units.h"
#include "fabric/packet/packet.h"
#include "hca/device_config.h"
#include "hca/device_stats.h"
#include "hca/memory_keys.h"
#include "hca/object_table.h"
#include "hca/queue_objects.h"
#include "hwif/cqe.h"
#include "hwif/device_interface.h"
#include "pcie/device_port.h"

namespace softhca::hca {

// Where the device's packets go (a fabric carrier).
class PacketPort {
 public:
  virtual ~PacketPort() = default;
  virtual void transmit(std::span<const uint8_t> packet) = 0;
};

// The device's view of time: now, and a request to be called back (on_timer) at a given time.
class EngineClock {
 public:
  virtual ~EngineClock() = default;
  virtual Picoseconds now() = 0;
  virtual void request_wakeup(Picoseconds at) = 0;
};

class Device final : public hwif::MmioTarget, public hwif::CommandInterface {
 public:
  Device(const DeviceConfig& config, pcie::TlpSink& tlp_sink, PacketPort& port, EngineClock& clock);

  // hwif::MmioTarget
  void mmio_write(uint64_t bar_offset, const void* data, size_t len) override;
  // hwif::CommandInterface
  int execute(hwif::CmdOpcode op, const void* in, size_t in_len, void* out, size_t out_len) override;

  // A packet arrived from the fabric (bytes from the LRH through the VCRC).
  void receive(std::span<const uint8_t> packet);
  // Runs every timer whose deadline is <= now.
  void on_timer(Picoseconds now);

  [[nodiscard]] const DeviceConfig& config() const { return config_; }
  [[nodiscard]] uint16_t lid() const { return config_.port.lid; }
  [[nodiscard]] const DeviceStats& stats() const { return stats_; }
  [[nodiscard]] pcie::DevicePort& dma() { return dma_; }

 private:
  friend class SendPipeline;
  friend class Requester;
  friend class Responder;
  friend class Completer;

  // ---- register decode (device.cc) ----
  struct RegisterHandler {
    uint64_t offset;  // within a UAR page
    uint64_t size;
    void (Device::*handle)(uint32_t uar, uint64_t offset_in_reg, const uint8_t* data, size_t len);
  };
  void on_bfreg_write(uint32_t uar, uint64_t offset_in_reg, const uint8_t* data, size_t len);
  void on_cq_arm(uint32_t uar, uint64_t offset_in_reg, const uint8_t* data, size_t len);

  // ---- commands (device_commands.cc) ----
  int cmd_query_device(const hwif::QueryDeviceIn&, hwif::QueryDeviceOut&);
  int cmd_query_port(const hwif::QueryPortIn&, hwif::QueryPortOut&);
  int cmd_alloc_pd(const hwif::AllocPdIn&, hwif::AllocPdOut&);
  int cmd_dealloc_pd(const hwif::DeallocPdIn&, hwif::NoOut&);
  int cmd_create_mkey(const hwif::CreateMkeyIn&, hwif::CreateMkeyOut&);
  int cmd_destroy_mkey(const hwif::DestroyMkeyIn&, hwif::NoOut&);
  int cmd_create_eq(const hwif::CreateEqIn&, hwif::CreateEqOut&);
  int cmd_destroy_eq(const hwif::DestroyEqIn&, hwif::NoOut&);
  int cmd_create_cq(const hwif::CreateCqIn&, hwif::CreateCqOut&);
  int cmd_destroy_cq(const hwif::DestroyCqIn&, hwif::NoOut&);
  int cmd_create_srq(const hwif::CreateSrqIn&, hwif::CreateSrqOut&);
  int cmd_modify_srq(const hwif::ModifySrqIn&, hwif::NoOut&);
  int cmd_query_srq(const hwif::QuerySrqIn&, hwif::QuerySrqOut&);
  int cmd_destroy_srq(const hwif::DestroySrqIn&, hwif::NoOut&);
  int cmd_create_qp(const hwif::CreateQpIn&, hwif::CreateQpOut&);
  int cmd_modify_qp(const hwif::ModifyQpIn&, hwif::NoOut&);
  int cmd_query_qp(const hwif::QueryQpIn&, hwif::QueryQpOut&);
  int cmd_destroy_qp(const hwif::DestroyQpIn&, hwif::NoOut&);
  int check_qp_attr_values(const QueuePair& qp, uint32_t mask, const hwif::QpAttributes& a) const;
  void apply_qp_attrs(QueuePair& qp, uint32_t mask, const hwif::QpAttributes& a);
  void reset_qp(QueuePair& qp);

  // ---- helpers shared by the pipeline and transports ----
  void enter_error(QueuePair& qp);  // QP -> ERR: flush both queues
  void schedule(QueuePair& qp, Picoseconds deadline, bool rnr);
  void cancel_timer(QueuePair& qp);
  void transmit(const fabric::PacketFields& f, std::span<const uint8_t> payload);
  // LRH/GRH/BTH addressing of a packet to a connected QP's peer (primary path).
  void route_to_peer(const QueuePair& qp, fabric::PacketFields& f) const;
  // The 32-bit big-endian value of a doorbell record field read from host memory.
  uint32_t read_dbrec_be32(uint64_t addr, bool counted);

  DeviceConfig config_;
  pcie::DevicePort dma_;
  PacketPort& port_;
  EngineClock& clock_;
  DeviceStats stats_;

  ObjectTable<uint32_t> pds_;  // value: objects using the PD
  MemoryKeys mkeys_;
  ObjectTable<EventQueue> eqs_;
  ObjectTable<CompletionQueue> cqs_;
  ObjectTable<SharedReceiveQueue> srqs_;
  ObjectTable<QueuePair> qps_;
  // The earliest wake-up asked of the clock and not yet delivered: a new deadline asks again only
  // when it is earlier, so arming a timer per message costs a comparison, not a call.
  Picoseconds wakeup_requested_ = Picoseconds::max();
  std::array<uint8_t, fabric::kMaxPacketBytes> tx_buf_{};
  std::array<uint8_t, 4096> payload_buf_{};  // one MTU of gathered payload
};

}  // namespace softhca::hca
