#include "runtime/host_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace softhca::runtime {

namespace {
constexpr uint64_t kMagic = 0x534f'4654'4843'4131ull;  // "SOFTHCA1"
// 2: PCIe counters in the slot data (slot_data.h). 3: DMA addresses name the device's own mappings
// (pin windows) and RangeTable counts unpublishes.
constexpr uint32_t kVersion = 3;
constexpr size_t kPage = 4096;
constexpr size_t kCacheLine = 64;
// Attach retries when the file is unlinked between open() and flock() by the last process leaving.
constexpr int kMaxOpenRetries = 100;

enum SlotState : uint32_t { kFree = 0, kUsed = 1, kReclaiming = 2 };

constexpr size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
}  // namespace

// A process slot. state is written last on claim (release) and first on free; pid and start time
// are atomics so other processes may read them without a lock.
struct HostSegment::ProcessSlot {
  std::atomic<uint32_t> state;
  std::atomic<int32_t> pid;
  std::atomic<uint64_t> start_time;
  uint8_t reserved_0x10[48];
};
static_assert(sizeof(HostSegment::ProcessSlot) == kCacheLine);
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "shared atomics must be lock-free to work across processes");

// Offsets are from the start of the file; every process maps the file at its own address.
struct HostSegment::Header {
  std::atomic<uint64_t> magic;  // written last by format
  uint32_t version;
  uint32_t num_slots;
  uint64_t file_bytes;
  uint64_t slots_offset;
  uint64_t slot_data_offset;
  uint64_t slot_data_stride;
  uint64_t slot_data_bytes;
  uint64_t device_offset;
  uint64_t device_bytes;
  uint64_t node_guid;
  uint64_t instance;
  int64_t epoch_ns;
  uint16_t lid;
  pthread_mutex_t device_lock;
  uint32_t uar_owner[kMaxUars];  // slot owning each UAR page, 0 free; under the device lock
};

namespace {

struct Layout {
  size_t slots_offset, slot_data_offset, slot_data_stride, device_offset, file_bytes;
};

Layout layout_for(const SegmentOptions& o) {
  Layout l{};
  l.slots_offset = round_up(sizeof(HostSegment::Header), kCacheLine);
  l.slot_data_offset = round_up(l.slots_offset + sizeof(HostSegment::ProcessSlot) * (kMaxSlots + 1), kPage);
  l.slot_data_stride = round_up(o.slot_data_bytes, kCacheLine);
  l.device_offset = round_up(l.slot_data_offset + l.slot_data_stride * (kMaxSlots + 1), kPage);
  l.file_bytes = l.device_offset + round_up(o.device_bytes, kPage);
  return l;
}

bool layout_matches(const HostSegment::Header& h, const SegmentOptions& o, const Layout& l, size_t file_size) {
  return h.version == kVersion && h.num_slots == kMaxSlots && h.file_bytes == l.file_bytes &&
         h.file_bytes <= file_size && h.slots_offset == l.slots_offset && h.slot_data_offset == l.slot_data_offset &&
         h.slot_data_stride == l.slot_data_stride && h.slot_data_bytes == o.slot_data_bytes &&
         h.device_offset == l.device_offset;
}

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// flock() that retries when a signal interrupts it.
int flock_retry(int fd, int op) {
  int rc = 0;
  do {
    rc = ::flock(fd, op);
  } while (rc != 0 && errno == EINTR);
  return rc;
}

}  // namespace

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameChars) return false;
  for (const char c : name) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok) return false;
  }
  // "." and ".." would not name a file of their own.
  return name != "." && name != "..";
}

bool host_names_from_env(HostNames& names, std::string& error) {
  const char* fabric = std::getenv("SOFTHCA_FABRIC");
  const char* host = std::getenv("SOFTHCA_HOST");
  if (fabric != nullptr && *fabric != '\0') names.fabric = fabric;
  if (host != nullptr && *host != '\0') names.host = host;
  for (const auto& [var, value] : {std::pair{"SOFTHCA_FABRIC", &names.fabric}, std::pair{"SOFTHCA_HOST", &names.host}}) {
    if (!valid_name(*value)) {
      error = std::string(var) + "='" + *value + "' is not a valid name: use 1 to " + std::to_string(kMaxNameChars) +
              " characters of A-Z a-z 0-9 _ . -";
      return false;
    }
  }
  return true;
}

