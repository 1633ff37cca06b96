// The two CRC engines of an InfiniBand packet (IBA vol 1, 7.8): ICRC is CRC-32 with the Ethernet
// polynomial 0x04C11DB7, VCRC is CRC-16 with polynomial 0x100B. Which bytes they cover and which are
// masked is packet.h's business, not this file's. Values are host integers; see packet.h for wire order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

namespace softhca::fabric {

// Both CRCs are the reflected (least significant bit first) form: the register starts at all ones,
// every byte enters low bit first, and the result is the complemented register. With these rules
// CRC-32 is the common Ethernet/zlib CRC (check value for "123456789": 0xCBF43926). The VCRC rules
// (reflected polynomial 0xD008, init 0xFFFF, complemented) are the ones Endace's DAG capture library
// (dagcrc_infiniband_vcrc16_r) and Mellanox's MPGA packet generator (update_VCRC) use.
class Crc32 {
 public:
  static constexpr uint32_t kInit = 0xffffffff;
  static constexpr uint32_t kReflectedPoly = 0xedb88320;  // 0x04C11DB7 bit-reversed

  Crc32& update(std::span<const uint8_t> bytes);
  // The raw register, before the final complement (rxe seeds its ICRC with such a value).
  [[nodiscard]] uint32_t state() const { return state_; }
  [[nodiscard]] uint32_t value() const { return ~state_; }

 private:
  uint32_t state_ = kInit;
};

class Crc16Vcrc {
 public:
  static constexpr uint16_t kInit = 0xffff;
  static constexpr uint16_t kReflectedPoly = 0xd008;  // 0x100B bit-reversed

  Crc16Vcrc& update(std::span<const uint8_t> bytes);
  [[nodiscard]] uint16_t state() const { return state_; }
  [[nodiscard]] uint16_t value() const { return static_cast<uint16_t>(~state_); }

 private:
  uint16_t state_ = kInit;
};

// The algebra of the CRC-32 register: a register value is a polynomial over GF(2) modulo the
// polynomial P, in the reflected order (bit 31 is the coefficient of x^0, bit 0 that of x^31), so
// feeding n zero bytes to a register is multiplying it by x^(8n), and the difference of the CRCs of
// two messages of one length is the CRC register of their XOR from 0 (the start value and the final
// complement cancel). x is invertible modulo P (P(0) = 1), so every power of x, negative too, exists.
inline constexpr uint32_t kCrc32One = 0x80000000;  // the polynomial 1
uint32_t crc32_multiply(uint32_t a, uint32_t b);    // a * b mod P
uint32_t crc32_x_power(int64_t n);                   // x^n mod P, for any n (negative: the inverse)

inline uint32_t crc32(std::span<const uint8_t> bytes) { return Crc32{}.update(bytes).value(); }
inline uint16_t crc16_vcrc(std::span<const uint8_t> bytes) { return Crc16Vcrc{}.update(bytes).value(); }

}  // namespace softhca::fabric
