// Errno-style results: verbs speak errno, so the device and driver do too.
// Status{0} is success; anything else is a positive errno value (EINVAL, ENOMEM, EOPNOTSUPP, ...).
#pragma once
#include <cerrno>

namespace softhca {

class [[nodiscard]] Status {
 public:
  constexpr Status() = default;
  constexpr explicit Status(int err) : err_(err) {}
  static constexpr Status ok() { return Status(); }
  [[nodiscard]] constexpr bool is_ok() const { return err_ == 0; }
  [[nodiscard]] constexpr int err() const { return err_; }
  constexpr explicit operator bool() const { return is_ok(); }
  constexpr bool operator==(const Status&) const = default;

 private:
  int err_ = 0;
};

}  // namespace softhca
