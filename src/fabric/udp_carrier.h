// The UDP carrier: the wire between hosts (docs/live-mode.md, "Between hosts"). One IPv4 UDP socket
// bound to (ip, port) that sends packets to other hosts' carriers and hands received ones to its
// owner. Two payload modes: whole native IB packets (LRH..VCRC) as the UDP payload, or RoCEv2, where
// the UDP payload is BTH..ICRC and the IPv4 + UDP headers are the kernel's; RoCEv2 sends each flow
// from one of kRoceEntropyPorts source ports (one more socket each). Left out: IPv6, batching with
// sendmmsg/recvmmsg, any retransmission (the IB transport above does that). Sizes in bytes.
//
// Who may call what: send() from any thread, concurrently; receive() from one thread at a time (it
// owns the receive buffer); wake() and stop() from any thread. Counters are relaxed atomics.
#pragma once
#include <atomic>
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>

#include "base/status.h"
#include "fabric/packet/packet.h"
#include "fabric/packet/roce.h"

namespace softhca::fabric {

inline constexpr uint32_t kIpv4Loopback = 0x7f000001;  // 127.0.0.1

struct Ipv4Endpoint {
  uint32_t ip = 0;    // host order, a.b.c.d = a << 24 | ...
  uint16_t port = 0;  // host order
  bool operator==(const Ipv4Endpoint&) const = default;
};

enum class CarrierMode : uint8_t {
  kNativeIb,  // UDP payload = LRH..VCRC, the InfiniBand link layer
  kRoceV2,    // UDP payload = BTH..ICRC; send()/receive() speak whole IPv4 packets (roce.h)
};

struct UdpCarrierOptions {
  CarrierMode mode = CarrierMode::kNativeIb;
  // Port 0: an ephemeral port (read it back with local()). kRoceV2 needs a specific IP (not 0.0.0.0):
  // the receiver rebuilds the IPv4 header with it, and the sender's ICRC must cover the same address.
  Ipv4Endpoint bind{kIpv4Loopback, 0};
  // SO_REUSEPORT: several processes of one host bind the same (ip, port); the kernel hands each
  // datagram to one of them, which can process it because the device state is shared.
  bool reuse_port = false;
  int rcvbuf_bytes = 0;  // SO_RCVBUF; 0 keeps the kernel default
  // kRoceV2: bind the send-only sockets of the entropy source ports kRoceSrcPortMin.. +
  // kRoceEntropyPorts - 1 on the bind address (always SO_REUSEPORT: every process of the host, and
  // any other carrier of the same user on that address, sends from them too; nobody sends to them).
  // A port another program holds is left out: its flows go from the bind port, resealed.
  bool entropy_ports = true;
};

// One received packet, valid only during the callback.
struct Datagram {
  Ipv4Endpoint source;
  Ipv4Endpoint destination;  // from IP_PKTINFO: the address the sender used
  // kNativeIb: the UDP payload, LRH..VCRC. kRoceV2: the IPv4 packet (IPv4 header through ICRC) rebuilt
  // from the addresses, ports, TOS and TTL the datagram arrived with, ready for parse_roce().
  std::span<const uint8_t> bytes;
};

struct ReceiveResult {
  uint32_t delivered = 0;  // datagrams handed to the callback
  bool woken = false;      // wake() or stop() ended the wait
  int err = 0;             // errno of a failed poll/recvmsg (EINTR is not reported), else 0
};

class UdpCarrier {
 public:
  using Callback = std::function<void(const Datagram&)>;

  // At most this many datagrams per receive() call, so a flood cannot keep the owner from its timers.
  static constexpr uint32_t kMaxBatch = 64;

  UdpCarrier() { entropy_fds_.fill(-1); }
  ~UdpCarrier();
  UdpCarrier(const UdpCarrier&) = delete;
  UdpCarrier& operator=(const UdpCarrier&) = delete;

  // Creates the socket and the wake-up eventfd and binds. Errors: EINVAL (already open; kRoceV2 with
  // IP 0.0.0.0), EADDRINUSE, EADDRNOTAVAIL and the other errno values of socket(2)/bind(2)/eventfd(2).
  Status open(const UdpCarrierOptions& options);
  void close();
  [[nodiscard]] bool is_open() const { return fd_ >= 0; }
  [[nodiscard]] Ipv4Endpoint local() const { return local_; }  // the bound endpoint, port resolved
  [[nodiscard]] CarrierMode mode() const { return mode_; }
  // kRoceV2: the UDP source port a packet whose header names src_port leaves with (see send()).
  [[nodiscard]] uint16_t source_port_for(uint16_t src_port) const { return roce_socket_for(src_port).second; }

