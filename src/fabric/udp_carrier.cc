#include "fabric/udp_carrier.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace softhca::fabric {
namespace {

// Smallest native packet: LRH, BTH, ICRC, VCRC (a local zero-byte SEND Only).
constexpr size_t kMinNativeBytes = kLrhBytes + kBthBytes + kIcrcBytes + kVcrcBytes;

sockaddr_in to_sockaddr(Ipv4Endpoint e) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(e.ip);
  a.sin_port = htons(e.port);
  return a;
}

Ipv4Endpoint from_sockaddr(const sockaddr_in& a) { return Ipv4Endpoint{ntohl(a.sin_addr.s_addr), ntohs(a.sin_port)}; }

Status set_int_option(int fd, int level, int name, int value) {
  if (setsockopt(fd, level, name, &value, sizeof(value)) != 0) return Status(errno);
  return Status::ok();
}

uint16_t be16_at(std::span<const uint8_t> p, size_t off) {
  return static_cast<uint16_t>((p[off] << 8) | p[off + 1]);
}
uint32_t be32_at(std::span<const uint8_t> p, size_t off) {
  return (uint32_t{p[off]} << 24) | (uint32_t{p[off + 1]} << 16) | (uint32_t{p[off + 2]} << 8) | p[off + 3];
}

// The parts of a serialize_roce() packet that the kernel rebuilds, read back; nullopt-like `ok` false
// when bytes are not an IPv4/UDP packet with lengths that agree (the carrier refuses those: EINVAL).
struct RoceEncap {
  bool ok = false;
  Ipv4Endpoint src;
  Ipv4Endpoint dst;
  uint8_t tos = 0;
  uint8_t ttl = 0;
};
RoceEncap read_roce_encap(std::span<const uint8_t> p) {
  RoceEncap e;
  if (p.size() < kRoceEncapBytes + kMinRoceUdpPayloadBytes || p.size() > kMaxRocePacketBytes) return e;
  if (p[0] != 0x45 || p[9] != kIpProtocolUdp) return e;  // IPv4 without options; UDP
  if (be16_at(p, 2) != p.size() || be16_at(p, kIpv4HeaderBytes + 4) != p.size() - kIpv4HeaderBytes) return e;
  e.tos = p[1];
  e.ttl = p[8];
  e.src = Ipv4Endpoint{be32_at(p, 12), be16_at(p, kIpv4HeaderBytes)};
  e.dst = Ipv4Endpoint{be32_at(p, 16), be16_at(p, kIpv4HeaderBytes + 2)};
  e.ok = true;
  return e;
}

}  // namespace

UdpCarrier::~UdpCarrier() { close(); }

Status UdpCarrier::open(const UdpCarrierOptions& options) {
  if (is_open()) return Status(EINVAL);
  if (options.mode == CarrierMode::kRoceV2 && options.bind.ip == INADDR_ANY) return Status(EINVAL);
  mode_ = options.mode;
  fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return Status(errno);
  Status st = configure_socket(options);
  if (st.is_ok()) {
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) st = Status(errno);
  }
  if (!st.is_ok()) {
    close();
    return st;
  }
  if (mode_ == CarrierMode::kRoceV2 && options.entropy_ports) open_entropy_sockets();
  stopping_.store(false, std::memory_order_relaxed);
  for (auto* c : {&sent_, &send_errors_, &resealed_, &received_, &dropped_short_, &dropped_oversize_})
    c->store(0, std::memory_order_relaxed);
  return Status::ok();
}

