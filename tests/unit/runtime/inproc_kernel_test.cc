// The host kernel of the in-process runtime: DMA addresses are pointers (what IdentityBridge
// resolves), pins name the address, and a vector is an eventfd whose number is the vector.
#include "runtime/inproc_kernel.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>

#include "pcie/host_bridge.h"

namespace softhca::runtime {
namespace {

uint64_t addr_of(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

TEST(InprocKernel, CoherentMemoryIsWholeZeroedPagesWhoseDmaAddressIsThePointer) {
  InprocKernel k;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, size_t{4097}}) {
    pcie::DmaMemory m = k.alloc_coherent(bytes);
    ASSERT_TRUE(m.valid()) << bytes;
    EXPECT_EQ(m.size, bytes <= 4096 ? 4096u : 8192u) << bytes;
    EXPECT_EQ(addr_of(m.data) % 4096, 0u);
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

TEST(InprocKernel, PinningGivesThePointerAsDmaAddressAndNests) {
  InprocKernel k;
  char buf[16] = {};
  EXPECT_EQ(k.pin_user(buf + 1, 15), addr_of(buf + 1));
  EXPECT_EQ(k.pin_user(buf + 1, 0), addr_of(buf + 1));  // len 0 allowed
  EXPECT_EQ(k.outstanding().pins, 2);
  k.unpin_user(buf + 1, 0);
  k.unpin_user(buf + 1, 15);
  EXPECT_EQ(k.outstanding().pins, 0);
}

TEST(InprocKernel, AVectorIsAnEventfdThatTheIdentityBridgeRaisesAndWaitVectorConsumes) {
  InprocKernel k;
  uint64_t vector = 0;
  const int fd = k.alloc_vector(&vector);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(vector, static_cast<uint64_t>(fd));
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

  EXPECT_EQ(k.outstanding().vectors, 1);
  k.free_vector(vector, fd);
  EXPECT_EQ(k.outstanding().vectors, 0);
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);  // closed
}

}  // namespace
}  // namespace softhca::runtime
