/* RC under faults between two processes (docs/reliability.md, "The soak tests"), written against
 * the public verbs API only:
 *   rc_soak target DIR OPS      4 RC QPs; posts receives, checks what arrives, checks its memory
 *   rc_soak initiator DIR OPS   4 RC QPs; OPS mixed operations per QP, checks every completion
 * Both sides draw the same operations from the same seed (SEND, RDMA WRITE, WRITE with immediate,
 * READ, compare-and-swap, fetch-and-add; 1 byte to 3 MTUs), so each can tell what it must see:
 * the initiator, its completions in order (status, READ bytes, the original value of each atomic,
 * a fetch-and-add returning exactly the sum of the adds before it); the target, its receive
 * completions in order (length, immediate, SEND bytes) and, once the initiator says it is done,
 * the checksums of its memory against the model. Exits 0 when all matched, 2 on a mismatch, 1 on a
 * setup failure. Every wait is bounded (60 s). The peers swap QP numbers through files in DIR. */
#include <endian.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define QPS 4
#define DEPTH 32
#define MTU 1024
#define MAX_LEN (3 * MTU)
#define REGION (1u << 20)          /* per QP, on each side */
#define WRITE_AREA (256u * 1024)   /* target: WRITE targets; initiator: source bytes */
#define READ_SRC (256u * 1024)     /* target: READ sources */
#define SLOTS (512u * 1024)        /* initiator: READ landing slots; target: receive slots */
#define SLOT_BYTES 4096u
#define ATOMICS (900u * 1024)      /* target: counter, CAS word; initiator: results */
#define WAIT_S 60

enum op { OP_SEND, OP_WRITE, OP_WRITE_IMM, OP_READ, OP_CAS, OP_FADD, OP_COUNT };

struct plan { /* one operation, as both sides draw it */
  enum op op;
  uint32_t len, src, dst; /* src: initiator offset (or target READ offset); dst: target offset */
  uint64_t compare_add, swap;
  int cas_hit;
};

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint8_t pattern_initiator(size_t i) { return (uint8_t)((i * 131 + 7) ^ (i >> 8)); }
static uint8_t pattern_target(size_t i) { return (uint8_t)((i * 197 + 3) ^ (i >> 9)); }

static void draw(uint64_t *s, uint32_t q, struct plan *p) {
  memset(p, 0, sizeof *p);
  p->op = (enum op)(rng_next(s) % OP_COUNT);
  p->len = 1 + (uint32_t)(rng_next(s) % MAX_LEN);
  p->src = q * REGION + (uint32_t)(rng_next(s) % (WRITE_AREA - MAX_LEN));
  p->dst = q * REGION + (uint32_t)(rng_next(s) % (WRITE_AREA - MAX_LEN));
  if (p->op == OP_READ) p->src = q * REGION + READ_SRC + (uint32_t)(rng_next(s) % (READ_SRC - MAX_LEN));
  p->compare_add = 1 + rng_next(s) % 1000;
  p->swap = rng_next(s);
  p->cas_hit = (int)(rng_next(s) & 1);
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static int fail(const char *what) {
  fprintf(stderr, "rc_soak: %s\n", what);
  return 1;
}

static int write_file(const char *dir, const char *name, const char *text) {
  char tmp[512], path[512];
  snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, name);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  fputs(text, f);
  if (fclose(f) != 0) return -1;
  return rename(tmp, path);
}

static int wait_file(const char *dir, const char *name, char *out, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  for (double end = now_s() + WAIT_S; now_s() < end; usleep(10000)) {
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t got = fread(out, 1, n - 1, f);
    fclose(f);
    out[got] = '\0';
    return 0;
  }
  return -1;
}

static int connect_qp(struct ibv_qp *qp, uint16_t dlid, uint32_t dest_qpn, uint32_t rq_psn, uint32_t sq_psn) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.ah_attr.dlid = dlid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 8; /* 4.096 us * 2^8 = 1 ms: a lost tail costs a millisecond */
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = sq_psn;
  a.max_rd_atomic = 4;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static uint64_t remote_base; /* the target's buffer, as its process sees it */
static uint32_t remote_rkey;

struct side {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_mr *mr;
  uint8_t *buf;
  struct ibv_qp *qp[QPS];
  uint16_t lid;
};

static int post_recv_slot(struct side *s, uint32_t q, uint32_t slot) {
  struct ibv_sge sge = {(uint64_t)(uintptr_t)(s->buf + q * REGION + SLOTS + slot * SLOT_BYTES), SLOT_BYTES, s->mr->lkey};
  struct ibv_recv_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = ((uint64_t)q << 32) | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return ibv_post_recv(s->qp[q], &wr, &bad);
}