Status UdpCarrier::configure_socket(const UdpCarrierOptions& options) {
  // Path MTU discovery "do": every datagram leaves with DF set and is never fragmented (a packet over
  // the path MTU fails with EMSGSIZE instead). Linux gives a DF datagram of a socket that is not
  // connected IPv4 identification 0 (ip_select_ident_segs: the ID of an atomic datagram, RFC 6864,
  // need not be unique). So the whole IPv4 header the kernel builds is predictable, the one
  // write_roce_encap() writes: the ICRC, which covers the identification and the flags, can be
  // computed over it by the sender and checked over the rebuilt header by the receiver, and a capture
  // of the real wire shows valid RoCEv2. The socket is therefore never connect()ed.
  Status st = set_int_option(fd_, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO);
  // Ancillary data on receive: the destination address (IP_PKTINFO), TOS and TTL, all covered by or
  // carried in the rebuilt RoCEv2 header.
  if (st.is_ok()) st = set_int_option(fd_, IPPROTO_IP, IP_PKTINFO, 1);
  if (st.is_ok()) st = set_int_option(fd_, IPPROTO_IP, IP_RECVTOS, 1);
  if (st.is_ok()) st = set_int_option(fd_, IPPROTO_IP, IP_RECVTTL, 1);
  if (st.is_ok() && options.reuse_port) st = set_int_option(fd_, SOL_SOCKET, SO_REUSEPORT, 1);
  if (st.is_ok() && options.rcvbuf_bytes > 0) st = set_int_option(fd_, SOL_SOCKET, SO_RCVBUF, options.rcvbuf_bytes);
  if (!st.is_ok()) return st;

  const sockaddr_in addr = to_sockaddr(options.bind);
  if (bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) return Status(errno);
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &len) != 0) return Status(errno);
  local_ = from_sockaddr(bound);
  return Status::ok();
}

// Send-only sockets, one per entropy port, configured as the main one for sending (DF: identification
// 0). Nothing is ever received on them; a datagram someone sends there waits in a small buffer until
// close. A port that cannot be bound (another program's) stays -1.
void UdpCarrier::open_entropy_sockets() {
  for (size_t i = 0; i < entropy_fds_.size(); ++i) {
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const sockaddr_in addr = to_sockaddr(Ipv4Endpoint{local_.ip, static_cast<uint16_t>(kRoceSrcPortMin + i)});
    if (!set_int_option(fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO).is_ok() ||
        !set_int_option(fd, SOL_SOCKET, SO_REUSEPORT, 1).is_ok() ||
        bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      continue;
    }
    entropy_fds_[i] = fd;
  }
}

std::pair<int, uint16_t> UdpCarrier::roce_socket_for(uint16_t src_port) const {
  if (src_port != local_.port && src_port >= kRoceSrcPortMin) {
    const size_t i = (src_port - kRoceSrcPortMin) % kRoceEntropyPorts;
    if (entropy_fds_[i] >= 0) return {entropy_fds_[i], static_cast<uint16_t>(kRoceSrcPortMin + i)};
  }
  return {fd_, local_.port};
}

