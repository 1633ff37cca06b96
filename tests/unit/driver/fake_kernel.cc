#include "fake_kernel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace softhca::driver::testing {
namespace {

constexpr size_t kPage = 4096;

uintptr_t ptr_bits(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

FakeKernel::~FakeKernel() {
  for (const auto& [p, size] : buffers_) std::free(reinterpret_cast<void*>(p));
  for (const auto& [v, ends] : vectors_) {
    ::close(ends.first);
    ::close(ends.second);
  }
}

pcie::DmaMemory FakeKernel::alloc_coherent(size_t bytes) {
  std::lock_guard g(lock_);
  ++calls.alloc;
  if (fail_alloc != 0) {
    errno = std::exchange(fail_alloc, 0);
    return {};
  }
  const size_t rounded = bytes == 0 ? kPage : (bytes + kPage - 1) / kPage * kPage;
  void* p = std::aligned_alloc(kPage, rounded);
  if (p == nullptr) {
    errno = ENOMEM;
    return {};
  }
  // Zeroed, as the contract says: the driver may rely on it.
  std::memset(p, 0, rounded);
  buffers_[ptr_bits(p)] = rounded;
  pcie::DmaMemory m;
  m.data = static_cast<uint8_t*>(p);
  m.size = rounded;
  m.dma_addr = pcie::dma_address(kSlot, ptr_bits(p));
  return m;
}

void FakeKernel::free_coherent(const pcie::DmaMemory& memory) {
  std::lock_guard g(lock_);
  ++calls.free;
  auto it = buffers_.find(ptr_bits(memory.data));
  if (it == buffers_.end() || it->second != memory.size ||
      memory.dma_addr != pcie::dma_address(kSlot, ptr_bits(memory.data))) {
    ++mismatches;
    return;
  }
  std::free(memory.data);
  buffers_.erase(it);
}

uint64_t FakeKernel::pin_user(const void* addr, size_t len, pcie::PinAccess access) {
  std::lock_guard g(lock_);
  ++calls.pin;
  last_pin_access = access;
  if (fail_pin != 0) {
    errno = std::exchange(fail_pin, 0);
    return 0;
  }
  ++pins_[{ptr_bits(addr), len}];
  return pcie::dma_address(kSlot, ptr_bits(addr));
}

void FakeKernel::unpin_user(uint64_t dma_addr, size_t len) {
  std::lock_guard g(lock_);
  ++calls.unpin;
  if (pcie::dma_slot(dma_addr) != kSlot) {
    ++mismatches;
    return;
  }
  auto it = pins_.find({static_cast<uintptr_t>(pcie::dma_va(dma_addr)), len});
  if (it == pins_.end()) {
    ++mismatches;
    return;
  }
  if (--it->second == 0) pins_.erase(it);
}

int FakeKernel::alloc_vector(uint64_t* vector) {
  std::lock_guard g(lock_);
  ++calls.alloc_vector;
  if (fail_vector != 0) {
    errno = std::exchange(fail_vector, 0);
    return -1;
  }
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, ends) != 0) return -1;
  *vector = next_vector_++;
  vectors_[*vector] = {ends[0], ends[1]};
  return ends[0];
}

void FakeKernel::free_vector(uint64_t vector, int fd) {
  std::lock_guard g(lock_);
  ++calls.free_vector;
  auto it = vectors_.find(vector);
  if (it == vectors_.end() || it->second.first != fd) {
    ++mismatches;
    return;
  }
  ::close(fd);
  ::close(it->second.second);
  vectors_.erase(it);
}

int FakeKernel::wait_vector(int fd) {
  {
    std::lock_guard g(lock_);
    ++calls.wait;
  }
  char buf[16];
  if (::recv(fd, buf, sizeof(buf), 0) < 0) return -1;
  clear_vector(fd);
  return 0;
}

void FakeKernel::clear_vector(int fd) {
  {
    std::lock_guard g(lock_);
    ++calls.clear;
  }
  char buf[16];
  while (::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
}

void FakeKernel::raise_vector(uint64_t vector, int /*fd*/) { raise(vector); }

uint8_t* FakeKernel::host(uint64_t dma) const {
  if (pcie::dma_slot(dma) != kSlot) return nullptr;
  const uintptr_t va = pcie::dma_va(dma);
  std::lock_guard g(lock_);
  auto it = buffers_.upper_bound(va);
  if (it != buffers_.begin() && va < std::prev(it)->first + std::prev(it)->second) return reinterpret_cast<uint8_t*>(va);
  for (const auto& [range, n] : pins_) {
    if (va >= range.first && va <= range.first + range.second) return reinterpret_cast<uint8_t*>(va);
  }
  return nullptr;
}

void FakeKernel::raise(uint64_t vector) {
  int fd = -1;
  {
    std::lock_guard g(lock_);
    auto it = vectors_.find(vector);
    if (it == vectors_.end()) {
      ++mismatches;
      return;
    }
    fd = it->second.second;
  }
  const char one = 1;
  [[maybe_unused]] const ssize_t n = ::send(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

size_t FakeKernel::pins_held() const {
  std::lock_guard g(lock_);
  size_t n = 0;
  for (const auto& [range, count] : pins_) n += static_cast<size_t>(count);
  return n;
}

size_t FakeKernel::bytes_held() const {
  std::lock_guard g(lock_);
  size_t n = 0;
  for (const auto& [p, size] : buffers_) n += size;
  return n;
}

}  // namespace softhca::driver::testing
