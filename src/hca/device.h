// The device model: one HCA with one port. It decodes BAR writes (doorbells, BlueFlame, CQ arm),
// executes commands, runs the send pipeline (fetch -> prepare -> execute -> complete) and the
// RC/UC/UD transports, and DMA-reads/writes host memory through its PCIe device port.
// Single-threaded logic: the caller serialises every entry point (runtime holds the device lock);
// time comes from the EngineClock, packets leave through the PacketPort.
// Everything the device knows about its objects lives in a DeviceRegion (device_state.h), so
// several Device objects — one per process, each mapping the region at its own address — can run
// the same device in turn. What stays in the Device object is per process: the sink, port, clock
// and bridge it was given, scratch buffers, and the wake-up it asked of its clock.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <memory>
#include <span>
#include <vector>

#include "base/units.h"
#include "fabric/packet/packet.h"
#include "fabric/packet/roce.h"
#include "hca/device_config.h"
#include "hca/device_memory.h"
#include "hca/device_state.h"
#include "hca/device_stats.h"
#include "hca/mad_agents.h"
#include "hca/mcast_groups.h"
#include "hca/memory_keys.h"
#include "hca/object_table.h"
#include "hca/queue_objects.h"
#include "hwif/cqe.h"
#include "hwif/device_interface.h"
#include "pcie/device_port.h"
#include "pcie/host_bridge.h"

namespace softhca::hca {

// P_Key matching (IBA 10.9, partitions: membership and matching): two P_Keys match when their
// 15-bit keys are equal and not 0 (0x0000 and 0x8000 are the invalid P_Key) and at least one of the
// two is a full member (bit 15 set): a limited member talks only to full members.
[[nodiscard]] constexpr bool pkeys_match(uint16_t a, uint16_t b) {
  constexpr uint16_t kKeyBits = 0x7fff;
  constexpr uint16_t kFullMember = 0x8000;
  return (a & kKeyBits) != 0 && (a & kKeyBits) == (b & kKeyBits) && ((a | b) & kFullMember) != 0;
}

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
  // The wall clock (CLOCK_REALTIME, [ns] since the Unix epoch) at engine time `t` (QueryClock,
  // completion wall-clock timestamps). By default the engine clock itself counts from the epoch:
  // what a simulation without a real clock answers, deterministically.
  virtual int64_t wall_clock_ns(Picoseconds t) { return t.count() / 1000; }
};

class Device final : public hwif::MmioTarget, public hwif::CommandInterface {
 public:
  // A device whose state is in `region`: kFormat lays out a fresh device there, kAttach uses the
  // state a previous kFormat left (possibly by another process, at another base address; the
  // config must be the same). DMA and interrupts go through `bridge`. Throws
  // std::invalid_argument for a region smaller than min_region_bytes(config) or not formatted.
  Device(const DeviceConfig& config, DeviceRegion region, RegionInit init, pcie::TlpSink& tlp_sink,
         PacketPort& port, EngineClock& clock, pcie::HostBridge& bridge);
  // A device of one process: its state in a private region of private_region_bytes(config), DMA
  // addresses are pointers (pcie::IdentityBridge).
  Device(const DeviceConfig& config, pcie::TlpSink& tlp_sink, PacketPort& port, EngineClock& clock);
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // The least a region must hold for `config`: header, slot arrays (16 bytes per entry of each
  // table, capacities = the caps) and kMinHeapBytes of heap for objects and per-QP arrays.
  [[nodiscard]] static uint64_t min_region_bytes(const DeviceConfig& config);
  // A shared region's size: slot arrays plus 1 GiB of heap (address space; pages are used as
  // touched), room for the largest send queues the caps allow on a few dozen QPs, or ~990 QPs of
  // depth 128.
  [[nodiscard]] static uint64_t default_region_bytes(const DeviceConfig& config);
  // A private region's size (the device of one process: sim mode, the timing model): slot arrays
  // plus 64 GiB of heap address space (not committed), room for ~63,000 QPs of depth 128.
  [[nodiscard]] static uint64_t private_region_bytes(const DeviceConfig& config);

