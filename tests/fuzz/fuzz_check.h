// What the fuzz targets share: a check that stops the run the way libFuzzer recognises a crash
// (abort, with a message saying which property broke), and a reader that takes values from the
// fuzzer's bytes one by one, answering 0 once they run out so every input is a valid program.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

namespace softhca::fuzz {

// Aborts (libFuzzer then saves the input as a crash) when ok is false.
inline void check(bool ok, const char* property) {
  if (ok) return;
  std::fprintf(stderr, "fuzz check failed: %s\n", property);
  std::abort();
}

// Consumes the input from the front. Past the end every value is 0 (and bytes() is empty).
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> data) : data_(data) {}

  template <class T>
  T take() {
    T v{};
    const size_t n = sizeof(T) < data_.size() ? sizeof(T) : data_.size();
    std::memcpy(&v, data_.data(), n);
    data_ = data_.subspan(n);
    return v;
  }
  uint8_t u8() { return take<uint8_t>(); }
  uint16_t u16() { return take<uint16_t>(); }
  uint32_t u32() { return take<uint32_t>(); }
  uint64_t u64() { return take<uint64_t>(); }
  bool flag() { return (u8() & 1) != 0; }
  // A value in [0, n) (n > 0).
  uint32_t below(uint32_t n) { return u32() % n; }
  // Up to n of the remaining bytes.
  std::span<const uint8_t> bytes(size_t n) {
    const size_t k = n < data_.size() ? n : data_.size();
    const std::span<const uint8_t> out = data_.first(k);
    data_ = data_.subspan(k);
    return out;
  }
  [[nodiscard]] bool empty() const { return data_.empty(); }
  [[nodiscard]] size_t left() const { return data_.size(); }

 private:
  std::span<const uint8_t> data_;
};

}  // namespace softhca::fuzz
