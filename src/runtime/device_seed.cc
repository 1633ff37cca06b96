#include "runtime/device_seed.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

namespace softhca::runtime {

uint64_t fresh_device_seed() {
  uint64_t seed = 0;
  ssize_t n = -1;
  do {
    n = ::getrandom(&seed, sizeof seed, 0);  // blocks only until the kernel's pool is first ready
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof seed)) return seed;
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    n = ::read(fd, &seed, sizeof seed);
    ::close(fd);
    if (n == static_cast<ssize_t>(sizeof seed)) return seed;
  }
  throw std::runtime_error("softhca: no random seed for the device (getrandom and /dev/urandom failed)");
}

}  // namespace softhca::runtime