  // Objects created by commands from now on belong to `owner` (default 0): a process of the host.
  void set_owner(uint32_t owner) {
    owner_ = owner;
    stats_ = &state_.stats[owner % kStatsBanks];
  }
  [[nodiscard]] uint32_t owner() const { return owner_; }
  // Destroys every object of `owner` — QPs, SRQs, CQs, EQs, memory keys, device memory, PDs, in that order —
  // without DMA to its memory and without interrupts: its process is gone. Packets that arrive
  // later for its QPs are dropped as for an unknown QPN.
  void reclaim(uint32_t owner);
  // How many objects of each kind exist (all owners).
  struct ObjectCounts {
    uint32_t pds, mkeys, eqs, cqs, srqs, qps, dms;
    bool operator==(const ObjectCounts&) const = default;
  };
  [[nodiscard]] ObjectCounts object_counts() const;

  // hwif::MmioTarget
  void mmio_write(uint64_t bar_offset, const void* data, size_t len) override;
  void mmio_read(uint64_t bar_offset, void* dst, size_t len) override;
  // hwif::CommandInterface
  int execute(hwif::CmdOpcode op, const void* in, size_t in_len, void* out, size_t out_len) override;

  // A packet arrived from the fabric: bytes from the LRH through the VCRC on an InfiniBand port, the
  // RoCEv2 IPv4 packet (IPv4 header through ICRC) on an Ethernet port.
  void receive(std::span<const uint8_t> packet);
  // Runs every timer whose deadline is <= now.
  void on_timer(Picoseconds now);

  // Same-host loopback (docs/live-mode.md), as a real HCA loops back internally: when on, a packet
  // addressed to this port itself (InfiniBand link: its own DLID) goes from the send side to the
  // receive side as decoded fields and payload, with no serialisation, ICRC/VCRC or parse, and is
  // delivered, in order, before the entry point that sent it returns. Packet counters count it as
  // if it had crossed the wire. Off (the default): every packet leaves through the PacketPort, so
  // a capture or another carrier sees its bytes.
  void set_internal_loopback(bool on) { internal_loopback_ = on; }

  [[nodiscard]] const DeviceConfig& config() const { return config_; }
  [[nodiscard]] uint16_t lid() const { return config_.port.lid; }
  // The device's packet counters: every process's work (all banks).
  [[nodiscard]] DeviceStats stats() const { return state_.total_stats(); }
  [[nodiscard]] DeviceRegion region() const { return region_; }
  // The set of `qp`'s counters this process counts into (QueuePair::counters).
  [[nodiscard]] QpCounters& counters(QueuePair& qp) const { return qp.counters[qp.owner == owner_ ? 0 : 1]; }

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
  void on_eq_doorbell(uint32_t uar, uint64_t offset_in_reg, const uint8_t* data, size_t len);

  // ---- events (event_queues.cc): EQE writing, events held while an EQ is full, async events ----
  int cmd_set_port_state(const hwif::SetPortStateIn&, hwif::NoOut&);
  [[nodiscard]] bool port_down() const { return state_.port_down != 0; }
  // Writes `e` into `eq` now when it has room and holds no event before it: true. False: the
  // caller holds the event (its object's flag and ++eq.held). An EQ in error takes (and loses) it.
  bool try_write_eqe(EventQueue& eq, hwif::Eqe e);
  void write_eqe(EventQueue& eq, hwif::Eqe e);  // room checked by the caller
  // After a doorbell freed slots: the held events, as many as fit (port events first, then by
  // object: CQs, QPs, SRQs).
  void write_held_events(uint32_t eqn, EventQueue& eq);
  // One affiliated event (kQpEventTypes) of `qp`, or of a CQ or SRQ, to its async EQ.
  void raise_qp_event(QueuePair& qp, uint8_t type);
  void raise_cq_error(CompletionQueue& cq, uint32_t cqn);
  void raise_srq_limit(SharedReceiveQueue& srq, uint32_t srqn);
  // Forgets the events an object being destroyed still holds (its EQs' `held` counts).
  void drop_held_events(const QueuePair& qp);
  void drop_held_events(const CompletionQueue& cq);
  void drop_held_events(const SharedReceiveQueue& srq);
  // QP_FATAL (local work queue catastrophic error, IBA 11.6.3.1), then ERR.
  void fatal_error(QueuePair& qp);
  // A QP whose CQE found its CQ in error (overrun or fault): fatal_error() at the end of the
  // entry point (end_entry()), not in the middle of the completion loop that found it.
  void defer_fatal(const QueuePair& qp);
  void run_deferred_fatal();
  // SQD with SQ_DRAINED asked for: raised once no WQE the QP started is still outstanding.
  void check_sq_drained(QueuePair& qp);

