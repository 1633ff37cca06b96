#include "cm/timers.h"

#include <gtest/gtest.h>

namespace softhca::cm {
namespace {

constexpr int64_t kPsPerMs = 1'000'000'000;

TEST(Timers, IbaTimeIs4096NanosecondsTimesTwoToTheX) {
  EXPECT_EQ(iba_time(0), Picoseconds(4'096'000));
  EXPECT_EQ(iba_time(1), Picoseconds(8'192'000));
  EXPECT_EQ(iba_time(20).count(), int64_t{4'096'000} << 20);  // 4.29 s
  EXPECT_EQ(iba_time(31).count(), int64_t{4'096'000} << 31);  // the largest: 8796 s, no overflow
}

TEST(Timers, KernelMillisecondsAreTwoToTheXMinus8) {
  // rdmacm.md 4.8: 20 -> 4096 ms, 16 -> 256, 18 -> 1024, 24 -> 65536; small values round up to 1 ms.
  EXPECT_EQ(kernel_ms(20), 4096);
  EXPECT_EQ(kernel_ms(16), 256);
  EXPECT_EQ(kernel_ms(18), 1024);
  EXPECT_EQ(kernel_ms(24), 65536);
  EXPECT_EQ(kernel_ms(8), 1);
  EXPECT_EQ(kernel_ms(0), 1);
  EXPECT_EQ(kernel_time(20), Picoseconds(4096 * kPsPerMs));
}

TEST(Timers, LocalAckTimeoutFollowsTheKernelFormula) {
  EXPECT_EQ(local_ack_timeout(15, 16), 17);  // rxe, PLT 16: ~537 ms
  EXPECT_EQ(local_ack_timeout(15, 18), 19);
  EXPECT_EQ(local_ack_timeout(15, 14), 16);  // t = 15 >= 15, ack delay >= t - 1: one more
  EXPECT_EQ(local_ack_timeout(20, 0), 20);   // ACK delay dominates; t = 1 < 19
  EXPECT_EQ(local_ack_timeout(20, 18), 21);  // t = 19 >= ack delay - 1: one more
  EXPECT_EQ(local_ack_timeout(31, 31), 31);  // capped at the 5-bit field
}

TEST(Timers, ReqRetransmitTimeoutIsTwoPacketLifetimesPlusTheResponseTimeout) {
  EXPECT_EQ(req_retransmit_timeout(16, 20), Picoseconds(4608 * kPsPerMs));
  EXPECT_EQ(req_retransmit_timeout(18, 20), Picoseconds(6144 * kPsPerMs));
  EXPECT_EQ(mra_wait(24, 16), Picoseconds((65536 + 256) * kPsPerMs));
  EXPECT_EQ(kCmaSidrTimeout, Picoseconds(4096 * kPsPerMs));
}

}  // namespace
}  // namespace softhca::cm
