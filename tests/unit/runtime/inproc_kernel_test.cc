// The host kernel of the in-process runtime: DMA addresses are pointers (what IdentityBridge
// resolves), a pin's is into its window, and a vector is a datagram socket pair.
#include "runtime/inproc_kernel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "pcie/host_bridge.h"

namespace softhca::runtime {
namespace {

uint64_t addr_of(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

TEST(InprocKernel, CoherentMemoryIsZeroedCacheLinesOrPagesWhoseDmaAddressIsThePointer) {
  InprocKernel k;
  struct Case {
    size_t bytes, size, align;
  };
  // Up to half a page: a power of two from a cache line; above: whole pages.
  for (const Case c : {Case{0, 64, 64}, Case{1, 64, 64}, Case{65, 128, 64}, Case{2048, 2048, 64},
                       Case{2049, 4096, 4096}, Case{4096, 4096, 4096}, Case{4097, 8192, 4096}}) {
    pcie::DmaMemory m = k.alloc_coherent(c.bytes);
    ASSERT_TRUE(m.valid()) << c.bytes;
    EXPECT_EQ(m.size, c.size) << c.bytes;
    EXPECT_EQ(addr_of(m.data) % c.align, 0u) << c.bytes;
    EXPECT_EQ(m.dma_addr, addr_of(m.data));
    for (size_t i = 0; i < m.size; ++i) ASSERT_EQ(m.data[i], 0) << i;
    EXPECT_EQ(k.outstanding().buffers, 1);
    k.free_coherent(m);
    EXPECT_EQ(k.outstanding().buffers, 0);
  }
}

TEST(InprocKernel, AnImpossibleSizeIsEnomem) {
  InprocKernel k;
  errno = 0;
  EXPECT_FALSE(k.alloc_coherent(SIZE_MAX).valid());
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(k.outstanding().buffers, 0);
}

TEST(InprocKernel, APinsDmaAddressIsAPointerIntoItsWindowAndEachPinIsUndoneByItsOwnUnpin) {
  InprocKernel k;
  std::vector<char> buf(16, 'a');
  const uint64_t first = k.pin_user(buf.data() + 1, 15, pcie::PinAccess::kWrite);
  const uint64_t second = k.pin_user(buf.data() + 1, 15, pcie::PinAccess::kRead);
  ASSERT_NE(first, 0u);
  ASSERT_NE(second, 0u);
  EXPECT_NE(first, addr_of(buf.data() + 1)) << "the device's own mapping, not the application's address";
  EXPECT_EQ(first, second) << "the same pages through the same view of the pin arena";
  auto* device = reinterpret_cast<char*>(static_cast<uintptr_t>(first));
  device[0] = 'b';  // the device's store is the application's byte
  EXPECT_EQ(buf[1], 'b');
  EXPECT_EQ(k.pin_user(buf.data() + 1, 0, pcie::PinAccess::kWrite), addr_of(buf.data() + 1));  // len 0 allowed
  EXPECT_EQ(k.outstanding().pins, 3);
  k.unpin_user(addr_of(buf.data() + 1), 0);
  k.unpin_user(first, 15);
  EXPECT_EQ(k.outstanding().pins, 1);
  EXPECT_EQ(reinterpret_cast<char*>(static_cast<uintptr_t>(second))[0], 'b');
  k.unpin_user(second, 15);
  EXPECT_EQ(k.outstanding().pins, 0);
  EXPECT_EQ(buf[1], 'b');
}

TEST(InprocKernel, WriteAccessOnReadOnlyMemoryIsEfault) {
  InprocKernel k;
  void* ro = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  errno = 0;
  EXPECT_EQ(k.pin_user(ro, 64, pcie::PinAccess::kWrite), 0u);
  EXPECT_EQ(errno, EFAULT);
  const uint64_t dma = k.pin_user(ro, 64, pcie::PinAccess::kRead);
  EXPECT_NE(dma, 0u);
  EXPECT_EQ(k.outstanding().pins, 1);
  k.unpin_user(dma, 64);
  ::munmap(ro, 4096);
}

TEST(InprocKernel, AVectorIsADatagramSocketThatTheIdentityBridgeRaisesAndWaitVectorConsumes) {
  InprocKernel k;
  uint64_t vector = 0;
  const int fd = k.alloc_vector(&vector);
  ASSERT_GE(fd, 0);
  EXPECT_NE(vector, static_cast<uint64_t>(fd));  // the sending end, not the fd polled
  EXPECT_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  ASSERT_EQ(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
  errno = 0;
  EXPECT_EQ(k.wait_vector(fd), -1);
  EXPECT_EQ(errno, EAGAIN);

  pcie::IdentityBridge bridge;
  bridge.deliver_msi(vector);
  bridge.deliver_msi(vector);
  EXPECT_EQ(k.wait_vector(fd), 0);   // both firings at once
  EXPECT_EQ(k.wait_vector(fd), -1);  // nothing left
  EXPECT_EQ(errno, EAGAIN);

  // clear_vector drops what is pending without blocking; raise_vector makes the fd readable again.
  ASSERT_EQ(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK), 0);
  k.clear_vector(fd);  // nothing pending, and the fd blocking: returns all the same
  k.raise_vector(vector, fd);
  pollfd pfd{fd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 1);
  k.clear_vector(fd);
  EXPECT_EQ(poll(&pfd, 1, 0), 0);

  EXPECT_EQ(k.outstanding().vectors, 1);
  k.free_vector(vector, fd);
  EXPECT_EQ(k.outstanding().vectors, 0);
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);  // closed, both ends
  EXPECT_EQ(fcntl(static_cast<int>(vector), F_GETFD), -1);
}

}  // namespace
}  // namespace softhca::runtime