  // ---- commands (device_commands.cc) ----
  int dispatch_command(hwif::CmdOpcode op, const void* in, size_t in_len, void* out, size_t out_len);
  int cmd_query_device(const hwif::QueryDeviceIn&, hwif::QueryDeviceOut&);
  int cmd_query_port(const hwif::QueryPortIn&, hwif::QueryPortOut&);
  int cmd_alloc_pd(const hwif::AllocPdIn&, hwif::AllocPdOut&);
  int cmd_dealloc_pd(const hwif::DeallocPdIn&, hwif::NoOut&);
  int cmd_create_mkey(const hwif::CreateMkeyIn&, hwif::CreateMkeyOut&);
  int cmd_destroy_mkey(const hwif::DestroyMkeyIn&, hwif::NoOut&);
  int cmd_modify_mkey(const hwif::ModifyMkeyIn&, hwif::NoOut&);
  int cmd_create_eq(const hwif::CreateEqIn&, hwif::CreateEqOut&);
  int cmd_destroy_eq(const hwif::DestroyEqIn&, hwif::NoOut&);
  int cmd_create_cq(const hwif::CreateCqIn&, hwif::CreateCqOut&);
  int cmd_destroy_cq(const hwif::DestroyCqIn&, hwif::NoOut&);
  int cmd_resize_cq(const hwif::ResizeCqIn&, hwif::ResizeCqOut&);
  int cmd_modify_cq(const hwif::ModifyCqIn&, hwif::NoOut&);
  int cmd_query_clock(const hwif::QueryClockIn&, hwif::QueryClockOut&);
  int cmd_create_srq(const hwif::CreateSrqIn&, hwif::CreateSrqOut&);
  int cmd_modify_srq(const hwif::ModifySrqIn&, hwif::NoOut&);
  int cmd_query_srq(const hwif::QuerySrqIn&, hwif::QuerySrqOut&);
  int cmd_destroy_srq(const hwif::DestroySrqIn&, hwif::NoOut&);
  int cmd_create_qp(const hwif::CreateQpIn&, hwif::CreateQpOut&);
  int cmd_modify_qp(const hwif::ModifyQpIn&, hwif::NoOut&);
  int cmd_query_qp(const hwif::QueryQpIn&, hwif::QueryQpOut&);
  int cmd_destroy_qp(const hwif::DestroyQpIn&, hwif::NoOut&);
  int create_xrc_qp(const hwif::CreateQpIn&, hwif::CreateQpOut&);
  // Fills a new QP's fields from `in` and gives it its per-QP arrays; false (the QP erased) when
  // the region is full.
  bool init_qp(QueuePair* qp, uint32_t qpn, const hwif::CreateQpIn& in);
  // ---- XRC (xrc_commands.cc) ----
  int cmd_open_xrcd(const hwif::OpenXrcdIn&, hwif::OpenXrcdOut&);
  int cmd_close_xrcd(const hwif::CloseXrcdIn&, hwif::NoOut&);
  int cmd_open_qp(const hwif::OpenQpIn&, hwif::NoOut&);
  // Checks of cmd_create_srq / cmd_create_qp for XRC objects; 0 or the errno.
  int check_xrc_srq(const hwif::CreateSrqIn& in) const;
  int check_xrc_qp(const hwif::CreateQpIn& in) const;
  // The XRC SRQ a TGT QP's request names (ResponderState::xrc_srqn), when it is one of the QP's
  // domain (IBA 9.7.x: nullptr otherwise, and the request is NAKed as invalid).
  [[nodiscard]] SharedReceiveQueue* xrc_srq_of(const QueuePair& qp) const;
  // An XRC SRQ or TGT QP leaves its domain (which goes too when it was the last and nobody holds
  // the domain open).
  void release_xrcd(uint32_t xrcdn);
  // reclaim(): a dead owner's opens of XRC domains and handles on TGT QPs.
  void reclaim_xrc(uint32_t owner);
  // ---- device memory (dm_commands.cc) ----
  int cmd_alloc_dm(const hwif::AllocDmIn&, hwif::AllocDmOut&);
  int cmd_free_dm(const hwif::FreeDmIn&, hwif::NoOut&);
  // CreateMkey's checks of a key in device memory (counted in the allocation when 0 is returned),
  // and what a destroyed key gives back.
  int attach_dm_key(const hwif::CreateMkeyIn& in);
  void detach_dm_key(uint32_t dmn);
  void reclaim_dm(uint32_t owner);
  // The BAR's device memory window: [offset, + len) of it, or empty when that is outside it.
  [[nodiscard]] std::span<uint8_t> dm_window(uint64_t offset, size_t len) const;
  // ---- memory windows (memory_windows.cc) ----
  int cmd_alloc_mw(const hwif::AllocMwIn&, hwif::AllocMwOut&);
  int cmd_dealloc_mw(const hwif::DeallocMwIn&, hwif::NoOut&);
  // A bind or local invalidate WQE of `qp`, executed in its send queue's order: nothing, or the
  // syndrome its CQE gets (MW_BIND_ERR for a bind; LOC_QP_OP_ERR for an invalidation, as rxe).
  std::optional<hwif::CqeSyndrome> run_memory_op(QueuePair& qp, const SendWqe& w);
  // Invalidates a type 2 window of PD `pdn` bound to QP `qpn` (LOCAL_INV, SEND with invalidate);
  // false, nothing changed, for any other key.
  bool invalidate_window(uint32_t key, uint32_t pdn, uint32_t qpn);
  // A window lets go of its MR.
  void unbind_window(Mkey& mw);
  // ---- QP1 (management.cc) ----
  int cmd_set_mad_agent(const hwif::SetMadAgentIn&, hwif::SetMadAgentOut&);
  int cmd_bind_service(const hwif::BindServiceIn&, hwif::BindServiceOut&);
  int cmd_unbind_service(const hwif::UnbindServiceIn&, hwif::NoOut&);
  // The QPN of the agent a CM MAD (256 bytes) belongs to; 0: none.
  [[nodiscard]] uint32_t mad_agent_for(std::span<const uint8_t> mad) const;
  // accept() for a packet to QP1: P_Key and Q_Key checks, then to its agent as a UD receive.
  void accept_gsi(const fabric::PacketFields& f, std::span<const uint8_t> payload, size_t wire_bytes,
                  uint32_t packets);
  // REJ 8 / SIDR_REP status 1 for a REQ / SIDR_REQ whose service no agent bound.
  void answer_unbound(const fabric::PacketFields& f, std::span<const uint8_t> payload);
  int cmd_track_connection(const hwif::TrackConnectionIn&, hwif::NoOut&);
  int cmd_untrack_connection(const hwif::UntrackConnectionIn&, hwif::NoOut&);
  void end_connections_of(uint32_t agent_qpn);  // a DREQ for each connection it still tracks
  // ---- multicast (multicast.cc) ----
  int cmd_attach_mcast(const hwif::AttachMcastIn&, hwif::NoOut&);
  int cmd_detach_mcast(const hwif::DetachMcastIn&, hwif::NoOut&);
  [[nodiscard]] bool is_multicast(const fabric::PacketFields& f) const;  // to a multicast LID / GID
  void accept_multicast(const fabric::PacketFields& f, std::span<const uint8_t> payload, size_t wire_bytes);
  void destroy_qp(uint32_t qpn);
  void destroy_srq(uint32_t srqn);
  void destroy_cq(uint32_t cqn);
  void release_qp_arrays(const QueuePair& qp);
  int check_qp_attr_values(const QueuePair& qp, uint32_t mask, const hwif::QpAttributes& a) const;
  void apply_qp_attrs(QueuePair& qp, uint32_t mask, const hwif::QpAttributes& a);
  void reset_qp(QueuePair& qp);