std::string segment_name(const std::string& fabric, const std::string& host) { return fabric + "@" + host; }

std::string segment_path(const std::string& dir, uid_t uid, const std::string& fabric, const std::string& host) {
  return private_dir_path(dir, uid) + "/" + segment_name(fabric, host);
}

uint64_t process_start_time(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so fields count from the last ')'.
  // After it, field 3 (state) is token 0 and field 22 (starttime) is token 19 (proc(5)).
  char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  ++p;
  char* save = nullptr;
  char* tok = strtok_r(p, " ", &save);
  if (tok == nullptr || *tok == 'Z' || *tok == 'X') return 0;  // zombie or dead: gone for us
  for (int i = 1; i <= 19 && tok != nullptr; ++i) {
    tok = strtok_r(nullptr, " ", &save);
    if (i == 19 && tok != nullptr) return std::strtoull(tok, nullptr, 10);
  }
  return 0;
}

bool process_alive(pid_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  return process_start_time(pid) == start_time;
}

// ---- attach -----------------------------------------------------------------------------------

std::unique_ptr<HostSegment> HostSegment::attach(const SegmentOptions& options, std::string& error) {
  if (!valid_name(options.fabric) || !valid_name(options.host)) {
    error = "invalid fabric or host name";
    errno = EINVAL;
    return nullptr;
  }
  std::unique_ptr<HostSegment> seg(new HostSegment());
  seg->dir_ = PrivateDir::open(options.dir, true, error);
  if (seg->dir_ == nullptr) return nullptr;
  seg->name_ = segment_name(options.fabric, options.host);
  seg->path_ = seg->dir_->path_of(seg->name_);
  seg->my_pid_ = ::getpid();
  if (int err = seg->open_and_lock(error); err != 0) {
    errno = err;
    return nullptr;
  }
  const int err = seg->map_and_claim(options, error);
  if (err == 0 && seg->formatted_) seg->lock_device();  // fresh mutex: never EOWNERDEAD
  flock_retry(seg->fd_, LOCK_UN);
  if (err != 0) {
    errno = err;
    return nullptr;  // the destructor unmaps and closes; nothing was claimed
  }
  seg->attached_ = true;
  return seg;
}

// Opens (creating) the file in the private directory, checked, and takes the attach lock. A file
// the last process unlinked after our open() is a dead end (a new process would create another):
// retry with a fresh open.
int HostSegment::open_and_lock(std::string& error) {
  for (int attempt = 0; attempt < kMaxOpenRetries; ++attempt) {
    fd_ = dir_->open_file(name_, O_RDWR, true, error);
    if (fd_ < 0) return errno;
    if (flock_retry(fd_, LOCK_EX) != 0) {
      const int err = errno;
      error = "cannot lock " + path_ + ": " + std::strerror(err);
      return err;
    }
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && st.st_nlink > 0) return 0;
    ::close(fd_);
    fd_ = -1;
  }
  error = "cannot attach " + path_ + ": it keeps being removed";
  return EAGAIN;
}

