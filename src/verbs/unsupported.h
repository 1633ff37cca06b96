// The one answer softhca gives for a verb it does not implement: EOPNOTSUPP, delivered by the
// calling convention of the verb's return type (verbs-abi.md §5.3: pyverbs and perftest skip on
// EOPNOTSUPP; ENOSYS or EINVAL would turn their skips into failures).
//   int     -> returns EOPNOTSUPP (positive, as ibv_* int verbs return errors), errno also set
//   T*      -> returns nullptr, errno = EOPNOTSUPP
//   bool    -> false (a capability question answered "no")
//   ssize_t -> -1, errno = EOPNOTSUPP (read(2)-like calls)
//   void    -> does nothing
#pragma once
#include <sys/types.h>

#include <cerrno>
#include <type_traits>

namespace softhca::verbs {

template <class R>
R unsupported() noexcept {
  if constexpr (std::is_void_v<R>) {
    return;
  } else if constexpr (std::is_pointer_v<R>) {
    errno = EOPNOTSUPP;
    return nullptr;
  } else if constexpr (std::is_same_v<R, bool>) {
    return false;
  } else if constexpr (std::is_same_v<R, ssize_t>) {
    errno = EOPNOTSUPP;
    return -1;
  } else {
    static_assert(std::is_same_v<R, int>, "add the calling convention of this return type here");
    errno = EOPNOTSUPP;
    return EOPNOTSUPP;
  }
}

}  // namespace softhca::verbs