  // ---- helpers shared by the pipeline and transports ----
  void enter_error(QueuePair& qp);  // QP -> ERR: flush both queues
  // A send-side completion error: RC -> ERR; UD and UC -> SQE (IBA 10.3.1, "Send Queue Error"):
  // the rest of the send queue, and what is posted until SQE -> RTS, is flushed; the receive
  // queue goes on.
  void send_queue_error(QueuePair& qp);
  // The clock, read at most once per entry point: an entry takes microseconds and timers are set
  // in multiples of 4.096 us (IBA 9.7.6.1.3) or 10 us (table 45), so one reading serves all its
  // packets. Every public entry point ends with end_entry(): looped packets are delivered and the
  // reading is forgotten.
  Picoseconds now();
  void end_entry();
  void schedule(QueuePair& qp, Picoseconds deadline, bool rnr);
  void cancel_timer(QueuePair& qp);
  void schedule_cq(CompletionQueue& cq, Picoseconds deadline);  // its moderation timer
  // The device clock (DeviceCaps::hca_core_clock_khz: one tick per ns of the engine clock).
  static constexpr int64_t kPsPerClockTick = 1000;
  uint64_t clock_ticks() { return static_cast<uint64_t>(now().count() / kPsPerClockTick); }
  // in_place: the payload is host memory read by dma_read_in_place(); a looped packet then
  // carries it by reference (it is consumed before the entry point returns), never copied.
  void transmit(const fabric::PacketFields& f, std::span<const uint8_t> payload, bool in_place = false);
  // A packet sent: in the device's counters and in those of `by`, the QP whose work sent it (none:
  // a command's, uncounted per QP). The second form takes tx_qp_ and counts NAKs too.
  void count_sent(QueuePair* by, size_t wire_bytes) { count_sent(by, 1, wire_bytes); }
  // `packets` packets of `bytes` in all.
  void count_sent(QueuePair* by, uint32_t packets, uint64_t bytes) {
    stats_->packets_sent += packets;
    stats_->bytes_sent += bytes;
    if (by == nullptr) return;
    QpCounters& c = counters(*by);
    c.packets_sent += packets;
    c.bytes_sent += bytes;
  }
  void count_sent(const fabric::PacketFields& f, size_t wire_bytes);
  // Why `qp` would not take a packet of this opcode and P_Key (its state, transport or P_Key), or
  // nothing: accept()'s rule, which express WRITEs and their ACKs follow too. The P_Key must match
  // the entry of the port's P_Key table at the QP's P_Key index (pkeys_match()).
  [[nodiscard]] std::optional<DropReason> refuses(const QueuePair& qp, fabric::BthOpcode op, uint16_t pkey) const;
  // IBA 9.6.1.5: a packet to a connected QP (RC, UC) is taken only from where the QP is connected:
  // on InfiniBand its SLID must be the path's DLID, and when it carries a GRH and the path is
  // global, its SGID must be the path's DGID (on Ethernet, always: the SGID is the sender's IPv4
  // address). accept() drops others as kBadSource, before they can change any state or draw an
  // ACK or NAK. UD QPs take datagrams from anyone (their Q_Key is checked instead).
  [[nodiscard]] bool from_peer(const QueuePair& qp, const fabric::PacketFields& f) const {
    if (qp.type == hwif::QpType::kUd) return true;
    const hwif::AddressVector& av = qp.attr.av;
    if (!ethernet() && f.slid.value() != av.dlid) return false;
    if (f.grh && av.is_global) return f.grh->sgid == av.dgid.raw;
    return !ethernet();  // an Ethernet path is always global, and every RoCEv2 packet has its GRH
  }
  // Where a sender gathers the payload of a packet with these (routed) fields: a loopback slot
  // when the packet will loop back (transmit() then copies nothing), payload_buf_ otherwise.
  uint8_t* payload_buffer_for(const fabric::PacketFields& f);
  // ---- internal loopback (device.cc) ----
  struct LoopedPacket {
    fabric::PacketFields fields;
    uint32_t packets = 1;  // more than 1: positive ACKs merged into the last (merge_looped_ack)
    uint32_t wire_bytes = 0;  // of each packet
    uint32_t payload_bytes = 0;
    const uint8_t* data = nullptr;  // the payload: `payload` below, or host memory (in place)
    std::array<uint8_t, fabric::kMaxPayloadBytes> payload;
  };
  [[nodiscard]] bool loops_back(const fabric::PacketFields& f) const {
    // Ethernet: a packet to one of our own GIDs (our IP address) never reaches the network.
    return internal_loopback_ && (ethernet() || f.has_lrh) && addressed_here(f);
  }
  LoopedPacket& loop_tail();  // the free slot the next looped packet takes (grows the ring)
  // A positive ACK queued right behind a positive ACK on the same route: ACKs are cumulative, so
  // the queued one takes the new PSN and MSN and counts one more packet; delivering both would end
  // in the same state (the requester acts on the last one alone, next_looped_ack()). Only the
  // work is saved: every merged packet is counted sent and received as if it had crossed the wire.
  bool merge_looped_ack(const fabric::PacketFields& f, size_t wire_bytes);
  // The same for a positive ACK of `qp` to its connected peer, before its fields are even built:
  // counted sent (device and tx_qp_) and merged when the queue's tail is an ACK on that route.
  bool merge_ack_to_peer(const QueuePair& qp, Psn psn, fabric::AethFields aeth);
  LoopedPacket* ack_at_loop_tail();  // the last queued packet, if a positive ACK not being delivered
  // Whether every looped packet waiting behind the one being delivered (if any) is a positive ACK:
  // a request may then be carried out at once (express.cc), as on a wire where ACKs are in flight
  // the other way; requests and responses queued keep their order. With merging, ACKs take one slot.
  [[nodiscard]] bool loop_holds_only_acks() {
    const size_t waiting = loop_count_ - (draining_ ? 1 : 0);
    return waiting == 0 || (waiting == 1 && ack_at_loop_tail() != nullptr);
  }
  // `packets` looped-back packets of `bytes` in all, taken by `qp` without being queued
  // (express.cc): counted received, device and QP, as drain_loopback() and accept() count them.
  void count_taken(QueuePair& qp, uint32_t packets, uint64_t bytes) {
    stats_->packets_received += packets;
    stats_->bytes_received += bytes;
    QpCounters& c = counters(qp);
    c.packets_received += packets;
    c.bytes_received += bytes;
  }
  static void merge_into(LoopedPacket& ack, Psn psn, fabric::AethFields aeth);
  void drain_loopback();
  // While `current`, a looped packet, is being delivered: the PSN of the packet queued right
  // behind it when that one is a positive ACK on the same route to the same QP, so the work of a
  // cumulative ACK can be left to it. Nothing otherwise.
  [[nodiscard]] std::optional<uint32_t> next_looped_ack(const fabric::PacketFields& current) const;
  // A packet that arrived (off the wire or looped back): address, QP and P_Key checks, then the
  // requester or responder. `wire_bytes`: its size as received (looped back: as it would have been
  // on the wire).
  // `packets`: how many copies it stands for (merged ACKs, counted each), the same in every way.
  void accept(const fabric::PacketFields& f, std::span<const uint8_t> payload, size_t wire_bytes,
              uint32_t packets = 1);

