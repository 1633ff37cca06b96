// A readiness signal for the rdma_cm acceptance runs (rdmacm.sh), preloaded into the server only:
// rdma_listen as the program calls it, and once it has returned 0 one line "listening" appended
// to the file named by SOFTHCA_TEST_LISTENING. rdma_cm servers bind no socket a test could watch,
// and a client that comes before the listen gets REJ 8, as from a kernel: with several
// connections in one client (ucmatose -c 8) some may already have reached the server, so trying
// the client again is no substitute. The call itself goes to the next definition, softhca's
// librdmacm.so.1 (rdma_listen@RDMACM_1.0).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

struct rdma_cm_id;

int rdma_listen(struct rdma_cm_id* id, int backlog) {
  typedef int (*listen_fn)(struct rdma_cm_id*, int);
  static listen_fn real;
  if (real == NULL) {
    real = (listen_fn)dlvsym(RTLD_NEXT, "rdma_listen", "RDMACM_1.0");
    if (real == NULL) abort();
  }
  const int rc = real(id, backlog);
  const char* file = getenv("SOFTHCA_TEST_LISTENING");
  if (rc == 0 && file != NULL) {
    const int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      static const char line[] = "listening\n";
      (void)!write(fd, line, sizeof line - 1);
      close(fd);
    }
  }
  return rc;
}
