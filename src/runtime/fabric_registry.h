// The fabric registry: which hosts are on a fabric, with each host's LID and the IP address and UDP
// port of its carrier (docs/live-mode.md "Between hosts"). One small file per (user, fabric),
// <dir>/softhca-<uid>-<fabric>.hosts, read and written whole under flock(). LIDs are handed out
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
};

class FabricRegistry {
 public:
  // Hosts per fabric; LIDs stay in the unicast range 1..0xBFFF (IBA 4.1.3) far below it.
  static constexpr uint32_t kMaxHosts = 256;

  FabricRegistry(std::string dir, std::string fabric);
  [[nodiscard]] const std::string& path() const { return path_; }

  // The LID of `host`: its entry's, or the lowest free LID in a new entry. Entries of hosts whose
  // segment file is gone are dropped first. 0 with errno set on failure (ENOSPC: fabric full).
  uint16_t register_host(const std::string& host);
  // Sets the carrier address of a registered host (the UDP carrier fills it). 0 or an errno.
  int set_address(const std::string& host, uint32_t ipv4_be, uint16_t udp_port);
  // Removes a host's entry; the file goes when the last entry does. 0 or an errno.
  int remove_host(const std::string& host);

  [[nodiscard]] std::optional<HostAddress> find_by_lid(uint16_t lid) const;
  [[nodiscard]] std::optional<HostAddress> find_by_name(const std::string& host) const;
  [[nodiscard]] std::vector<HostAddress> hosts() const;

  struct Entry;
  struct File;

 private:
  // Runs fn(File&) on the file's contents under an exclusive flock; writes them back when fn
  // returns true. create: make the file if missing. Returns 0 or an errno.
  template <typename Fn>
  int with_file(bool create, Fn&& fn) const;
  [[nodiscard]] bool segment_exists(const std::string& host) const;

  std::string dir_;
  std::string fabric_;
  std::string path_;
};

}  // namespace softhca::runtime