  // ---- the port's wire format (device_wire.cc): native IB on InfiniBand, RoCEv2 on Ethernet ----
  [[nodiscard]] bool ethernet() const { return config_.port.link_layer == hwif::LinkLayer::kEthernet; }
  // Whether a packet is for this port: its DLID (InfiniBand) or its GRH DGID, one of our GIDs (Ethernet).
  [[nodiscard]] bool addressed_here(const fabric::PacketFields& f) const {
    return ethernet() ? has_gid(f) : f.dlid.value() == lid();
  }
  // Ethernet: whether the packet's GRH DGID is one of our GIDs.
  [[nodiscard]] bool has_gid(const fabric::PacketFields& f) const;
  // [bytes] of the packet on this port's wire (0: it cannot be sent, e.g. no GRH on Ethernet).
  [[nodiscard]] size_t wire_size(const fabric::PacketFields& f, size_t payload_bytes) const;
  // Serialises into tx_buf_; returns the bytes (0 as wire_size).
  size_t encode(const fabric::PacketFields& f, std::span<const uint8_t> payload);
  // Parses a packet of this port's wire format (ICRC/VCRC checked); false when malformed.
  bool decode(std::span<const uint8_t> packet, fabric::PacketFields& f, std::span<const uint8_t>& payload) const;
  // Ethernet: a multicast datagram's copy that reached this host as unicast, read as sent to the
  // group its ICRC covers (device_wire.cc). Its payload points into group_copy_buf_.
  bool decode_group_copy(std::span<const uint8_t> packet, fabric::PacketFields& f,
                         std::span<const uint8_t>& payload) const;
  static_assert(fabric::kMaxRocePacketBytes <= fabric::kMaxPacketBytes, "tx_buf_ holds either format");

