// rsockets (rdma/rsocket.h): the 27 functions exist so that programs linked with them load (every
// rdma-core example imports rpoll). softhca does not implement sockets over RDMA: each call fails
// with ENOSYS (docs/rdma-cm.md), except rpoll and rselect, which on descriptors that are not
// rsockets — all of them, here — are poll(2) and select(2), as in the real library.
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/select.h>

#include <cerrno>

namespace {
int nosys() {
  errno = ENOSYS;
  return -1;
}
}  // namespace

extern "C" {

int rsocket(int, int, int) { return nosys(); }
int rbind(int, const struct sockaddr*, socklen_t) { return nosys(); }
int rlisten(int, int) { return nosys(); }
int raccept(int, struct sockaddr*, socklen_t*) { return nosys(); }
int rconnect(int, const struct sockaddr*, socklen_t) { return nosys(); }
int rshutdown(int, int) { return nosys(); }
int rclose(int) { return nosys(); }
ssize_t rrecv(int, void*, size_t, int) { return nosys(); }
ssize_t rrecvfrom(int, void*, size_t, int, struct sockaddr*, socklen_t*) { return nosys(); }
ssize_t rrecvmsg(int, struct msghdr*, int) { return nosys(); }
ssize_t rsend(int, const void*, size_t, int) { return nosys(); }
ssize_t rsendto(int, const void*, size_t, int, const struct sockaddr*, socklen_t) { return nosys(); }
ssize_t rsendmsg(int, const struct msghdr*, int) { return nosys(); }
ssize_t rread(int, void*, size_t) { return nosys(); }
ssize_t rreadv(int, const struct iovec*, int) { return nosys(); }
ssize_t rwrite(int, const void*, size_t) { return nosys(); }
ssize_t rwritev(int, const struct iovec*, int) { return nosys(); }
int rpoll(struct pollfd* fds, nfds_t nfds, int timeout) { return ::poll(fds, nfds, timeout); }
int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, struct timeval* timeout) {
  return ::select(nfds, readfds, writefds, exceptfds, timeout);
}
int rgetpeername(int, struct sockaddr*, socklen_t*) { return nosys(); }
int rgetsockname(int, struct sockaddr*, socklen_t*) { return nosys(); }
int rsetsockopt(int, int, int, const void*, socklen_t) { return nosys(); }
int rgetsockopt(int, int, int, void*, socklen_t*) { return nosys(); }
int rfcntl(int, int, ...) { return nosys(); }
off_t riomap(int, void*, size_t, int, int, off_t) {
  errno = ENOSYS;
  return -1;
}
int riounmap(int, void*, size_t) { return nosys(); }
size_t riowrite(int, const void*, size_t, off_t, int) {
  errno = ENOSYS;
  return 0;
}

}  // extern "C"
