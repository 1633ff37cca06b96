// The host segment of live mode across processes (docs/live-mode.md): one file per (user, fabric,
// host), in the user's private directory under /dev/shm (private_dir.h), that every process of the
// host maps. It holds a header, the device lock (a
// process-shared robust mutex), the process table (pid + start time per slot), one fixed-size block
// of per-slot data (the memory engineer's RangeTable), the host's identity and UAR owners, and the
// device region the device model keeps its whole state in. It does not know the device model: the
// runtime constructs the device in device_region() and reclaims dead slots itself.
// Units: bytes; start times in clock ticks since boot (/proc/<pid>/stat field 22).
#pragma once
#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/private_dir.h"

namespace softhca::runtime {

// Fabric and host names: 1..64 characters of [A-Za-z0-9_.-] (they become file names).
inline constexpr size_t kMaxNameChars = 64;
[[nodiscard]] bool valid_name(std::string_view name);

// SOFTHCA_FABRIC (default "default") and SOFTHCA_HOST (default "host0"). False with `error` set
// when either is not a valid name.
struct HostNames {
  std::string fabric = "default";
  std::string host = "host0";
};
[[nodiscard]] bool host_names_from_env(HostNames& names, std::string& error);

// The segment's file name in the private directory: <fabric>@<host>. '@' is in no valid name, so
// no two (fabric, host) pairs share a file, nor does a segment share a fabric registry's name.
[[nodiscard]] std::string segment_name(const std::string& fabric, const std::string& host);
// <dir>/softhca-<uid>/<fabric>@<host>: where the segment of the effective uid `uid` is.
[[nodiscard]] std::string segment_path(const std::string& dir, uid_t uid, const std::string& fabric,
                                       const std::string& host);

// A process as the kernel knows it: start time in clock ticks since boot (field 22 of
// /proc/<pid>/stat), 0 when the process does not exist or is a zombie (dead, not yet reaped).
[[nodiscard]] uint64_t process_start_time(pid_t pid);
// Alive: exists, is not a zombie and started at `start_time` (so a reused pid is not alive).
[[nodiscard]] bool process_alive(pid_t pid, uint64_t start_time);

// Process slots: 1..kMaxSlots (slot 0 is the identity DMA slot, never a process).
inline constexpr uint32_t kMaxSlots = 64;
// UAR pages the segment hands out (each context gets its own, so BlueFlame buffers are never shared
// by two processes); bounded by the device's num_uars.
inline constexpr uint32_t kMaxUars = 256;

struct SegmentOptions {
  // The base: the segment is in its private directory <dir>/softhca-<euid> (made when missing).
  std::string dir = "/dev/shm";
  std::string fabric = "default";
  std::string host = "host0";
  // Size of the device region. The file is sparse: tmpfs backs only the pages the device touches.
  size_t device_bytes = size_t{1} << 30;
  // Bytes of per-slot data (one block per slot, 64-byte aligned, zeroed when a slot is freed, or
  // cleared by clear_slot_data when given: what must survive the slot's reuse survives).
  size_t slot_data_bytes = 0;
  std::function<void(void* slot_data)> clear_slot_data;
  // Called under the attach lock when the segment is formatted (a new device): fills the host's
  // identity. Returns false with errno and `error` set to refuse (attach then fails).
  std::function<bool(uint16_t& lid, uint64_t& node_guid, std::string& error)> assign_identity;
};

// One mapping of the host segment in this process.
// Thread safety: slot table reads are lock-free (atomics); attach/detach are serialised between
// processes by flock(); the device region and the UAR table are touched only under the device lock.
class HostSegment {
 public:
  // Attaches this process (open or create, flock, format when new or when every slot is dead,
  // claim a free slot). Null with errno and `error` set on failure, among them a private
  // directory or segment file that fails its checks (private_dir.h): never used, never changed.
  static std::unique_ptr<HostSegment> attach(const SegmentOptions& options, std::string& error);
  // Maps the existing segment of (fabric, host) under the base `dir` read-only, for observers
  // (softhca stats --live): takes no slot, no lock, never formats, sweeps or unlinks; the process
  // is not one of the host's. Only the const accessors may be used; what they read may change
  // meanwhile. Null with `error` set when the file does not exist, fails the private directory's
  // checks or is not a formatted segment of this build.
  static std::unique_ptr<HostSegment> open_read_only(const std::string& dir, const std::string& fabric,
                                                     const std::string& host, std::string& error);
  // Detaches if attach() succeeded and detach() was not called (same process only).
  ~HostSegment();
  HostSegment(const HostSegment&) = delete;
  HostSegment& operator=(const HostSegment&) = delete;