int HostSegment::map_and_claim(const SegmentOptions& options, std::string& error) {
  clear_slot_data_ = options.clear_slot_data;
  const Layout l = layout_for(options);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    error = "cannot stat " + path_ + ": " + std::strerror(errno);
    return errno;
  }
  const size_t file_size = static_cast<size_t>(st.st_size);
  bool need_format = true;
  if (file_size >= sizeof(Header)) {
    void* p = ::mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) {
      error = "cannot map " + path_ + ": " + std::strerror(errno);
      return errno;
    }
    base_ = static_cast<uint8_t*>(p);
    map_bytes_ = file_size;
    header_ = reinterpret_cast<Header*>(base_);
    if (header_->magic.load(std::memory_order_acquire) == kMagic) {
      if (!layout_matches(*header_, options, l, file_size)) {
        if (live_slots() > 0) {
          error = path_ + " was made by an incompatible softhca build and is in use";
          return EPROTO;
        }
      } else {
        need_format = live_slots() == 0;  // every process gone: start a fresh device
      }
    }
  }
  if (need_format) {
    if (base_ != nullptr) ::munmap(base_, map_bytes_);
    base_ = nullptr;
    header_ = nullptr;
    // Truncating to 0 first zeroes every page (the old device, slots and tables).
    if (::ftruncate(fd_, 0) != 0 || ::ftruncate(fd_, static_cast<off_t>(l.file_bytes)) != 0) {
      const int err = errno;
      error = "cannot size " + path_ + ": " + std::strerror(err);
      return err;
    }
    void* p = ::mmap(nullptr, l.file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) {
      error = "cannot map " + path_ + ": " + std::strerror(errno);
      return errno;
    }
    base_ = static_cast<uint8_t*>(p);
    map_bytes_ = l.file_bytes;
    header_ = reinterpret_cast<Header*>(base_);
    uint16_t lid = 0;
    uint64_t guid = 0;
    std::string why;
    errno = 0;
    if (options.assign_identity && !options.assign_identity(lid, guid, why)) {
      const int err = errno != 0 ? errno : EIO;
      error = "cannot assign an identity to host " + options.host + ": " + (why.empty() ? std::strerror(err) : why);
      dir_->remove(name_);  // leave nothing half made (a racing attacher sees nlink 0, retries)
      return err;
    }
    header_->lid = lid;
    header_->node_guid = guid;
    format(options, l.file_bytes);
    formatted_ = true;
  }
  for (uint32_t s = 1; s <= kMaxSlots; ++s) {
    ProcessSlot* e = slot_entry(s);
    if (e->state.load(std::memory_order_acquire) != kFree) continue;
    // Under the attach lock: only the sweep (kUsed -> kFree) races with us, never on a free slot.
    e->pid.store(my_pid_, std::memory_order_relaxed);
    e->start_time.store(process_start_time(my_pid_), std::memory_order_relaxed);
    e->state.store(kUsed, std::memory_order_release);
    my_slot_ = s;
    return 0;
  }
  error = path_ + ": all " + std::to_string(kMaxSlots) + " process slots of host " + options.host + " are taken";
  return EUSERS;
}

// Lays out a fresh segment (zero-filled by the caller). The magic goes last.
void HostSegment::format(const SegmentOptions& options, size_t file_bytes) {
  const Layout l = layout_for(options);
  Header& h = *header_;
  h.version = kVersion;
  h.num_slots = kMaxSlots;
  h.file_bytes = file_bytes;
  h.slots_offset = l.slots_offset;
  h.slot_data_offset = l.slot_data_offset;
  h.slot_data_stride = l.slot_data_stride;
  h.slot_data_bytes = options.slot_data_bytes;
  h.device_offset = l.device_offset;
  h.device_bytes = file_bytes - l.device_offset;
  uint64_t instance = 0;
  if (::getrandom(&instance, sizeof(instance), 0) != sizeof(instance)) {
    instance = static_cast<uint64_t>(monotonic_ns()) ^ (static_cast<uint64_t>(my_pid_) << 32);
  }
  h.instance = instance;
  h.epoch_ns = monotonic_ns();
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&h.device_lock, &attr);
  pthread_mutexattr_destroy(&attr);
  h.magic.store(kMagic, std::memory_order_release);
}

