#include "runtime/shared_runtime.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <endian.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "fabric/carrier_gate.h"
#include "fabric/fault_injector.h"
#include "fabric/inproc_carrier.h"
#include "fabric/udp_carrier.h"
#include "runtime/device_seed.h"
#include "runtime/fabric_registry.h"
#include "runtime/irq_socket.h"
#include "runtime/shared_kernel.h"
#include "runtime/memory_publisher.h"
#include "runtime/peer_memory.h"
#include "runtime/slot_data.h"
#include "runtime/stats_json.h"
#include "runtime/stop_deferral.h"

namespace softhca::runtime {

namespace {

// The destination address of a RoCEv2 IPv4 packet: bytes 16..19, big-endian (RFC 791). 0 for a
// packet too short to have one.
uint32_t ipv4_destination(std::span<const uint8_t> packet) {
  if (packet.size() < fabric::kIpv4HeaderBytes) return 0;
  return (uint32_t{packet[16]} << 24) | (uint32_t{packet[17]} << 16) | (uint32_t{packet[18]} << 8) | packet[19];
}

// The LRH's DLID: bytes 2..3, big-endian (IBA 7.7). 0 for a packet too short to have one.
uint16_t lrh_dlid(std::span<const uint8_t> packet) {
  return packet.size() < 4 ? 0 : static_cast<uint16_t>((packet[2] << 8) | packet[3]);
}

// Counts forks on the child side: a runtime made before a fork (its slot, threads and memory) is
// not the child's, so the child's entries into it are refused (rdma-core: a child cannot use its
// parent's verbs objects); a runtime the child makes itself works. Compared with a relaxed load,
// not getpid(), which is a system call, on the doorbell path.
std::atomic<uint64_t> g_fork_generation{0};
void on_fork_child() { g_fork_generation.fetch_add(1, std::memory_order_relaxed); }
uint64_t fork_generation() { return g_fork_generation.load(std::memory_order_relaxed); }

int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

class SharedRuntime::Impl final : public DeviceSlot,
                                  private pcie::TlpSink,
                                  private hca::PacketPort,
                                  private fabric::PacketReceiver,
                                  private hwif::MmioTarget,
                                  private hwif::CommandInterface,
                                  private hca::EngineClock {
 public:
  explicit Impl(const SharedRuntimeOptions& options)
      : options_(options), registry_(options.dir, options.names.fabric), pid_(::getpid()) {}
  ~Impl() override;

  // Everything create() does; false with error set.
  bool attach(std::string& error);
  void detach();
  uint32_t sweep();

  // ---- DeviceSlot ----
  [[nodiscard]] const std::string& name() const override { return name_; }
  [[nodiscard]] uint64_t node_guid_be() const override { return htobe64(config_.caps.node_guid); }
  pcie::HostPort& host_port() override { return *host_port_; }
  hwif::CommandInterface& commands() override { return *this; }
  pcie::Counters& counters() override { return counters_; }
  pcie::HostKernel& kernel() override { return *kernel_; }
  uint32_t acquire_uar() override;
  void release_uar(uint32_t uar_index) override;
  [[nodiscard]] uint8_t blueflame_mode() const override { return blueflame_mode_; }
  void set_blueflame_mode(uint8_t mode) override { blueflame_mode_ = mode; }

  void run_timers(Picoseconds now);
  void dump_stats(const std::string& path);
  hca::Device::ObjectCounts object_counts();
  hca::DeviceStats packet_stats();
  [[nodiscard]] uint64_t refused_at_carrier() const { return gate_ != nullptr ? gate_->refused() : 0; }

  DeviceSlot* slots_[1] = {this};
  std::string segment_path_;
  std::atomic<uint64_t> unroutable_{0};
  std::atomic<uint64_t> to_other_{0};
  std::atomic<uint64_t> from_other_{0};

  [[nodiscard]] uint32_t slot() const { return segment_->my_slot(); }
  // Made before a fork, seen in the child: the parent's attachment.
  [[nodiscard]] bool inherited() const { return fork_generation() != fork_generation_; }
  [[nodiscard]] const SharedRuntimeOptions& options() const { return options_; }
  [[nodiscard]] uint16_t lid() const { return segment_->lid(); }

 private:
  // Holds the device lock; when the previous owner died holding it, reclaims dead slots first.
  class Entry {
   public:
    // Job-control stops wait until the lock is released (stop_deferral.h).
    explicit Entry(Impl& impl) : impl_(impl) {
      device_entered();
      if (impl_.bridge_ != nullptr) impl_.bridge_->hold_interrupts();
      if (impl_.segment_->lock_device()) impl_.sweep_locked();
    }
    // Before the lock goes: ranges their owners unpublished are unmapped here, so that no mapping
    // of this process keeps a deregistration's pages alive (PeerMemory::drop_unpublished). After
    // it: the interrupts the entry raised (SharedBridge::hold_interrupts says why).
    ~Entry() {
      if (impl_.peers_ != nullptr) impl_.peers_->drop_unpublished();
      impl_.segment_->unlock_device();
      if (impl_.bridge_ != nullptr) impl_.bridge_->release_interrupts();
      device_exited();
    }
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;

   private:
    Impl& impl_;
  };

  bool open_udp(bool formatting);
  // Which datagrams udp_ hands to the device: InfiniBand, those from the carrier endpoint the
  // registry names for their SLID; Ethernet, those from the RoCE port (docs/security.md).
  std::unique_ptr<fabric::CarrierGate> make_gate();
  int open_roce_carrier();  // 0 or the errno of the bind
  [[nodiscard]] bool ethernet() const { return link_.layer == hwif::LinkLayer::kEthernet; }
  // Delivers every packet looped back on this host (either queue) until none is left.
  void drain_wire();
  void queue_roce_loopback(std::span<const uint8_t> packet);
  bool make_device(std::string& error);
  uint32_t sweep_locked();
  [[nodiscard]] bool any_dead_slot() const;
  void send_off_host(uint16_t dlid, std::span<const uint8_t> packet);
  // Where a packet that left the port goes: looped back to this host, or to another host.
  void route(std::span<const uint8_t> packet);
  // Faults on: held packets that are due go on their way; a wake-up is asked for the next one.
  void release_faults();
  void agent_loop();
  void receive_loop();
  void stop_threads();

  // pcie::TlpSink, hca::PacketPort, fabric::PacketReceiver, hwif::MmioTarget, CommandInterface
  void on_tlp(const pcie::Tlp& tlp) override;
  // With no TLP tap the runtime only counts: the device port may report transfers as runs.
  [[nodiscard]] bool counts_only() const override { return options_.tlp_tap == nullptr; }
  void on_tlp_run(const pcie::TlpRun& run) override { counters_.on_tlp_run(run); }
  void transmit(std::span<const uint8_t> packet) override;
  void deliver(std::span<const uint8_t> packet) override;
  void mmio_write(uint64_t bar_offset, const void* data, size_t len) override;
  void mmio_read(uint64_t bar_offset, void* dst, size_t len) override;
  int execute(hwif::CmdOpcode op, const void* in, size_t in_len, void* out, size_t out_len) override;
  // hca::EngineClock: CLOCK_MONOTONIC since the host segment's epoch, the same in every process of
  // the host, so deadlines stored in the shared device mean the same everywhere. (Since the
  // epoch, not since boot: 64-bit picoseconds overflow after 106 days of uptime.)
  Picoseconds now() override;
  void request_wakeup(Picoseconds at) override;
  // CLOCK_REALTIME now, less the engine time since t: the same instant in every process.
  int64_t wall_clock_ns(Picoseconds t) override;

  SharedRuntimeOptions options_;
  FabricRegistry registry_;
  pid_t pid_;
  uint64_t fork_generation_ = 0;  // at attach; see on_fork_child
  hca::DeviceConfig config_;
  LinkOptions link_;
  std::string name_ = "softhca_0";
  uint8_t blueflame_mode_ = 0;
  std::unique_ptr<fabric::UdpCarrier> udp_;
  // What the receiver lets through from udp_ (set before the receiver starts, when udp_ is open).
  std::unique_ptr<fabric::CarrierGate> gate_;
  std::unique_ptr<HostSegment> segment_;
  std::unique_ptr<MemoryPublisher> publisher_;
  std::unique_ptr<PeerMemory> peers_;
  std::unique_ptr<IrqSockets> irq_;
  std::unique_ptr<SharedKernel> kernel_;
  std::unique_ptr<SharedBridge> bridge_;
  pcie::Counters counters_;  // into this process's slot of the segment while attached
  std::optional<pcie::CounterSnapshot> pcie_at_detach_;
  std::atomic<uint64_t> seq_{0};
  // Under the device lock: this process's view of the wire while it runs the device.
  fabric::InprocCarrier loopback_;
  // Ethernet: RoCEv2 packets to our own address (they have no LRH for loopback_ to route by), in
  // order; slots keep their capacity, so the queue allocates only while it grows.
  std::vector<std::vector<uint8_t>> roce_loop_;
  size_t roce_loop_head_ = 0;
  size_t roce_loop_count_ = 0;
  std::vector<uint8_t> roce_current_;
  std::unordered_map<uint16_t, fabric::Ipv4Endpoint> routes_;  // LID -> carrier; cleared by sweeps
  // The faulty link every packet of this process's port crosses (SOFTHCA_FAULTS); null when off.
  // Under the device lock. Per process: what one process holds back dies with it (lost packets).
  std::unique_ptr<fabric::FaultInjector> faults_;
  bool detached_ = false;
  std::unique_ptr<hca::Device> device_;
  std::unique_ptr<pcie::HostPort> host_port_;
  std::atomic<bool> detaching_{false};
  // The agent's wake-up (agent_mu_ is never held while taking the device lock).
  std::mutex agent_mu_;
  std::condition_variable agent_cv_;
  Picoseconds next_timer_ = Picoseconds::max();
  bool stop_ = false;
  int threads_running_ = 0;  // agent and receiver, once in their loops
  std::thread agent_;
  std::thread receiver_;
};

// ---- attach / detach ----------------------------------------------------------------------------

bool SharedRuntime::Impl::attach(std::string& error) {
  static const int atfork_registered = pthread_atfork(nullptr, nullptr, on_fork_child);
  (void)atfork_registered;
  install_stop_deferral();
  fork_generation_ = fork_generation();
  if (options_.link) {
    link_ = *options_.link;
  } else if (!link_options_from_env(link_, error)) {
    return false;
  }
  fabric::FaultSpec faults;
  if (options_.faults) {
    faults = *options_.faults;
  } else if (!fault_spec_from_env(faults, error)) {
    return false;
  }

  // The randomness of the device's keys and QPNs, used if this process formats it.
  uint64_t seed = 0;
  try {
    seed = fresh_device_seed();
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
  auto config_for = [this](uint16_t lid) {
    hca::DeviceConfig c = options_.config_for_lid ? options_.config_for_lid(lid)
                                                  : hca::default_device_config(lid > 0 ? lid - 1u : 0u);
    c.port.lid = lid;
    if (options_.pcie) c.pcie = *options_.pcie;
    // The registry's LID still names the host (and its GUID); an Ethernet port reports LID 0.
    if (ethernet()) hca::use_ethernet_link(c, link_.ipv4, link_.netdev_mtu, link_.roce_port);
    return c;
  };
  SegmentOptions so;
  so.dir = options_.dir;
  so.fabric = options_.names.fabric;
  so.host = options_.names.host;
  // Every process must size the region alike: the caps decide it, never the LID.
  so.device_bytes = hca::Device::default_region_bytes(config_for(1));
  so.slot_data_bytes = sizeof(SlotData);
  // A freed slot keeps its range generations (range_table.h clear_keeping_generations): a peer
  // that cached the old process's mappings and never saw it go misses on the next process's.
  so.clear_slot_data = [](void* data) {
    auto* d = static_cast<SlotData*>(data);
    d->ranges.clear_keeping_generations();
    std::memset(static_cast<void*>(&d->pcie), 0, sizeof d->pcie);
  };
  // No SOFTHCA_IP: the host's default address (docs/addresses.md), claimed in the registry by the
  // host's first process and read from it by the others. On Ethernet it is GID 0's and the
  // carrier's; on InfiniBand the IPoIB-style address rdma_cm resolves (the registry's ipoib field:
  // the carrier's own address is another).
  const bool default_ip = link_.ipv4 == 0;
  const bool ipoib = !ethernet();
  so.assign_identity = [&](uint16_t& lid, uint64_t& guid, std::string& why) {
    lid = registry_.register_host(options_.names.host, &why);
    if (lid == 0) return false;
    if (default_ip) {
      const uint32_t fallback = loopback_host_ipv4(::geteuid(), options_.names.fabric, lid);
      const uint32_t ip_be =
          registry_.claim_ipv4(options_.names.host, htonl(default_host_ipv4()), htonl(fallback), ipoib);
      if (ip_be == 0) {
        why = "cannot record the host's address in " + registry_.path() + ": " + std::strerror(errno);
        return false;
      }
      link_.ipv4 = ntohl(ip_be);
      link_.netdev_mtu = interface_mtu_of(link_.ipv4);
    } else {
      // An address given (SOFTHCA_IP / --ip) is recorded too, for whoever names this host by it
      // (softhca hosts, rdma_cm; docs/addresses.md).
      (void)registry_.claim_ipv4(options_.names.host, htonl(link_.ipv4), htonl(link_.ipv4), ipoib);
    }
    guid = config_for(lid).caps.node_guid;
    if (options_.udp && !ethernet()) open_udp(true);
    return true;
  };
  segment_ = HostSegment::attach(so, error);
  if (segment_ == nullptr) return false;
  segment_path_ = segment_->path();
  if (default_ip && link_.ipv4 == 0) {
    const std::optional<HostAddress> h = registry_.find_by_name(options_.names.host);
    // An InfiniBand host's address is for rdma_cm alone: one a registry of an older softhca never
    // recorded leaves rdma_cm the IPoIB-style default (verbs/cm_support.cc), the device unchanged.
    const uint32_t ip_be = !h ? 0 : ipoib ? h->ipoib_be : h->ipv4_be;
    if (ip_be == 0 && !ipoib) {
      error = "host " + options_.names.host + " has no address in " + registry_.path();
      segment_->detach(false);
      return false;
    }
    link_.ipv4 = ntohl(ip_be);
    link_.netdev_mtu = interface_mtu_of(link_.ipv4);
  }
  config_ = config_for(segment_->lid());
  config_.seed = seed;
  if (faults.any()) {
    // Each process of the host its own random streams, named by host and slot, so a run of the
    // same processes started in the same order sees the same faults.
    faults_ = std::make_unique<fabric::FaultInjector>(
        faults, ethernet() ? fabric::WireFormat::kRoceIpv4 : fabric::WireFormat::kNativeIb,
        "port/" + options_.names.host + "/slot" + std::to_string(segment_->my_slot()));
  }
  if (options_.udp && !ethernet() && !segment_->formatted()) open_udp(false);

  const uint32_t me = segment_->my_slot();
  HostSegment* seg = segment_.get();
  auto* mine = static_cast<SlotData*>(seg->slot_data(me));
  publisher_ = std::make_unique<MemoryPublisher>(mine->ranges, me);
  peers_ = std::make_unique<PeerMemory>(
      me,
      [seg](uint32_t s) {
        return seg->pid_of(s) != 0 ? &static_cast<const SlotData*>(seg->slot_data(s))->ranges : nullptr;
      },
      [seg](uint32_t s) { return seg->pid_of(s); });
  irq_ = std::make_unique<IrqSockets>(seg->instance(), me, seg->start_time_of(me),
                                      [seg](uint32_t s) { return seg->start_time_of(s); });
  kernel_ = std::make_unique<SharedKernel>(*publisher_, *irq_);
  bridge_ = std::make_unique<SharedBridge>(*peers_, *irq_);
  if (!make_device(error)) {
    segment_->detach(false);
    return false;
  }
  // After make_device, which refuses a process whose link differs from the host's.
  if (options_.udp && ethernet()) {
    if (const int err = open_roce_carrier(); err != 0) {
      error = "cannot bind the RoCEv2 carrier to " + ipv4_to_string(link_.ipv4) + ":" +
              std::to_string(link_.roce_port) + ": " + std::strerror(err) +
              " (SOFTHCA_IP must be an address of this machine; SOFTHCA_ROCE_PORT may change the port)";
      device_.reset();
      segment_->detach(false, [this] { registry_.remove_host(options_.names.host); });
      return false;
    }
  }
  // Attached for good: count where `softhca stats --live` reads.
  counters_.count_into(mine->pcie);
  host_port_ = std::make_unique<pcie::HostPort>(static_cast<hwif::MmioTarget&>(*this), static_cast<pcie::TlpSink&>(*this),
                                                device_->config().pcie);
  loopback_.attach(segment_->lid(), static_cast<fabric::PacketReceiver*>(this));
  if (udp_) gate_ = make_gate();
  agent_ = std::thread([this] { agent_loop(); });
  if (udp_) receiver_ = std::thread([this] { receive_loop(); });
  // Return only once both threads run their loops: a thread still starting allocates (its
  // attributes, its sanitizer state), and a fork() meanwhile would leave the child an allocator
  // lock nobody releases.
  std::unique_lock<std::mutex> lk(agent_mu_);
  agent_cv_.wait(lk, [&] { return threads_running_ == (udp_ ? 2 : 1); });
  return true;
}

// The device object of this process over the shared region: formatted when this process created
// the host (the device lock is then already held), attached otherwise.
bool SharedRuntime::Impl::make_device(std::string& error) {
  const hca::DeviceRegion region{segment_->device_region(), segment_->device_bytes()};
  const bool fresh = segment_->formatted();
  device_entered();
  struct Exited {
    ~Exited() { device_exited(); }
  } exited;
  if (!fresh) segment_->lock_device();  // EOWNERDEAD or not, the sweep below runs
  try {
    device_ = std::make_unique<hca::Device>(config_, region, fresh ? hca::RegionInit::kFormat : hca::RegionInit::kAttach,
                                            static_cast<pcie::TlpSink&>(*this), static_cast<hca::PacketPort&>(*this),
                                            static_cast<hca::EngineClock&>(*this), *bridge_);
  } catch (const std::exception& e) {
    segment_->unlock_device();
    error = segment_->path() + ": " + e.what();
    return false;
  }
  // Same-host packets loop back inside the device, never serialised, unless a capture wants
  // their bytes or faults are on: then they take the wire (transmit() below), the faulty link and
  // the loopback carrier.
  device_->set_internal_loopback(options_.packet_tap == nullptr && faults_ == nullptr);
  sweep_locked();  // dead processes' objects go before we start (and after an EOWNERDEAD)
  segment_->unlock_device();
  return true;
}

// Receive buffer of a host's UDP socket. The kernel default (net.core.rmem_default, 208 KiB) holds
// ~50 packets of a 4 KiB MTU: a burst of 16 64-KiB WRITEs (256 packets) overflowed it, every lost
// packet cost a go-back-N resend of the window, and 64 KiB writes between two hosts ran at 0.01 GB/s.
// The kernel caps the request at net.core.rmem_max (4 MiB on our machines); what it grants is
// enough either way: the carrier works with the default too, only slower.
constexpr int kUdpRcvbufBytes = 8 << 20;

// The UDP carrier to other hosts: the host's first process binds an ephemeral port on 127.0.0.1
// and publishes it in the registry; later processes bind the same port (SO_REUSEPORT: whichever
// receives a packet runs the shared device with it).
bool SharedRuntime::Impl::open_udp(bool formatting) {
  fabric::UdpCarrierOptions o;
  o.mode = fabric::CarrierMode::kNativeIb;
  o.reuse_port = true;
  o.rcvbuf_bytes = kUdpRcvbufBytes;
  if (!formatting) {
    if (auto h = registry_.find_by_name(options_.names.host); h && h->udp_port != 0) o.bind.port = h->udp_port;
  }
  auto udp = std::make_unique<fabric::UdpCarrier>();
  if (!udp->open(o).is_ok() && (o.bind.port == 0 || !udp->open(fabric::UdpCarrierOptions{o.mode, {fabric::kIpv4Loopback, 0}, true, kUdpRcvbufBytes}).is_ok())) {
    std::fprintf(stderr, "softhca: host %s: no UDP carrier; packets to other hosts are dropped\n",
                 options_.names.host.c_str());
    return false;
  }
  if (o.bind.port != udp->local().port) {
    registry_.set_address(options_.names.host, htonl(udp->local().ip), udp->local().port);
  }
  udp_ = std::move(udp);
  return true;
}

// Ethernet: every process of the host binds <host ip>:<roce port> (SO_REUSEPORT), so a datagram
// from another host reaches whichever process the kernel picks and runs the shared device there.
int SharedRuntime::Impl::open_roce_carrier() {
  fabric::UdpCarrierOptions o;
  o.mode = fabric::CarrierMode::kRoceV2;
  o.bind = fabric::Ipv4Endpoint{link_.ipv4, link_.roce_port};
  o.reuse_port = true;
  o.rcvbuf_bytes = kUdpRcvbufBytes;
  auto udp = std::make_unique<fabric::UdpCarrier>();
  if (const Status st = udp->open(o); !st.is_ok()) return st.err();
  udp_ = std::move(udp);
  return 0;
}

std::unique_ptr<fabric::CarrierGate> SharedRuntime::Impl::make_gate() {
  if (ethernet()) return std::make_unique<fabric::CarrierGate>(fabric::CarrierMode::kRoceV2, link_.roce_port, nullptr);
  return std::make_unique<fabric::CarrierGate>(
      fabric::CarrierMode::kNativeIb, 0, [this](uint16_t lid) -> std::optional<fabric::Ipv4Endpoint> {
        const std::optional<HostAddress> h = registry_.find_by_lid(lid);
        if (!h || h->udp_port == 0 || h->ipv4_be == 0) return std::nullopt;
        return fabric::Ipv4Endpoint{ntohl(h->ipv4_be), h->udp_port};
      });
}

void SharedRuntime::Impl::stop_threads() {
  {
    std::lock_guard<std::mutex> g(agent_mu_);
    stop_ = true;
  }
  agent_cv_.notify_all();
  if (agent_.joinable()) agent_.join();
  if (udp_) udp_->stop();
  if (receiver_.joinable()) receiver_.join();
}

void SharedRuntime::Impl::detach() {
  if (::getpid() != pid_ || segment_ == nullptr) return;  // a fork child has no threads and no slot
  if (detaching_.exchange(true)) return;
  stop_threads();
  if (device_ != nullptr) {
    Entry e(*this);
    device_->reclaim(segment_->my_slot());
    detached_ = true;
  }
  // The slot's block is zeroed and may go to another process: keep this process's counts here.
  pcie_at_detach_ = counters_.snapshot();
  counters_.count_into_own();
  const std::string host = options_.names.host;
  segment_->detach(false, [this, &host] { registry_.remove_host(host); });
}

SharedRuntime::Impl::~Impl() {
  detach();
  host_port_.reset();
  device_.reset();  // before the segment is unmapped
}

// ---- liveness -----------------------------------------------------------------------------------

// Under the device lock: destroys the objects of every slot whose process is gone, forgets its
// memory and frees the slot. Also drops cached carrier addresses (a host may have restarted).
uint32_t SharedRuntime::Impl::sweep_locked() {
  uint32_t n = 0;
  for (uint32_t s = 1; s <= kMaxSlots; ++s) {
    if (s == segment_->my_slot() || !segment_->slot_dead(s)) continue;
    if (device_ != nullptr) device_->reclaim(s);
    peers_->forget(s);
    if (segment_->free_dead_slot(s)) ++n;
  }
  routes_.clear();
  if (gate_ != nullptr) gate_->forget();
  return n;
}

bool SharedRuntime::Impl::any_dead_slot() const {
  for (uint32_t s = 1; s <= kMaxSlots; ++s) {
    if (s != segment_->my_slot() && segment_->slot_dead(s)) return true;
  }
  return false;
}

uint32_t SharedRuntime::Impl::sweep() {
  Entry e(*this);
  return sweep_locked();
}

// ---- device entries -------------------------------------------------------------------------------

void SharedRuntime::Impl::mmio_write(uint64_t bar_offset, const void* data, size_t len) {
  if (fork_generation() != fork_generation_) return;
  Entry e(*this);
  if (detached_) return;
  device_->mmio_write(bar_offset, data, len);
  drain_wire();
}

void SharedRuntime::Impl::mmio_read(uint64_t bar_offset, void* dst, size_t len) {
  if (fork_generation() != fork_generation_) return MmioTarget::mmio_read(bar_offset, dst, len);
  Entry e(*this);
  if (detached_) return MmioTarget::mmio_read(bar_offset, dst, len);
  device_->mmio_read(bar_offset, dst, len);
}

int SharedRuntime::Impl::execute(hwif::CmdOpcode op, const void* in, size_t in_len, void* out, size_t out_len) {
  if (fork_generation() != fork_generation_) return EIO;
  Entry e(*this);
  if (detached_) return EIO;
  device_->set_owner(segment_->my_slot());
  const int err = device_->execute(op, in, in_len, out, out_len);
  drain_wire();
  return err;
}

void SharedRuntime::Impl::run_timers(Picoseconds now) {
  Entry e(*this);
  if (detached_) return;
  device_->on_timer(now);
  drain_wire();
}

uint32_t SharedRuntime::Impl::acquire_uar() {
  Entry e(*this);
  const int uar = segment_->acquire_uar(config_.caps.num_uars);
  // All taken: share page 0 (doorbells carry the QPN; BlueFlame writes of two processes on one
  // page would then interleave, so a driver should not rely on BlueFlame there).
  return uar < 0 ? 0 : static_cast<uint32_t>(uar);
}

void SharedRuntime::Impl::release_uar(uint32_t uar_index) {
  Entry e(*this);
  segment_->release_uar(uar_index);
}

hca::Device::ObjectCounts SharedRuntime::Impl::object_counts() {
  Entry e(*this);
  return device_->object_counts();
}

hca::DeviceStats SharedRuntime::Impl::packet_stats() {
  Entry e(*this);
  return device_->stats();
}

// ---- the wire ---------------------------------------------------------------------------------------

void SharedRuntime::Impl::on_tlp(const pcie::Tlp& tlp) {
  counters_.on_tlp(tlp);
  if (options_.tlp_tap != nullptr) options_.tlp_tap->on_tlp(seq_.fetch_add(1, std::memory_order_relaxed), 0, tlp);
}

// Under the device lock. Our own LID loops back (delivered by the drain that ends this entry);
// anything else leaves the host.
void SharedRuntime::Impl::transmit(std::span<const uint8_t> packet) {
  if (options_.packet_tap != nullptr) {
    options_.packet_tap->on_packet(seq_.fetch_add(1, std::memory_order_relaxed), 0, PacketDirection::kSent, packet);
  }
  if (faults_ == nullptr) return route(packet);
  faults_->send(packet, now(), [this](std::span<const uint8_t> p) { route(p); });
  if (const Picoseconds due = faults_->next_due(); due != Picoseconds::max()) request_wakeup(due);
}

// Under the device lock. The agent's wake-up is asked for again every time: it keeps one pending
// wake-up and forgets it once it fires for an earlier deadline.
void SharedRuntime::Impl::release_faults() {
  if (faults_ == nullptr || faults_->held() == 0) return;
  faults_->release(now(), [this](std::span<const uint8_t> p) { route(p); });
  if (const Picoseconds due = faults_->next_due(); due != Picoseconds::max()) request_wakeup(due);
}

// Under the device lock.
void SharedRuntime::Impl::route(std::span<const uint8_t> packet) {
  if (ethernet()) {
    const uint32_t dst = ipv4_destination(packet);
    if ((dst >> 28) == 0xe) {
      // IPv4 multicast (224.0.0.0/4): a copy for this host's attached QPs and one to every other
      // host of the fabric, as a switch floods a group no snooping has pruned.
      queue_roce_loopback(packet);
      for (const HostAddress& h : registry_.hosts()) {
        if (h.host == options_.names.host || h.ipv4_be == 0) continue;
        if (udp_ != nullptr &&
            udp_->send_to_member(fabric::Ipv4Endpoint{ntohl(h.ipv4_be), link_.roce_port}, packet).is_ok()) {
          to_other_.fetch_add(1, std::memory_order_relaxed);
        } else {
          unroutable_.fetch_add(1, std::memory_order_relaxed);
        }
      }
      return;
    }
    if (dst == link_.ipv4) {
      queue_roce_loopback(packet);
    } else if (udp_ == nullptr || !udp_->send(fabric::Ipv4Endpoint{dst, link_.roce_port}, packet).is_ok()) {
      unroutable_.fetch_add(1, std::memory_order_relaxed);
    } else {
      to_other_.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  const uint16_t dlid = lrh_dlid(packet);
  if (dlid >= 0xc000 && dlid != 0xffff) {
    // A multicast LID (IBA 4.1.3): this host and every other host of the fabric get a copy.
    loopback_.send(packet);
    for (const HostAddress& h : registry_.hosts()) {
      if (h.lid != segment_->lid()) send_off_host(h.lid, packet);
    }
    return;
  }
  if (dlid == segment_->lid()) {
    loopback_.send(packet);
  } else {
    send_off_host(dlid, packet);
  }
}

// Under the device lock.
void SharedRuntime::Impl::queue_roce_loopback(std::span<const uint8_t> packet) {
  if (roce_loop_count_ == roce_loop_.size()) {
    // Full: grow, keeping the order (the queue restarts at slot 0).
    std::vector<std::vector<uint8_t>> grown(roce_loop_.empty() ? 64 : roce_loop_.size() * 2);
    for (size_t i = 0; i < roce_loop_count_; ++i) {
      grown[i] = std::move(roce_loop_[(roce_loop_head_ + i) % roce_loop_.size()]);
    }
    roce_loop_ = std::move(grown);
    roce_loop_head_ = 0;
  }
  roce_loop_[(roce_loop_head_ + roce_loop_count_) % roce_loop_.size()].assign(packet.begin(), packet.end());
  ++roce_loop_count_;
}

// Under the device lock. A delivery may send more (ACKs, READ responses): they join the queues and
// this loop delivers them too. The packet is copied out first, as the queue may grow meanwhile.
void SharedRuntime::Impl::drain_wire() {
  release_faults();
  do {
    loopback_.drain();
    while (roce_loop_count_ > 0) {
      roce_current_.swap(roce_loop_[roce_loop_head_]);
      roce_loop_head_ = (roce_loop_head_ + 1) % roce_loop_.size();
      --roce_loop_count_;
      deliver(roce_current_);
    }
  } while (roce_loop_count_ > 0);
}

void SharedRuntime::Impl::deliver(std::span<const uint8_t> packet) {
  if (options_.packet_tap != nullptr) {
    options_.packet_tap->on_packet(seq_.fetch_add(1, std::memory_order_relaxed), 0, PacketDirection::kReceived, packet);
  }
  device_->receive(packet);
}

void SharedRuntime::Impl::send_off_host(uint16_t dlid, std::span<const uint8_t> packet) {
  if (udp_ == nullptr) {
    unroutable_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto it = routes_.find(dlid);
  if (it == routes_.end()) {
    const auto h = registry_.find_by_lid(dlid);
    if (!h || h->udp_port == 0 || h->ipv4_be == 0) {
      unroutable_.fetch_add(1, std::memory_order_relaxed);  // no such host (yet): lost on the wire
      return;
    }
    it = routes_.emplace(dlid, fabric::Ipv4Endpoint{ntohl(h->ipv4_be), h->udp_port}).first;
  }
  if (udp_->send(it->second, packet).is_ok()) {
    to_other_.fetch_add(1, std::memory_order_relaxed);
  } else {
    unroutable_.fetch_add(1, std::memory_order_relaxed);
  }
}

void SharedRuntime::Impl::receive_loop() {
  const fabric::UdpCarrier::Callback on_datagram = [this](const fabric::Datagram& d) {
    if (!gate_->admits(d)) return;  // not from a host of the fabric: counted, never near the device
    Entry e(*this);
    if (detached_) return;
    from_other_.fetch_add(1, std::memory_order_relaxed);
    deliver(d.bytes);
    drain_wire();
  };
  {
    std::lock_guard<std::mutex> g(agent_mu_);
    ++threads_running_;
  }
  agent_cv_.notify_all();
  for (;;) {
    const fabric::ReceiveResult r = udp_->receive(std::chrono::milliseconds(-1), on_datagram);
    std::lock_guard<std::mutex> g(agent_mu_);
    if (stop_) return;
    if (r.err != 0) {  // a broken socket would fail again at once: stop receiving, say why
      std::fprintf(stderr, "softhca: host %s: the UDP carrier failed (%s); packets from other hosts are lost\n",
                   options_.names.host.c_str(), std::strerror(r.err));
      return;
    }
  }
}

// ---- the agent: timers and the liveness sweep ---------------------------------------------------

Picoseconds SharedRuntime::Impl::now() {
  return std::chrono::duration_cast<Picoseconds>(std::chrono::nanoseconds(monotonic_ns() - segment_->epoch_ns()));
}

int64_t SharedRuntime::Impl::wall_clock_ns(Picoseconds t) {
  const int64_t wall_now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return wall_now - (now() - t).count() / 1000;
}

void SharedRuntime::Impl::request_wakeup(Picoseconds at) {
  {
    std::lock_guard<std::mutex> g(agent_mu_);
    if (at >= next_timer_) return;
    next_timer_ = at;
  }
  agent_cv_.notify_all();
}

// Sleeps until the earliest timer this process asked for or the next sweep. Every sweep also runs
// the device's due timers: deadlines another process asked its own agent for are covered even when
// that process is gone.
void SharedRuntime::Impl::agent_loop() {
  std::unique_lock<std::mutex> lk(agent_mu_);
  ++threads_running_;
  agent_cv_.notify_all();
  Picoseconds next_sweep = now() + kSweepPeriod;
  while (!stop_) {
    const Picoseconds t = now();
    const Picoseconds wake = std::min(next_timer_, next_sweep);
    if (wake > t) {
      const auto at = std::chrono::steady_clock::time_point(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::nanoseconds(segment_->epoch_ns()) + std::chrono::duration_cast<std::chrono::nanoseconds>(wake)));
      agent_cv_.wait_until(lk, at);
      continue;
    }
    if (next_timer_ <= t) next_timer_ = Picoseconds::max();
    const bool sweeping = next_sweep <= t;
    if (sweeping) next_sweep = t + kSweepPeriod;
    lk.unlock();
    // Liveness is read from /proc without the device lock; the lock is for reclaiming only.
    const bool reclaim = sweeping && any_dead_slot();
    {
      Entry e(*this);
      if (!detached_) {
        if (reclaim) sweep_locked();
        if (sweeping) {
          routes_.clear();  // a host that restarted has a new carrier address
          if (gate_ != nullptr) gate_->forget();
        }
        device_->on_timer(t);
        drain_wire();
      }
    }
    lk.lock();
  }
}

// ---- stats ----------------------------------------------------------------------------------------

void SharedRuntime::Impl::dump_stats(const std::string& path) {
  hca::DeviceStats s;
  nlohmann::json qps;
  {
    Entry e(*this);
    s = device_->stats();
    qps = qp_stats_json(device_->region());
  }
  // PCIe counters are this process's; packet counters are the host device's (all its processes).
  nlohmann::json dev = {{"device", name_},
                        {"host", options_.names.host},
                        {"fabric", options_.names.fabric},
                        {"slot", segment_->my_slot()},
                        {"pcie", nlohmann::json::parse(pcie_at_detach_.value_or(counters_.snapshot()).to_json())},
                        {"packets", packet_stats_json(s)},
                        {"qps", std::move(qps)},
                        {"carrier",
                         {{"to_other_hosts", to_other_.load()},
                          {"from_other_hosts", from_other_.load()},
                          {"unroutable", unroutable_.load()},
                          {"dropped_foreign", refused_at_carrier()}}}};
  if (faults_ != nullptr) {
    fabric::FaultCounters c;
    {
      Entry e(*this);
      c = faults_->counters();
    }
    nlohmann::json& j = dev["faults"];  // this process's port
    for_each_counter(c, [&j](std::string_view name, uint64_t v) { j[std::string(name)] = v; });
  }
  write_stats_dump(path, nlohmann::json{{"devices", nlohmann::json::array({dev})}});
}

// ---- SharedRuntime ----------------------------------------------------------------------------------

std::unique_ptr<SharedRuntime> SharedRuntime::create(const SharedRuntimeOptions& options, std::string& error) {
  auto impl = std::make_unique<Impl>(options);
  if (!impl->attach(error)) return nullptr;
  return std::unique_ptr<SharedRuntime>(new SharedRuntime(std::move(impl)));
}

SharedRuntime::SharedRuntime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SharedRuntime::~SharedRuntime() = default;

// In a fork child the attachment made before the fork is the parent's: its slot, threads and
// objects. The child's first look at the devices attaches it to the host anew, with a slot of its
// own (rdma-core lets a child open devices and create objects of its own); the parent's attachment
// is kept, never destroyed (its threads are not the child's), and keeps refusing the entries of
// contexts the parent opened.
std::span<DeviceSlot* const> SharedRuntime::devices() {
  if (!impl_->inherited()) return impl_->slots_;
  std::lock_guard<std::mutex> g(child_mu_);
  if (impl_->inherited()) {
    auto child = std::make_unique<Impl>(impl_->options());
    std::string error;
    if (child->attach(error)) {
      [[maybe_unused]] Impl* parents = impl_.release();  // leaked on purpose, see above
      impl_ = std::move(child);
    } else {
      std::fprintf(stderr, "softhca: fork child cannot attach host %s: %s; it keeps its parent's refused device\n",
                   impl_->options().names.host.c_str(), error.c_str());
    }
  }
  return impl_->slots_;
}
void SharedRuntime::dump_stats(const std::string& path) { impl_->dump_stats(path); }
void SharedRuntime::run_timers(Picoseconds now) { impl_->run_timers(now); }
void SharedRuntime::detach() { impl_->detach(); }
uint32_t SharedRuntime::sweep() { return impl_->sweep(); }
uint32_t SharedRuntime::slot() const { return impl_->slot(); }
uint16_t SharedRuntime::lid() const { return impl_->lid(); }
const std::string& SharedRuntime::segment_path() const { return impl_->segment_path_; }
uint64_t SharedRuntime::packets_unroutable() const { return impl_->unroutable_.load(); }
uint64_t SharedRuntime::packets_to_other_hosts() const { return impl_->to_other_.load(); }
uint64_t SharedRuntime::packets_from_other_hosts() const { return impl_->from_other_.load(); }
hca::Device::ObjectCounts SharedRuntime::object_counts() { return impl_->object_counts(); }
hca::DeviceStats SharedRuntime::packet_stats() { return impl_->packet_stats(); }
uint64_t SharedRuntime::packets_refused_at_carrier() const { return impl_->refused_at_carrier(); }

}  // namespace softhca::runtime
