#include "hca/device_state.h"

#include <sys/mman.h>

#include <new>
#include <stdexcept>
#include <string>

#include "hca/queue_objects.h"
#include "sim/random_stream.h"

namespace softhca::hca {

namespace {
constexpr uint64_t kSlotAlign = 64;  // slot arrays start on a cache line

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

struct Layout {
  uint64_t pds, mkeys, eqs, cqs, srqs, qps, xrcds, dms;  // slot array offsets
  uint64_t dm_window;  // the device memory window (page aligned)
  uint64_t end;
};

Layout layout_of(const DeviceConfig& config) {
  const hwif::DeviceCaps& c = config.caps;
  Layout l{};
  uint64_t at = align_up(sizeof(DeviceState), kSlotAlign);
  auto place = [&](uint64_t& field, uint32_t capacity) {
    field = at;
    at = align_up(at + uint64_t{capacity} * sizeof(TableSlot), kSlotAlign);
  };
  place(l.pds, c.max_pd);
  place(l.mkeys, c.max_mr);
  place(l.eqs, kMaxEqs);
  place(l.cqs, c.max_cq);
  place(l.srqs, c.max_srq);
  place(l.qps, c.max_qp);
  place(l.xrcds, kMaxXrcds);
  place(l.dms, kMaxDmPages);
  if (c.max_dm_size % hwif::kDmPageBytes != 0 || c.max_dm_size > kMaxDmPages * hwif::kDmPageBytes)
    throw std::invalid_argument("hca::Device: max_dm_size must be whole pages, 256 KiB at most");
  l.dm_window = align_up(at, hwif::kDmPageBytes);
  at = l.dm_window + c.max_dm_size;
  l.end = align_up(at, kSlotAlign);
  return l;
}

// The device's first QPN, from its seed (kFirstQpn).
uint32_t first_qpn(const DeviceConfig& config) {
  const uint32_t max_qp = config.caps.max_qp;
  if (max_qp > kQpnLimit - kFirstQpn) throw std::invalid_argument("hca::Device: max_qp must leave room in 24 bits");
  sim::RandomStream random = sim::RandomStream::for_component(config.seed, "hca/qpns");
  return static_cast<uint32_t>(random.between(kFirstQpn, kQpnLimit - max_qp));
}

void format(DeviceState& s, const DeviceRegion& region, const DeviceConfig& config) {
  const Layout l = layout_of(config);
  const hwif::DeviceCaps& c = config.caps;
  s = DeviceState{};
  s.region_bytes = region.size;
  s.link_layer = static_cast<uint8_t>(config.port.link_layer);
  s.roce_udp_port = config.roce_udp_port;
  s.ipv4 = config.ipv4;
  ObjectTable<uint32_t>::format(s.pds, kFirstNumber, c.max_pd, l.pds);
  MemoryKeys::format(s.mkeys, c.max_mr, l.mkeys, config.seed);
  ObjectTable<EventQueue>::format(s.eqs, kFirstNumber, kMaxEqs, l.eqs);
  ObjectTable<CompletionQueue>::format(s.cqs, kFirstNumber, c.max_cq, l.cqs);
  ObjectTable<SharedReceiveQueue>::format(s.srqs, kFirstNumber, c.max_srq, l.srqs);
  ObjectTable<QueuePair>::format(s.qps, first_qpn(config), c.max_qp, l.qps);
  ObjectTable<XrcDomain>::format(s.xrcds, kFirstNumber, kMaxXrcds, l.xrcds);
  ObjectTable<DeviceMemory>::format(s.dm.table, kFirstNumber, kMaxDmPages, l.dms);
  s.dm.window = l.dm_window;
  s.dm.bytes = c.max_dm_size;
  RegionHeap::format(s.heap, l.end, region.size);
  s.version = DeviceState::kVersion;
  s.magic = DeviceState::kMagic;  // last: a region with the magic is whole
}

bool matches(const DeviceState& s, const DeviceRegion& region, const DeviceConfig& config) {
  const hwif::DeviceCaps& c = config.caps;
  return s.magic == DeviceState::kMagic && s.version == DeviceState::kVersion && s.region_bytes == region.size &&
         s.pds.capacity == c.max_pd && s.mkeys.table.capacity == c.max_mr && s.cqs.capacity == c.max_cq &&
         s.srqs.capacity == c.max_srq && s.qps.capacity == c.max_qp && s.eqs.capacity == kMaxEqs &&
         s.xrcds.capacity == kMaxXrcds && s.dm.bytes == c.max_dm_size;
}

// "InfiniBand" or "Ethernet (RoCEv2 from a.b.c.d, UDP port p)".
std::string describe_link(uint8_t link_layer, uint32_t ipv4, uint16_t port) {
  if (link_layer != static_cast<uint8_t>(hwif::LinkLayer::kEthernet)) return "InfiniBand";
  return "Ethernet (RoCEv2 from " + std::to_string(ipv4 >> 24) + "." + std::to_string((ipv4 >> 16) & 0xff) + "." +
         std::to_string((ipv4 >> 8) & 0xff) + "." + std::to_string(ipv4 & 0xff) + ", UDP port " +
         std::to_string(port) + ")";
}

// Throws when the region's port runs another link than config asks for.
void check_link(const DeviceState& s, const DeviceConfig& config) {
  const bool ethernet = config.port.link_layer == hwif::LinkLayer::kEthernet;
  const bool same = s.link_layer == static_cast<uint8_t>(config.port.link_layer) &&
                    (!ethernet || (s.ipv4 == config.ipv4 && s.roce_udp_port == config.roce_udp_port));
  if (same) return;
  throw std::invalid_argument("hca::Device: the host's port is " + describe_link(s.link_layer, s.ipv4, s.roce_udp_port) +
                              " but this process asks for " +
                              describe_link(static_cast<uint8_t>(config.port.link_layer), config.ipv4,
                                            config.roce_udp_port) +
                              " (every process of a host needs the same SOFTHCA_LINK, SOFTHCA_IP and "
                              "SOFTHCA_ROCE_PORT)");
}
}  // namespace

uint64_t region_layout_bytes(const DeviceConfig& config) { return layout_of(config).end; }

DeviceState& open_region(const DeviceRegion& region, RegionInit init, const DeviceConfig& config) {
  if (region.base == nullptr || reinterpret_cast<uintptr_t>(region.base) % kSlotAlign != 0)
    throw std::invalid_argument("hca::Device: region base must be 64-byte aligned");
  if (region.size < region_layout_bytes(config) + kMinHeapBytes)
    throw std::invalid_argument("hca::Device: region smaller than Device::min_region_bytes()");
  auto* s = static_cast<DeviceState*>(region.base);
  if (init == RegionInit::kFormat) {
    format(*new (region.base) DeviceState{}, region, config);
  } else if (!matches(*s, region, config)) {
    throw std::invalid_argument("hca::Device: region not formatted for this device configuration");
  } else {
    check_link(*s, config);
  }
  return *s;
}

PrivateRegion::PrivateRegion(size_t bytes) {
  // MAP_NORESERVE: the region is mostly address space; only pages the device touches are used.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  region_ = DeviceRegion{p, bytes};
}

PrivateRegion::PrivateRegion(PrivateRegion&& other) noexcept : region_(other.region_) { other.region_ = {}; }

PrivateRegion::~PrivateRegion() {
  if (region_.base != nullptr) ::munmap(region_.base, region_.size);
}

}  // namespace softhca::hca
