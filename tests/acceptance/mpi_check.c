/* An MPI program of ours for the ecosystem acceptance runs (docs/ecosystem.md): a ping-pong between
 * ranks 0 and 1 at sizes from 1 byte to 1 MiB with every byte checked, then collectives whose
 * results every rank checks (Bcast, Allreduce, Alltoall, Allgather, Barrier), on 2 or more ranks.
 * Prints "mpi_check: ok <ranks> ranks" from rank 0 and exits 0 when every check held on every
 * rank; a rank that finds a wrong byte says where and the job exits non-zero. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char byte_at(size_t i, int size_class, int round) {
  return (unsigned char)((i * 131u + (unsigned)size_class * 7u + (unsigned)round * 3u) & 0xff);
}

static int pingpong(int rank, int ranks) {
  enum { kMaxBytes = 1 << 20, kRounds = 4 };
  int bad = 0;
  unsigned char* buf = malloc(kMaxBytes);
  if (buf == NULL) return 1;
  if (ranks < 2 || rank > 1) {
    free(buf);
    return 0;
  }
  int size_class = 0;
  for (size_t n = 1; n <= kMaxBytes; n *= 4, ++size_class) {
    for (int r = 0; r < kRounds; ++r) {
      if (rank == 0) {
        for (size_t i = 0; i < n; ++i) buf[i] = byte_at(i, size_class, r);
        MPI_Send(buf, (int)n, MPI_BYTE, 1, r, MPI_COMM_WORLD);
        memset(buf, 0, n);
        MPI_Recv(buf, (int)n, MPI_BYTE, 1, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t i = 0; i < n; ++i) {
          if (buf[i] != (unsigned char)~byte_at(i, size_class, r)) {
            fprintf(stderr, "mpi_check: rank 0: echo of %zu bytes wrong at byte %zu\n", n, i);
            bad = 1;
            break;
          }
        }
      } else {
        MPI_Recv(buf, (int)n, MPI_BYTE, 0, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t i = 0; i < n; ++i) {
          if (buf[i] != byte_at(i, size_class, r)) {
            fprintf(stderr, "mpi_check: rank 1: %zu bytes wrong at byte %zu\n", n, i);
            bad = 1;
            break;
          }
          buf[i] = (unsigned char)~buf[i];
        }
        MPI_Send(buf, (int)n, MPI_BYTE, 0, r, MPI_COMM_WORLD);
      }
    }
  }
  free(buf);
  return bad;
}

static int collectives(int rank, int ranks) {
  int bad = 0;
  /* Bcast: 64 KiB from the last rank. */
  enum { kBcast = 65536 };
  unsigned char* b = malloc(kBcast);
  if (b == NULL) return 1;
  for (int i = 0; i < kBcast; ++i) b[i] = rank == ranks - 1 ? (unsigned char)(i ^ 0x5a) : 0;
  MPI_Bcast(b, kBcast, MPI_BYTE, ranks - 1, MPI_COMM_WORLD);
  for (int i = 0; i < kBcast; ++i) {
    if (b[i] != (unsigned char)(i ^ 0x5a)) {
      fprintf(stderr, "mpi_check: rank %d: Bcast wrong at byte %d\n", rank, i);
      bad = 1;
      break;
    }
  }
  free(b);
  /* Allreduce: the sum of (rank + 1) * k over ranks for 1024 longs. */
  enum { kLongs = 1024 };
  long in[kLongs], out[kLongs];
  for (int k = 0; k < kLongs; ++k) in[k] = (long)(rank + 1) * k;
  MPI_Allreduce(in, out, kLongs, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  const long tri = (long)ranks * (ranks + 1) / 2;
  for (int k = 0; k < kLongs; ++k) {
    if (out[k] != tri * k) {
      fprintf(stderr, "mpi_check: rank %d: Allreduce[%d] = %ld, expected %ld\n", rank, k, out[k], tri * k);
      bad = 1;
      break;
    }
  }
  /* Alltoall: rank r sends r * 1000 + d to rank d. */
  int* send = malloc(sizeof(int) * (size_t)ranks);
  int* recv = malloc(sizeof(int) * (size_t)ranks);
  int* all = malloc(sizeof(int) * (size_t)ranks);
  if (send == NULL || recv == NULL || all == NULL) return 1;
  for (int d = 0; d < ranks; ++d) send[d] = rank * 1000 + d;
  MPI_Alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD);
  for (int s = 0; s < ranks; ++s) {
    if (recv[s] != s * 1000 + rank) {
      fprintf(stderr, "mpi_check: rank %d: Alltoall from %d = %d\n", rank, s, recv[s]);
      bad = 1;
    }
  }
  /* Allgather: every rank's rank squared. */
  const int mine = rank * rank;
  MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
  for (int s = 0; s < ranks; ++s) {
    if (all[s] != s * s) {
      fprintf(stderr, "mpi_check: rank %d: Allgather[%d] = %d\n", rank, s, all[s]);
      bad = 1;
    }
  }
  free(send);
  free(recv);
  free(all);
  MPI_Barrier(MPI_COMM_WORLD);
  return bad;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int bad = pingpong(rank, ranks);
  bad |= collectives(rank, ranks);
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any == 0) printf("mpi_check: ok %d ranks\n", ranks);
  MPI_Finalize();
  return any != 0 ? 1 : 0;
}
