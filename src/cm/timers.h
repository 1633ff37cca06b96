// CM time values (rdmacm.md 4.8): the 5-bit exponents of IBA 12.6 (4.096 us * 2^x: CM response
// timeouts, packet life time, ACK timeouts, MRA service timeouts), the Linux kernel's millisecond
// approximation of them, the local ACK timeout a REQ carries, and the REQ retransmit timeout.
// Time is integer picoseconds (base/units.h); nothing here reads a clock.
#pragma once
#include <algorithm>
#include <cstdint>

#include "base/units.h"

namespace softhca::cm {

inline constexpr uint8_t kMaxTimeExponent = 31;  // the fields are 5 bits wide

// Exactly 4.096 us * 2^x (IBA 12.6: "4.096 us * 2^x"); x is cut to 5 bits.
constexpr Picoseconds iba_time(uint8_t x) {
  return Picoseconds(int64_t{4'096'000} << (x & kMaxTimeExponent));
}

// The kernel's approximation (cm.c cm_convert_to_ms): 2^max(x - 8, 0) ms, e.g. 20 -> 4096 ms.
constexpr int64_t kernel_ms(uint8_t x) {
  const int e = std::max(static_cast<int>(x & kMaxTimeExponent) - 8, 0);
  return int64_t{1} << e;
}
constexpr Picoseconds kernel_time(uint8_t x) { return Picoseconds(kernel_ms(x) * 1'000'000'000); }

// Local ACK timeout placed in a REQ and used as the QP timeout (cm.c cm_ack_timeout): about twice
// the packet life time plus the CA's ACK delay, as an exponent, at most 31.
constexpr uint8_t local_ack_timeout(uint8_t ca_ack_delay, uint8_t packet_life_time) {
  int t = packet_life_time + 1;
  const int d = ca_ack_delay;
  if (t >= d) {
    t += (d >= t - 1) ? 1 : 0;
  } else {
    t = d + ((t >= d - 1) ? 1 : 0);
  }
  return static_cast<uint8_t>(std::min(t, static_cast<int>(kMaxTimeExponent)));
}
static_assert(local_ack_timeout(15, 16) == 17);  // rxe ack_delay 15, PLT 16 (rdmacm.md 4.8)
static_assert(local_ack_timeout(15, 18) == 19);

// How long a REQ sender waits for REP/REJ/MRA before resending (cm.c ib_send_cm_req):
// 2 * ms(packet life time) + ms(remote CM response timeout), e.g. 2 * 256 + 4096 = 4608 ms.
constexpr Picoseconds req_retransmit_timeout(uint8_t packet_life_time, uint8_t remote_cm_response_timeout) {
  return 2 * kernel_time(packet_life_time) + kernel_time(remote_cm_response_timeout);
}
static_assert(req_retransmit_timeout(16, 20) == kernel_time(0) * 4608);

// How long an MRA tells its receiver to wait (cm.c cm_mra_handler): the MRA's service timeout plus the
// packet life time.
constexpr Picoseconds mra_wait(uint8_t service_timeout, uint8_t packet_life_time) {
  return kernel_time(service_timeout) + kernel_time(packet_life_time);
}

// rdma_cm defaults (kernel cma.c): CM response timeout 20, 15 retries, MRA service timeout 24;
// SIDR waits 1 << (20 - 8) ms per try (rdmacm.md 4.7).
inline constexpr uint8_t kCmaCmResponseTimeout = 20;
inline constexpr uint8_t kCmaMaxCmRetries = 15;
inline constexpr uint8_t kCmaMraServiceTimeout = 24;
inline constexpr Picoseconds kCmaSidrTimeout = kernel_time(kCmaCmResponseTimeout);

}  // namespace softhca::cm