  // Frees this process's slot (its per-slot data zeroed, its UARs released) and unlinks the file
  // when no live slot remains, calling on_last (if set) first, under the attach lock. The caller
  // must already have reclaimed the slot's device objects. Keeps the mapping (other threads of an
  // exiting process may still read it) unless unmap is set. Returns true when it unlinked.
  bool detach(bool unmap, const std::function<void()>& on_last = {});

  [[nodiscard]] uint32_t my_slot() const { return my_slot_; }
  // True when this attach formatted the segment: the device must be created fresh (kFormat). The
  // device lock is then held on return from attach() (taken before the attach lock was released,
  // so no other process sees the region before the device is formatted): the caller unlocks it.
  [[nodiscard]] bool formatted() const { return formatted_; }
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] uint16_t lid() const;
  [[nodiscard]] uint64_t node_guid() const;
  // Random at format: names of this host incarnation's interrupt sockets include it.
  [[nodiscard]] uint64_t instance() const;
  // CLOCK_MONOTONIC at format [ns]: the epoch of the host's shared device time.
  [[nodiscard]] int64_t epoch_ns() const;

  [[nodiscard]] void* device_region() const;
  [[nodiscard]] size_t device_bytes() const;
  // Slot s's data block (slot_data_bytes long), s in 1..kMaxSlots.
  [[nodiscard]] void* slot_data(uint32_t slot) const;
  // How long each slot's data block is, as the segment was formatted (a reader built from other
  // sources must check it before it reads a block).
  [[nodiscard]] size_t slot_data_bytes() const;

  // The pid and start time of an occupied slot, 0 when the slot is free or out of range.
  [[nodiscard]] pid_t pid_of(uint32_t slot) const;
  [[nodiscard]] uint64_t start_time_of(uint32_t slot) const;
  // Occupied by a process that is gone.
  [[nodiscard]] bool slot_dead(uint32_t slot) const;
  // Frees a dead slot after the caller reclaimed its objects (under the device lock): zeroes its
  // data, releases its UARs. Returns false when the slot was not occupied or is alive.
  bool free_dead_slot(uint32_t slot);
  // Number of occupied slots whose process is alive.
  [[nodiscard]] uint32_t live_slots() const;

  // UAR pages, under the device lock: the lowest free index below num_uars for this slot, or
  // -1 when all are taken.
  int acquire_uar(uint32_t num_uars);
  void release_uar(uint32_t uar);

  // The device lock: process-shared and robust. lock() returns true when the previous owner died
  // holding it (EOWNERDEAD): the lock is then held and already marked consistent, and the caller
  // should reclaim dead slots before touching the device.
  bool lock_device();
  void unlock_device();

  struct Header;
  struct ProcessSlot;

 private:
  HostSegment() = default;
  int open_and_lock(std::string& error);
  int map_and_claim(const SegmentOptions& options, std::string& error);
  void format(const SegmentOptions& options, size_t file_bytes);
  [[nodiscard]] ProcessSlot* slot_entry(uint32_t slot) const;

  std::unique_ptr<PrivateDir> dir_;  // where the file is; kept for the unlink at detach
  std::string name_;
  std::string path_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  size_t map_bytes_ = 0;
  Header* header_ = nullptr;
  uint32_t my_slot_ = 0;
  std::function<void(void*)> clear_slot_data_;  // SegmentOptions::clear_slot_data
  void clear_slot(uint32_t slot);
  pid_t my_pid_ = 0;
  bool formatted_ = false;
  bool attached_ = false;
};

// A BasicLockable over the device lock that runs `on_owner_dead` (with the lock held) when the
// previous owner died holding it.
class DeviceLock {
 public:
  DeviceLock(HostSegment& segment, std::function<void()> on_owner_dead)
      : segment_(segment), on_owner_dead_(std::move(on_owner_dead)) {}
  void lock() {
    if (segment_.lock_device() && on_owner_dead_) on_owner_dead_();
  }
  void unlock() { segment_.unlock_device(); }

 private:
  HostSegment& segment_;
  std::function<void()> on_owner_dead_;
};

}  // namespace softhca::runtime
