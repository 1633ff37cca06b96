// The fabric registry: which hosts are on a fabric, with each host's LID and the IP address and UDP
// port of its carrier (docs/live-mode.md "Between hosts"). One small file per (user, fabric),
// <dir>/softhca-<euid>/<fabric>.hosts in the user's private directory (private_dir.h, checked on
// every access: a registry another user could write is never read), read and written whole under
// flock(). LIDs are handed out
// 1, 2, ... in order of first appearance (the lowest LID not in use); a host keeps its entry, hence
// its LID, while its host segment file exists. Addresses are IPv4, network byte order.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace softhca::runtime {

struct HostAddress {
  std::string host;
  uint16_t lid = 0;
  uint32_t ipv4_be = 0;   // 0: not set yet
  uint16_t udp_port = 0;  // host byte order; 0: not set yet
  // An InfiniBand host's IPoIB-style address, which rdma_cm resolves (docs/addresses.md); the
  // carrier's address above is another. 0: not set (RoCE hosts: GID 0's is ipv4_be).
  uint32_t ipoib_be = 0;
};

class FabricRegistry {
 public:
  // Hosts per fabric; LIDs stay in the unicast range 1..0xBFFF (IBA 4.1.3) far below it.
  static constexpr uint32_t kMaxHosts = 256;

  // dir: the base, as SegmentOptions::dir (the registry is beside the fabric's host segments).
  FabricRegistry(std::string dir, std::string fabric);
  [[nodiscard]] const std::string& path() const { return path_; }

  // The LID of `host`: its entry's, or the lowest free LID in a new entry. Entries of hosts whose
  // segment file is gone are dropped first. 0 with errno set on failure (ENOSPC: fabric full), and
  // `error` (when given) saying why, naming the file.
  uint16_t register_host(const std::string& host, std::string* error = nullptr);
  // Sets the carrier address of a registered host (the UDP carrier fills it). 0 or an errno.
  int set_address(const std::string& host, uint32_t ipv4_be, uint16_t udp_port);
  // The IPv4 address (network byte order) of a registered host that asked for the default one
  // (docs/addresses.md): `preferred` unless another host of the fabric has it, else `fallback`;
  // chosen and recorded in one step under the file's lock, so two hosts never get the same. A
  // host that already has an address keeps it. 0 with errno set when the host is not registered.
  // ipoib: the InfiniBand host's rdma_cm address (HostAddress::ipoib_be) instead of ipv4_be.
  uint32_t claim_ipv4(const std::string& host, uint32_t preferred_be, uint32_t fallback_be, bool ipoib = false);
  // Removes a host's entry; the file goes when the last entry does. 0 or an errno.
  int remove_host(const std::string& host);

  // Lookups. A registry that is missing or fails its checks holds no host.
  [[nodiscard]] std::optional<HostAddress> find_by_lid(uint16_t lid) const;
  [[nodiscard]] std::optional<HostAddress> find_by_name(const std::string& host) const;
  // The InfiniBand host whose rdma_cm address (ipoib_be) is `ipv4_be`.
  [[nodiscard]] std::optional<HostAddress> find_by_ipoib(uint32_t ipv4_be) const;
  [[nodiscard]] std::vector<HostAddress> hosts() const;

  struct Entry;
  struct File;

 private:
  // Runs fn(const PrivateDir&, File&) on the file's contents under an exclusive flock; writes them
  // back when fn returns true. create: make the file (and the private directory) if missing.
  // Returns 0 or an errno, with `error` (when given) set.
  template <typename Fn>
  int with_file(bool create, std::string* error, Fn&& fn) const;

  std::string dir_;
  std::string fabric_;
  std::string name_;
  std::string path_;
};

}  // namespace softhca::runtime