/* ---- the target: receives, then checks its memory ------------------------------------------- */
static int run_target(struct side *s, const char *dir, long ops) {
  uint64_t rng[QPS], counter[QPS] = {0}, cas[QPS] = {0}, sum[QPS] = {0};
  long drawn[QPS] = {0}, recvs_done = 0, recvs_expected = 0;
  uint8_t *image = malloc((size_t)QPS * REGION);
  if (!image) return fail("malloc");
  memcpy(image, s->buf, (size_t)QPS * REGION);
  for (uint32_t q = 0; q < QPS; ++q) rng[q] = 1000 + q;
  /* Replays the plan: the model of memory, and the receive completions expected, in order. */
  struct expect { uint32_t len, src, imm; int is_imm; } *want[QPS];
  long nwant[QPS] = {0}, next_want[QPS] = {0};
  for (uint32_t q = 0; q < QPS; ++q) {
    want[q] = calloc((size_t)ops, sizeof **want);
    if (!want[q]) return fail("calloc");
    for (drawn[q] = 0; drawn[q] < ops; ++drawn[q]) {
      struct plan p;
      draw(&rng[q], q, &p);
      if (p.op == OP_SEND) want[q][nwant[q]++] = (struct expect){p.len, p.src, 0, 0};
      if (p.op == OP_WRITE || p.op == OP_WRITE_IMM)
        for (uint32_t i = 0; i < p.len; ++i) image[p.dst + i] = pattern_initiator(p.src + i);
      if (p.op == OP_WRITE_IMM) want[q][nwant[q]++] = (struct expect){p.len, 0, (uint32_t)drawn[q], 1};
      if (p.op == OP_CAS && p.cas_hit) cas[q] = p.swap;
      if (p.op == OP_FADD) {
        counter[q] += p.compare_add;
        sum[q] += p.compare_add;
      }
    }
    recvs_expected += nwant[q];
  }
  for (uint32_t q = 0; q < QPS; ++q)
    for (uint32_t slot = 0; slot < DEPTH; ++slot)
      if (post_recv_slot(s, q, slot)) return fail("ibv_post_recv");
  if (write_file(dir, "target.ready", "ready\n")) return fail("cannot write target.ready");
  struct ibv_wc wc[16];
  char text[64];
  int bad = 0;
  for (double end = now_s() + WAIT_S; recvs_done < recvs_expected;) {
    if (now_s() > end) return fail("receive completions did not all arrive in time");
    int n = ibv_poll_cq(s->cq, 16, wc);
    if (n < 0) return fail("ibv_poll_cq");
    if (n == 0) usleep(100);
    for (int i = 0; i < n; ++i) {
      uint32_t q = (uint32_t)(wc[i].wr_id >> 32), slot = (uint32_t)wc[i].wr_id;
      if (wc[i].status != IBV_WC_SUCCESS || q >= QPS || next_want[q] >= nwant[q]) {
        printf("rc_soak target: bad receive completion: status %d (%s), qp %u\n", wc[i].status,
               ibv_wc_status_str(wc[i].status), q);
        return 2;
      }
      const struct expect *e = &want[q][next_want[q]++];
      const uint8_t *got = s->buf + q * REGION + SLOTS + slot * SLOT_BYTES;
      int ok = wc[i].byte_len == e->len;
      if (e->is_imm) {
        ok = ok && wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM && be32toh(wc[i].imm_data) == e->imm;
      } else {
        ok = ok && wc[i].opcode == IBV_WC_RECV;
        for (uint32_t b = 0; ok && b < e->len; ++b) ok = got[b] == pattern_initiator(e->src + b);
      }
      if (!ok) {
        printf("rc_soak target: receive %ld of QP %u does not match what was sent\n", next_want[q] - 1, q);
        bad = 1;
      }
      ++recvs_done;
      if (post_recv_slot(s, q, slot)) return fail("ibv_post_recv");
    }
  }
  if (wait_file(dir, "initiator.done", text, sizeof text)) return fail("the initiator never said it was done");
  for (uint32_t q = 0; q < QPS; ++q) {
    const uint8_t *area = s->buf + q * REGION;
    uint64_t have = fnv1a(area, WRITE_AREA), model = fnv1a(image + q * REGION, WRITE_AREA);
    uint64_t c, w;
    memcpy(&c, area + ATOMICS, 8);
    memcpy(&w, area + ATOMICS + 8, 8);
    printf("rc_soak target: QP %u: write area checksum %016llx (model %016llx), counter %llu (sum of adds %llu), "
           "cas word %s, %ld receives\n",
           q, (unsigned long long)have, (unsigned long long)model, (unsigned long long)c,
           (unsigned long long)sum[q], w == cas[q] ? "as modelled" : "WRONG", next_want[q]);
    if (have != model || c != counter[q] || w != cas[q]) bad = 1;
  }
  printf("rc_soak target: %s\n", bad ? "MISMATCH" : "all data as modelled");
  fflush(stdout);
  return bad ? 2 : 0;
}