std::unique_ptr<HostSegment> HostSegment::open_read_only(const std::string& dir, const std::string& fabric,
                                                         const std::string& host, std::string& error) {
  if (!valid_name(fabric) || !valid_name(host)) {
    error = "invalid fabric or host name";
    return nullptr;
  }
  std::unique_ptr<HostSegment> seg(new HostSegment());
  seg->dir_ = PrivateDir::open(dir, false, error);
  if (seg->dir_ == nullptr) return nullptr;
  seg->name_ = segment_name(fabric, host);
  const std::string path = seg->dir_->path_of(seg->name_);
  seg->path_ = path;
  seg->fd_ = seg->dir_->open_file(seg->name_, O_RDONLY, false, error);
  if (seg->fd_ < 0) return nullptr;
  struct stat st {};
  if (::fstat(seg->fd_, &st) != 0) {
    error = "cannot stat " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  const auto file_size = static_cast<size_t>(st.st_size);
  if (file_size < sizeof(Header)) {
    error = path + " is not a host segment";
    return nullptr;
  }
  void* p = ::mmap(nullptr, file_size, PROT_READ, MAP_SHARED, seg->fd_, 0);
  if (p == MAP_FAILED) {
    error = "cannot map " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  seg->base_ = static_cast<uint8_t*>(p);
  seg->map_bytes_ = file_size;
  seg->header_ = reinterpret_cast<Header*>(seg->base_);
  const Header& h = *seg->header_;
  if (h.magic.load(std::memory_order_acquire) != kMagic || h.version != kVersion || h.num_slots != kMaxSlots ||
      h.file_bytes > file_size || h.device_offset > h.file_bytes || h.device_bytes > h.file_bytes - h.device_offset ||
      h.slots_offset + sizeof(ProcessSlot) * (kMaxSlots + 1) > h.file_bytes) {
    error = path + " is not a host segment of this softhca build (or is being made)";
    return nullptr;
  }
  return seg;
}

// ---- detach -----------------------------------------------------------------------------------

HostSegment::~HostSegment() {
  if (attached_ && ::getpid() == my_pid_) detach(true);
  if (base_ != nullptr && map_bytes_ != 0) ::munmap(base_, map_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

bool HostSegment::detach(bool unmap, const std::function<void()>& on_last) {
  if (!attached_ || ::getpid() != my_pid_) return false;
  attached_ = false;
  flock_retry(fd_, LOCK_EX);
  lock_device();  // a dead owner's slot is left to the others' sweep (or to the next format)
  for (uint32_t& owner : header_->uar_owner) {
    if (owner == my_slot_) owner = 0;
  }
  unlock_device();
  ProcessSlot* e = slot_entry(my_slot_);
  clear_slot(my_slot_);
  e->state.store(kFree, std::memory_order_release);
  e->pid.store(0, std::memory_order_relaxed);
  e->start_time.store(0, std::memory_order_relaxed);
  const bool last = live_slots() == 0;
  if (last) {
    if (on_last) on_last();
    dir_->remove(name_);
  }
  flock_retry(fd_, LOCK_UN);
  ::close(fd_);
  fd_ = -1;
  if (unmap) {
    ::munmap(base_, map_bytes_);
    base_ = nullptr;
    header_ = nullptr;
    map_bytes_ = 0;
  }
  return last;
}

// ---- accessors ----------------------------------------------------------------------------------

HostSegment::ProcessSlot* HostSegment::slot_entry(uint32_t slot) const {
  return reinterpret_cast<ProcessSlot*>(base_ + header_->slots_offset) + slot;
}

uint16_t HostSegment::lid() const { return header_->lid; }
uint64_t HostSegment::node_guid() const { return header_->node_guid; }
uint64_t HostSegment::instance() const { return header_->instance; }
int64_t HostSegment::epoch_ns() const { return header_->epoch_ns; }
void* HostSegment::device_region() const { return base_ + header_->device_offset; }
size_t HostSegment::device_bytes() const { return header_->device_bytes; }

void HostSegment::clear_slot(uint32_t slot) {
  if (clear_slot_data_) {
    clear_slot_data_(slot_data(slot));
  } else {
    std::memset(slot_data(slot), 0, header_->slot_data_bytes);
  }
}

void* HostSegment::slot_data(uint32_t slot) const {
  if (slot == 0 || slot > kMaxSlots) return nullptr;
  return base_ + header_->slot_data_offset + header_->slot_data_stride * slot;
}

size_t HostSegment::slot_data_bytes() const { return header_->slot_data_bytes; }

pid_t HostSegment::pid_of(uint32_t slot) const {
  if (slot == 0 || slot > kMaxSlots) return 0;
  const ProcessSlot* e = slot_entry(slot);
  if (e->state.load(std::memory_order_acquire) != kUsed) return 0;
  return e->pid.load(std::memory_order_relaxed);
}

uint64_t HostSegment::start_time_of(uint32_t slot) const {
  if (slot == 0 || slot > kMaxSlots) return 0;
  const ProcessSlot* e = slot_entry(slot);
  if (e->state.load(std::memory_order_acquire) != kUsed) return 0;
  return e->start_time.load(std::memory_order_relaxed);
}

bool HostSegment::slot_dead(uint32_t slot) const {
  const pid_t pid = pid_of(slot);
  return pid != 0 && !process_alive(pid, start_time_of(slot));
}

uint32_t HostSegment::live_slots() const {
  uint32_t n = 0;
  for (uint32_t s = 1; s <= kMaxSlots; ++s) {
    const pid_t pid = pid_of(s);
    if (pid != 0 && process_alive(pid, start_time_of(s))) ++n;
  }
  return n;
}

bool HostSegment::free_dead_slot(uint32_t slot) {
  if (!slot_dead(slot)) return false;
  ProcessSlot* e = slot_entry(slot);
  uint32_t expected = kUsed;
  if (!e->state.compare_exchange_strong(expected, kReclaiming, std::memory_order_acq_rel)) return false;
  clear_slot(slot);
  for (uint32_t& owner : header_->uar_owner) {
    if (owner == slot) owner = 0;
  }
  e->pid.store(0, std::memory_order_relaxed);
  e->start_time.store(0, std::memory_order_relaxed);
  e->state.store(kFree, std::memory_order_release);
  return true;
}

int HostSegment::acquire_uar(uint32_t num_uars) {
  const uint32_t n = num_uars < kMaxUars ? num_uars : kMaxUars;
  for (uint32_t i = 0; i < n; ++i) {
    if (header_->uar_owner[i] == 0) {
      header_->uar_owner[i] = my_slot_;
      return static_cast<int>(i);
    }
  }
  return -1;
}

void HostSegment::release_uar(uint32_t uar) {
  if (uar < kMaxUars && header_->uar_owner[uar] == my_slot_) header_->uar_owner[uar] = 0;
}

namespace {

// How long a thread spins for the device lock before it sleeps in the kernel. The holder is
// another process's thread running the device on the other core for a few microseconds; sleeping
// would cost a futex wake-up (20-27 us measured, DESIGN.md) on every contended hand-over — for
// example a ping-pong peer that sees the data land while the initiator still holds the lock.
constexpr int kLockSpins = 20000;  // ~50-100 us of pause instructions

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Whether the lock looks taken, by a plain read of glibc's lock word (a public member of
// pthread_mutex_t; for a robust mutex the owner's TID, FUTEX_TID_MASK of it): a spinning thread
// reads until it changes and only then tries, so the line stays shared while the holder works
// instead of being pulled back and forth by a failed compare-and-swap each turn. A dead owner's
// word (TID cleared, FUTEX_OWNER_DIED set) looks free: the try then reports EOWNERDEAD at once.
bool looks_taken(pthread_mutex_t& m) {
  return (__atomic_load_n(&m.__data.__lock, __ATOMIC_RELAXED) & FUTEX_TID_MASK) != 0;
}

}  // namespace

bool HostSegment::lock_device() {
  int rc = pthread_mutex_trylock(&header_->device_lock);
  for (int i = 0; rc == EBUSY && i < kLockSpins; ++i) {
    cpu_relax();
    if (looks_taken(header_->device_lock)) continue;
    rc = pthread_mutex_trylock(&header_->device_lock);
  }
  if (rc == EBUSY) rc = pthread_mutex_lock(&header_->device_lock);
  if (rc == 0) return false;
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(&header_->device_lock);
    return true;
  }
  // ENOTRECOVERABLE cannot happen: every EOWNERDEAD is made consistent above.
  std::fprintf(stderr, "softhca: the device lock of %s failed: %s\n", path_.c_str(), std::strerror(rc));
  std::abort();
}

void HostSegment::unlock_device() { pthread_mutex_unlock(&header_->device_lock); }

}  // namespace softhca::runtime