  // LRH/GRH/BTH addressing of a packet to a connected QP's peer (primary path).
  void route_to_peer(const QueuePair& qp, fabric::PacketFields& f) const;
  // The 32-bit big-endian value of a doorbell record field read from host memory; nothing on a
  // DMA fault (counted in stats_->dma_faults).
  std::optional<uint32_t> read_dbrec_be32(uint64_t addr, bool counted);
  // Counts a DMA fault and returns false, for `return fault();` at a failed DMA.
  bool fault() {
    ++stats_->dma_faults;
    return false;
  }
  // A QP's arrays in the region.
  [[nodiscard]] std::span<uint8_t> sq_shadow(const QueuePair& qp) const {
    return {heap_.at<uint8_t>(qp.sq_shadow), qp.sq_shadow_bytes()};
  }
  [[nodiscard]] SendRecord& record(const QueuePair& qp, uint16_t bb) const {
    return heap_.at<SendRecord>(qp.records)[bb & (qp.sq_bbs() - 1)];
  }

  // The QP whose work an entry point is doing (its doorbell, a packet or timer for it): transmit()
  // counts what it sends in that QP's QpCounters. Set for a scope, the outer value restored after.
  struct QpScope {
    QpScope(Device& d, QueuePair& qp) : slot(d.tx_qp_), outer(d.tx_qp_) { slot = &qp; }
    ~QpScope() { slot = outer; }
    QpScope(const QpScope&) = delete;
    QpScope& operator=(const QpScope&) = delete;
    QueuePair*& slot;
    QueuePair* outer;
  };