/* ---- the initiator: posts the plan, checks each completion ---------------------------------- */
static int run_initiator(struct side *s, const char *dir, long ops) {
  uint64_t rng[QPS], counter[QPS] = {0}, cas[QPS] = {0};
  long posted[QPS] = {0}, done[QPS] = {0}, all_done = 0;
  struct plan inflight[QPS][DEPTH];
  uint64_t orig[QPS][DEPTH];
  char text[64];
  for (uint32_t q = 0; q < QPS; ++q) rng[q] = 1000 + q;
  if (wait_file(dir, "target.ready", text, sizeof text)) return fail("the target never got ready");
  struct ibv_wc wc[16];
  double start = now_s();
  for (double end = now_s() + WAIT_S; all_done < (long)QPS * ops;) {
    if (now_s() > end) return fail("completions did not all arrive in time");
    for (uint32_t q = 0; q < QPS; ++q) {
      while (posted[q] < ops && posted[q] - done[q] < DEPTH) {
        uint32_t slot = (uint32_t)(posted[q] % DEPTH);
        struct plan *p = &inflight[q][slot];
        draw(&rng[q], q, p);
        struct ibv_sge sge = {(uint64_t)(uintptr_t)(s->buf + p->src), p->len, s->mr->lkey};
        struct ibv_send_wr wr, *badwr;
        memset(&wr, 0, sizeof wr);
        wr.wr_id = ((uint64_t)q << 32) | (uint32_t)posted[q];
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        switch (p->op) {
          case OP_SEND: wr.opcode = IBV_WR_SEND; break;
          case OP_WRITE:
          case OP_WRITE_IMM:
            wr.opcode = p->op == OP_WRITE ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data = htobe32((uint32_t)posted[q]);
            wr.wr.rdma.remote_addr = remote_base + p->dst;
            wr.wr.rdma.rkey = remote_rkey;
            break;
          case OP_READ:
            wr.opcode = IBV_WR_RDMA_READ;
            sge.addr = (uint64_t)(uintptr_t)(s->buf + q * REGION + SLOTS + slot * SLOT_BYTES);
            wr.wr.rdma.remote_addr = remote_base + p->src;
            wr.wr.rdma.rkey = remote_rkey;
            break;
          case OP_CAS:
          case OP_FADD:
          case OP_COUNT:
            sge.addr = (uint64_t)(uintptr_t)(s->buf + q * REGION + ATOMICS + slot * 8);
            sge.length = 8;
            wr.wr.atomic.rkey = remote_rkey;
            wr.wr.atomic.remote_addr = remote_base + q * REGION + ATOMICS + (p->op == OP_CAS ? 8 : 0);
            if (p->op == OP_CAS) {
              wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
              wr.wr.atomic.compare_add = p->cas_hit ? cas[q] : cas[q] + 1;
              wr.wr.atomic.swap = p->swap;
              orig[q][slot] = cas[q];
              if (p->cas_hit) cas[q] = p->swap;
            } else {
              wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
              wr.wr.atomic.compare_add = p->compare_add;
              orig[q][slot] = counter[q];
              counter[q] += p->compare_add;
            }
            break;
        }
        wr.num_sge = 1;
        if (ibv_post_send(s->qp[q], &wr, &badwr)) return fail("ibv_post_send");
        ++posted[q];
      }
    }
    int n = ibv_poll_cq(s->cq, 16, wc);
    if (n < 0) return fail("ibv_poll_cq");
    if (n == 0) usleep(50);
    for (int i = 0; i < n; ++i) {
      uint32_t q = (uint32_t)(wc[i].wr_id >> 32), seq = (uint32_t)wc[i].wr_id;
      if (wc[i].status != IBV_WC_SUCCESS || q >= QPS || seq != (uint32_t)done[q]) {
        printf("rc_soak initiator: completion of QP %u WR %u (expected WR %ld): status %d (%s)\n", q, seq,
               q < QPS ? done[q] : -1L, wc[i].status, ibv_wc_status_str(wc[i].status));
        return 2;
      }
      uint32_t slot = seq % DEPTH;
      const struct plan *p = &inflight[q][slot];
      int ok = 1;
      if (p->op == OP_READ) {
        const uint8_t *got = s->buf + q * REGION + SLOTS + slot * SLOT_BYTES;
        for (uint32_t b = 0; ok && b < p->len; ++b) ok = got[b] == pattern_target(p->src + b);
      } else if (p->op == OP_CAS || p->op == OP_FADD || p->op == OP_COUNT) {
        uint64_t v;
        memcpy(&v, s->buf + q * REGION + ATOMICS + slot * 8, 8);
        ok = v == orig[q][slot];
      }
      if (!ok) {
        printf("rc_soak initiator: QP %u WR %u (op %d) returned the wrong data\n", q, seq, (int)p->op);
        return 2;
      }
      ++done[q];
      ++all_done;
    }
  }
  printf("rc_soak initiator: %ld operations on %d QPs completed once each, in order, in %.2f s\n", all_done, QPS,
         now_s() - start);
  fflush(stdout);
  if (write_file(dir, "initiator.done", "done\n")) return fail("cannot write initiator.done");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) return fail("usage: rc_soak target|initiator DIR OPS_PER_QP");
  const int initiator = strcmp(argv[1], "initiator") == 0;
  const char *dir = argv[2];
  const long ops = atol(argv[3]);
  struct side s;
  memset(&s, 0, sizeof s);
  struct ibv_device **list = ibv_get_device_list(NULL);
  if (!list || !list[0]) return fail("no device");
  s.ctx = ibv_open_device(list[0]);
  if (!s.ctx) return fail("ibv_open_device");
  struct ibv_port_attr port;
  if (ibv_query_port(s.ctx, 1, &port)) return fail("ibv_query_port");
  s.lid = port.lid;
  s.pd = ibv_alloc_pd(s.ctx);
  s.buf = aligned_alloc(4096, (size_t)QPS * REGION);
  if (!s.pd || !s.buf) return fail("alloc");
  for (size_t i = 0; i < (size_t)QPS * REGION; ++i) s.buf[i] = initiator ? pattern_initiator(i) : pattern_target(i);
  if (!initiator)
    for (uint32_t q = 0; q < QPS; ++q) memset(s.buf + q * REGION + ATOMICS, 0, 16);
  s.mr = ibv_reg_mr(s.pd, s.buf, (size_t)QPS * REGION,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  s.cq = ibv_create_cq(s.ctx, 2 * QPS * DEPTH, NULL, NULL, 0);
  if (!s.mr || !s.cq) return fail("ibv_reg_mr / ibv_create_cq");
  char mine[256] = "", theirs[256];
  int off = snprintf(mine, sizeof mine, "%u %u %llu", s.lid, s.mr->rkey, (unsigned long long)(uintptr_t)s.buf);
  for (uint32_t q = 0; q < QPS; ++q) {
    struct ibv_qp_init_attr init;
    memset(&init, 0, sizeof init);
    init.send_cq = init.recv_cq = s.cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = DEPTH;
    init.cap.max_recv_wr = DEPTH;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    s.qp[q] = ibv_create_qp(s.pd, &init);
    if (!s.qp[q]) return fail("ibv_create_qp");
    off += snprintf(mine + off, sizeof mine - (size_t)off, " %u", s.qp[q]->qp_num);
  }
  strcat(mine, "\n");
  if (write_file(dir, initiator ? "initiator.info" : "target.info", mine)) return fail("cannot write my info");
  if (wait_file(dir, initiator ? "target.info" : "initiator.info", theirs, sizeof theirs))
    return fail("no peer info in time");
  unsigned lid, rkey, qpn[QPS];
  unsigned long long addr;
  if (sscanf(theirs, "%u %u %llu %u %u %u %u", &lid, &rkey, &addr, &qpn[0], &qpn[1], &qpn[2], &qpn[3]) != 7)
    return fail("bad peer info");
  for (uint32_t q = 0; q < QPS; ++q) {
    if (connect_qp(s.qp[q], (uint16_t)lid, qpn[q], initiator ? 200 + q : 100 + q, initiator ? 100 + q : 200 + q))
      return fail("cannot connect a QP");
  }
  printf("rc_soak %s: %d QPs connected to lid %u\n", argv[1], QPS, lid);
  fflush(stdout);
  int rc;
  if (initiator) {
    remote_base = addr;
    remote_rkey = rkey;
    rc = run_initiator(&s, dir, ops);
  } else {
    rc = run_target(&s, dir, ops);
  }
  for (uint32_t q = 0; q < QPS; ++q) ibv_destroy_qp(s.qp[q]);
  ibv_destroy_cq(s.cq);
  ibv_dereg_mr(s.mr);
  ibv_dealloc_pd(s.pd);
  ibv_close_device(s.ctx);
  ibv_free_device_list(list);
  free(s.buf);
  return rc;
}