void UdpCarrier::close() {
  if (fd_ >= 0) ::close(fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  for (int& fd : entropy_fds_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  fd_ = -1;
  wake_fd_ = -1;
  local_ = Ipv4Endpoint{};
}

size_t UdpCarrier::max_payload() const {
  return mode_ == CarrierMode::kRoceV2 ? kMaxRoceUdpPayloadBytes : kMaxPacketBytes;
}
size_t UdpCarrier::min_payload() const {
  return mode_ == CarrierMode::kRoceV2 ? kMinRoceUdpPayloadBytes : kMinNativeBytes;
}

Status UdpCarrier::send(Ipv4Endpoint dest, std::span<const uint8_t> bytes) {
  if (!is_open()) return Status(EBADF);
  if (mode_ == CarrierMode::kRoceV2) return send_roce(dest, bytes);
  if (bytes.size() < kMinNativeBytes || bytes.size() > kMaxPacketBytes) {
    send_errors_.fetch_add(1, std::memory_order_relaxed);
    return Status(EINVAL);
  }
  return send_datagram(fd_, dest, bytes, -1, -1);
}

Status UdpCarrier::send_to_member(Ipv4Endpoint member, std::span<const uint8_t> bytes) {
  if (!is_open()) return Status(EBADF);
  if (mode_ != CarrierMode::kRoceV2) return send(member, bytes);
  const RoceEncap e = read_roce_encap(bytes);
  if (!e.ok) {
    send_errors_.fetch_add(1, std::memory_order_relaxed);
    return Status(EINVAL);
  }
  return send_roce_as(member, e.dst.ip, bytes);
}

Status UdpCarrier::send_roce(Ipv4Endpoint dest, std::span<const uint8_t> packet) {
  return send_roce_as(dest, dest.ip, packet);
}

Status UdpCarrier::send_roce_as(Ipv4Endpoint dest, uint32_t header_dst, std::span<const uint8_t> packet) {
  const RoceEncap e = read_roce_encap(packet);
  if (!e.ok) {
    send_errors_.fetch_add(1, std::memory_order_relaxed);
    return Status(EINVAL);
  }
  // IP_TTL takes 1..255 (0, or -1: the socket's default, the route's). Only a group gets the header's.
  const bool multicast = (header_dst >> 28) == 0xe;
  const int ttl = multicast && e.ttl != 0 ? e.ttl : -1;
  const auto [fd, src_port] = roce_socket_for(e.src.port);
  const Ipv4Endpoint src{local_.ip, src_port};
  if (e.src == src && e.dst == Ipv4Endpoint{header_dst, dest.port}) {
    return send_datagram(fd, dest, packet.subspan(kRoceEncapBytes), e.tos, ttl);
  }

  // The header says other addresses or ports than the ones the datagram will travel with: make it say
  // those, in a copy, and seal it again, so the receiver's rebuilt header matches the ICRC.
  std::array<uint8_t, kMaxRocePacketBytes> copy;
  std::copy(packet.begin(), packet.end(), copy.begin());
  const std::span<uint8_t> p(copy.data(), packet.size());
  write_roce_encap(src.ip, header_dst, UdpPorts{src.port, dest.port}, e.tos, e.ttl,
                   packet.size() - kRoceEncapBytes, p.first<kRoceEncapBytes>());
  reseal_roce(p);
  resealed_.fetch_add(1, std::memory_order_relaxed);
  return send_datagram(fd, dest, p.subspan(kRoceEncapBytes), e.tos, ttl);
}

// One non-blocking sendmsg on fd, with per-packet IP_TOS / IP_TTL when tos / ttl are not negative.
Status UdpCarrier::send_datagram(int fd, Ipv4Endpoint dest, std::span<const uint8_t> payload, int tos, int ttl) {
  sockaddr_in to = to_sockaddr(dest);
  iovec iov{const_cast<uint8_t*>(payload.data()), payload.size()};
  alignas(cmsghdr) std::array<uint8_t, 2 * CMSG_SPACE(sizeof(int))> control{};
  msghdr msg{};
  msg.msg_name = &to;
  msg.msg_namelen = sizeof(to);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  size_t used = 0;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  for (const auto& [type, value] : {std::pair{IP_TOS, tos}, std::pair{IP_TTL, ttl}}) {
    if (value < 0) continue;
    c->cmsg_level = IPPROTO_IP;
    c->cmsg_type = type;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &value, sizeof(int));
    used += CMSG_SPACE(sizeof(int));
    c = CMSG_NXTHDR(&msg, c);
  }
  msg.msg_controllen = used;
  if (used == 0) msg.msg_control = nullptr;

  if (sendmsg(fd, &msg, MSG_DONTWAIT) < 0) {
    const int err = errno == EWOULDBLOCK ? EAGAIN : errno;
    send_errors_.fetch_add(1, std::memory_order_relaxed);
    return Status(err);
  }
  sent_.fetch_add(1, std::memory_order_relaxed);
  return Status::ok();
}

ReceiveResult UdpCarrier::receive(std::chrono::milliseconds timeout, const Callback& fn) {
  ReceiveResult r;
  if (!is_open()) {
    r.err = EBADF;
    return r;
  }
  if (stopping_.load(std::memory_order_acquire)) {
    r.woken = true;
    return r;
  }
  std::array<pollfd, 2> fds{pollfd{fd_, POLLIN, 0}, pollfd{wake_fd_, POLLIN, 0}};
  const int ms = timeout.count() < 0 ? -1 : static_cast<int>(std::min<int64_t>(timeout.count(), INT_MAX));
  const int n = poll(fds.data(), fds.size(), ms);
  if (n < 0) {
    if (errno != EINTR) r.err = errno;
    return r;
  }
  if (fds[1].revents != 0) {
    uint64_t count = 0;
    if (read(wake_fd_, &count, sizeof(count)) < 0) {}  // EAGAIN: another reader took it; still a wake-up
    r.woken = true;
    if (stopping_.load(std::memory_order_acquire)) return r;
  }
  if (fds[0].revents == 0) return r;
  for (uint32_t i = 0; i < kMaxBatch; ++i) {
    const RxOutcome o = receive_one(fn, r.err);
    if (o == RxOutcome::kNone) break;
    if (o == RxOutcome::kDelivered) ++r.delivered;
  }
  return r;
}

UdpCarrier::RxOutcome UdpCarrier::receive_one(const Callback& fn, int& err) {
  uint8_t* const payload = rx_.data() + kRoceEncapBytes;
  iovec iov{payload, rx_.size() - kRoceEncapBytes};
  sockaddr_in from{};
  alignas(cmsghdr) std::array<uint8_t, CMSG_SPACE(sizeof(in_pktinfo)) + 2 * CMSG_SPACE(sizeof(int))> control{};
  msghdr msg{};
  msg.msg_name = &from;
  msg.msg_namelen = sizeof(from);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  const ssize_t n = recvmsg(fd_, &msg, MSG_DONTWAIT);
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) err = errno;
    return RxOutcome::kNone;
  }
  const auto bytes = static_cast<size_t>(n);
  if ((msg.msg_flags & MSG_TRUNC) != 0 || bytes > max_payload()) {
    dropped_oversize_.fetch_add(1, std::memory_order_relaxed);
    return RxOutcome::kDropped;
  }
  if (bytes < min_payload()) {
    dropped_short_.fetch_add(1, std::memory_order_relaxed);
    return RxOutcome::kDropped;
  }

  Datagram d;
  d.source = from_sockaddr(from);
  d.destination = local_;
  int tos = 0;
  int ttl = kRoceDefaultTtl;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != IPPROTO_IP) continue;
    if (c->cmsg_type == IP_PKTINFO && c->cmsg_len >= CMSG_LEN(sizeof(in_pktinfo))) {
      in_pktinfo info{};
      std::memcpy(&info, CMSG_DATA(c), sizeof(info));
      d.destination.ip = ntohl(info.ipi_addr.s_addr);  // the header's destination address
    } else if (c->cmsg_type == IP_TOS && c->cmsg_len >= CMSG_LEN(1)) {
      tos = *CMSG_DATA(c);  // one byte (ip(7) IP_RECVTOS)
    } else if (c->cmsg_type == IP_TTL && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      std::memcpy(&ttl, CMSG_DATA(c), sizeof(int));
    }
  }

  if (mode_ == CarrierMode::kRoceV2) {
    write_roce_encap(d.source.ip, d.destination.ip, UdpPorts{d.source.port, d.destination.port},
                     static_cast<uint8_t>(tos), static_cast<uint8_t>(ttl), bytes,
                     std::span<uint8_t, kRoceEncapBytes>(rx_.data(), kRoceEncapBytes));
    d.bytes = std::span<const uint8_t>(rx_.data(), kRoceEncapBytes + bytes);
  } else {
    d.bytes = std::span<const uint8_t>(payload, bytes);
  }
  received_.fetch_add(1, std::memory_order_relaxed);
  fn(d);
  return RxOutcome::kDelivered;
}

void UdpCarrier::wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {}  // EAGAIN: the counter is saturated, a wake-up is pending
}

void UdpCarrier::stop() {
  stopping_.store(true, std::memory_order_release);
  wake();
}

}  // namespace softhca::fabric