  // Delegated to by both public constructors; `owned` is empty for a caller's region.
  Device(const DeviceConfig& config, PrivateRegion owned, DeviceRegion region, RegionInit init,
         pcie::TlpSink& tlp_sink, PacketPort& port, EngineClock& clock, pcie::HostBridge* bridge);

  // ---- per process ----
  PrivateRegion owned_region_;          // the private region, when the device owns one
  pcie::IdentityBridge identity_bridge_;  // used when no bridge was given
  DeviceConfig config_;
  pcie::DevicePort dma_;
  PacketPort& port_;
  EngineClock& clock_;
  uint32_t owner_ = 0;
  DeviceRegion region_;

  // ---- views of the state in the region ----
  DeviceState& state_;
  mutable RegionHeap heap_;
  DeviceStats* stats_;  // the bank this process counts into (set_owner())
  ObjectTable<uint32_t> pds_;  // value: objects using the PD
  MemoryKeys mkeys_;
  ObjectTable<EventQueue> eqs_;
  ObjectTable<CompletionQueue> cqs_;
  ObjectTable<SharedReceiveQueue> srqs_;
  ObjectTable<QueuePair> qps_;
  ObjectTable<XrcDomain> xrcds_;
  ObjectTable<DeviceMemory> dms_;
  // The earliest wake-up asked of the clock and not yet delivered: a new deadline asks again only
  // when it is earlier, so arming a timer per message costs a comparison, not a call.
  Picoseconds wakeup_requested_ = Picoseconds::max();
  std::array<uint8_t, fabric::kMaxPacketBytes> tx_buf_{};
  std::array<uint8_t, 4096> payload_buf_{};  // one MTU of gathered payload
  mutable std::array<uint8_t, fabric::kMaxRocePacketBytes> group_copy_buf_{};  // decode_group_copy()
  // Looped-back packets waiting for delivery: a circular queue of slots that stay put when it
  // grows (the slot being delivered is referenced meanwhile). Grows (doubles) only when full.
  bool internal_loopback_ = false;
  bool now_valid_ = false;
  Picoseconds now_{0};
  bool draining_ = false;
  QueuePair* tx_qp_ = nullptr;  // see QpScope; per process, valid for one entry point
  std::vector<uint32_t> fatal_qps_;  // defer_fatal(): QPNs to fail at end_entry()
  std::vector<std::unique_ptr<LoopedPacket>> loop_ring_;
  size_t loop_head_ = 0;
  size_t loop_count_ = 0;
};

}  // namespace softhca::hca