  // Sends one packet to dest without blocking. kNativeIb: bytes = LRH..VCRC, sent as they are.
  // kRoceV2: bytes = an IPv4 packet from serialize_roce(); its IPv4 + UDP headers are stripped and
  // the kernel builds its own. What the kernel puts there (source = local() address and the socket's
  // port, destination = dest, identification 0, DF) must be what the ICRC covered. A source port of
  // the entropy range (other than local()'s) goes out from the socket of entropy port kRoceSrcPortMin
  // + (port - kRoceSrcPortMin) % kRoceEntropyPorts when that one is open, any other from local(); when the packet's addresses or ports
  // then differ from the datagram's they are patched in a copy and the ICRC recomputed, counted in
  // resealed(). TOS goes out as per-packet IP_TOS; TTL is the kernel's (the route's hop limit), as
  // Linux RoCE sends it, except to an IPv4 multicast group, where the header's goes as IP_TTL (both
  // are masked in the ICRC; they carry the GRH TClass and HopLmt).
  // Errors: EBADF (not open), EINVAL (bytes not a packet of this mode's size limits; kRoceV2: not an
  // IPv4/UDP packet with consistent lengths), EAGAIN (socket buffer full: the packet is lost, as on a
  // congested wire), EMSGSIZE (larger than the path MTU: DF forbids fragmenting), others of sendmsg(2).
  Status send(Ipv4Endpoint dest, std::span<const uint8_t> bytes);
  // kRoceV2: one member's copy of a packet to an IPv4 multicast group, sent to `member` as a
  // unicast datagram (the carrier floods a group to the fabric's hosts, runtime/shared_runtime.cc).
  // Its ICRC keeps covering the group as the destination, as on a real wire; the member's device,
  // which rebuilds its own address there, tries its groups' (hca/device_wire.cc).
  Status send_to_member(Ipv4Endpoint member, std::span<const uint8_t> bytes);

  // Waits up to timeout (0: do not wait; negative: no limit) for datagrams or a wake-up, then hands
  // each waiting datagram (up to kMaxBatch) to fn. Short and oversize datagrams are dropped and
  // counted. After stop(), returns at once with woken set until the carrier is reopened.
  ReceiveResult receive(std::chrono::milliseconds timeout, const Callback& fn);

  // Ends the current (or next) wait of receive() once. Async-signal-safe (one eventfd write).
  void wake();
  // Ends every wait of receive() from now on: for an owner thread that is shutting down.
  void stop();

  // Counters since open().
  [[nodiscard]] uint64_t sent() const { return sent_.load(std::memory_order_relaxed); }
  [[nodiscard]] uint64_t send_errors() const { return send_errors_.load(std::memory_order_relaxed); }
  [[nodiscard]] uint64_t resealed() const { return resealed_.load(std::memory_order_relaxed); }
  [[nodiscard]] uint64_t received() const { return received_.load(std::memory_order_relaxed); }
  [[nodiscard]] uint64_t dropped_short() const { return dropped_short_.load(std::memory_order_relaxed); }
  [[nodiscard]] uint64_t dropped_oversize() const { return dropped_oversize_.load(std::memory_order_relaxed); }

 private:
  Status configure_socket(const UdpCarrierOptions& options);
  Status send_roce(Ipv4Endpoint dest, std::span<const uint8_t> ipv4_packet);
  // send_roce() with header_dst as the destination its ICRC covers (send_to_member()).
  Status send_roce_as(Ipv4Endpoint dest, uint32_t header_dst, std::span<const uint8_t> ipv4_packet);
  Status send_datagram(int fd, Ipv4Endpoint dest, std::span<const uint8_t> payload, int tos, int ttl);
  void open_entropy_sockets();
  // The socket a RoCEv2 packet with this UDP source port goes out from, and that socket's port.
  [[nodiscard]] std::pair<int, uint16_t> roce_socket_for(uint16_t src_port) const;
  enum class RxOutcome : uint8_t { kNone, kDropped, kDelivered };
  // Reads one datagram and delivers or drops it; kNone when none is waiting (an error goes to err).
  RxOutcome receive_one(const Callback& fn, int& err);
  [[nodiscard]] size_t max_payload() const;
  [[nodiscard]] size_t min_payload() const;

  int fd_ = -1;
  int wake_fd_ = -1;
  std::array<int, kRoceEntropyPorts> entropy_fds_{};  // -1: not open (another program has the port)
  CarrierMode mode_ = CarrierMode::kNativeIb;
  Ipv4Endpoint local_;
  std::atomic<bool> stopping_{false};
  // Receive buffer: room for the rebuilt IPv4 + UDP headers, then the largest UDP payload either mode
  // accepts. A datagram that does not fit is reported by MSG_TRUNC and dropped as oversize.
  alignas(64) std::array<uint8_t, kRoceEncapBytes + kMaxPacketBytes> rx_{};

  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> send_errors_{0};
  std::atomic<uint64_t> resealed_{0};
  std::atomic<uint64_t> received_{0};
  std::atomic<uint64_t> dropped_short_{0};
  std::atomic<uint64_t> dropped_oversize_{0};
};

}  // namespace softhca::fabric
