/* Two processes with one RC QP each, written against the public verbs API only:
 *   rc_stream target DIR          registers a buffer for remote writes, then waits to be killed
 *   rc_stream sender DIR COUNT    RDMA WRITEs COUNT times (0: until an error) into the target
 * The peers swap addresses through files in DIR (written whole, then renamed). The sender uses
 * timeout 14 (67 ms) and retry_cnt 7, like ibv_rc_pingpong. It prints the status of the first
 * failed completion ("error status N (text)") and exits 2 on it, 0 when COUNT writes completed,
 * 1 on any setup failure. Used by sigkill.sh: killing the target mid-transfer must end the sender
 * with IBV_WC_RETRY_EXC_ERR, not a hang. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUF_BYTES 65536
#define MSG_BYTES 4096
#define DEPTH 16

struct peer_info {
  uint32_t lid, qpn, psn, rkey;
  uint64_t addr;
};

static int die(const char *what) {
  fprintf(stderr, "rc_stream: %s\n", what);
  return 1;
}

static int write_info(const char *dir, const char *role, const struct peer_info *info) {
  char tmp[512], path[512];
  snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, role);
  snprintf(path, sizeof path, "%s/%s.info", dir, role);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  fprintf(f, "%u %u %u %u %llu\n", info->lid, info->qpn, info->psn, info->rkey,
          (unsigned long long)info->addr);
  if (fclose(f) != 0) return -1;
  return rename(tmp, path);
}

/* Waits up to 20 s for the peer's file. */
static int read_info(const char *dir, const char *role, struct peer_info *info) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.info", dir, role);
  for (int i = 0; i < 2000; ++i) {
    FILE *f = fopen(path, "r");
    if (f) {
      unsigned long long addr = 0;
      int n = fscanf(f, "%u %u %u %u %llu", &info->lid, &info->qpn, &info->psn, &info->rkey, &addr);
      fclose(f);
      info->addr = addr;
      if (n == 5) return 0;
    }
    usleep(10000);
  }
  return -1;
}

static int connect_qp(struct ibv_qp *qp, const struct peer_info *remote, uint32_t my_psn) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote->qpn;
  a.rq_psn = remote->psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = (uint16_t)remote->lid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = my_psn;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

int main(int argc, char **argv) {
  if (argc < 3) return die("usage: rc_stream target|sender DIR [COUNT]");
  const int sender = strcmp(argv[1], "sender") == 0;
  const char *dir = argv[2];
  const long count = argc > 3 ? atol(argv[3]) : 0;

  struct ibv_device **list = ibv_get_device_list(NULL);
  if (!list || !list[0]) return die("no device");
  struct ibv_context *ctx = ibv_open_device(list[0]);
  if (!ctx) return die("ibv_open_device");
  struct ibv_port_attr port;
  if (ibv_query_port(ctx, 1, &port)) return die("ibv_query_port");
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  void *buf = aligned_alloc(4096, BUF_BYTES);
  if (!pd || !buf) return die("alloc");
  memset(buf, sender ? 0x5a : 0, BUF_BYTES);
  struct ibv_mr *mr = ibv_reg_mr(pd, buf, BUF_BYTES, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  struct ibv_cq *cq = ibv_create_cq(ctx, 2 * DEPTH, NULL, NULL, 0);
  if (!mr || !cq) return die("ibv_reg_mr / ibv_create_cq");
  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof init);
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = DEPTH;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  struct ibv_qp *qp = ibv_create_qp(pd, &init);
  if (!qp) return die("ibv_create_qp");

  const uint32_t psn = sender ? 100 : 200;
  struct peer_info me = {port.lid, qp->qp_num, psn, mr->rkey, (uint64_t)(uintptr_t)buf};
  struct peer_info remote;
  if (write_info(dir, argv[1], &me)) return die("cannot write my info");
  if (read_info(dir, sender ? "target" : "sender", &remote)) return die("no peer info within 20 s");
  if (connect_qp(qp, &remote, psn)) return die("cannot connect the QP");
  printf("rc_stream %s: qpn %u connected to lid %u qpn %u\n", argv[1], qp->qp_num, remote.lid, remote.qpn);
  fflush(stdout);

  if (!sender) {
    for (;;) pause(); /* a passive target: its memory is written by the sender's HCA */
  }

  long posted = 0, done = 0;
  struct ibv_wc wc[DEPTH];
  while (count == 0 || done < count) {
    while (posted - done < DEPTH && (count == 0 || posted < count)) {
      struct ibv_sge sge = {(uint64_t)(uintptr_t)buf, MSG_BYTES, mr->lkey};
      struct ibv_send_wr wr, *bad;
      memset(&wr, 0, sizeof wr);
      wr.wr_id = (uint64_t)posted;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = remote.addr + (uint64_t)(posted % (BUF_BYTES / MSG_BYTES)) * MSG_BYTES;
      wr.wr.rdma.rkey = remote.rkey;
      if (ibv_post_send(qp, &wr, &bad)) return die("ibv_post_send");
      ++posted;
    }
    int n = ibv_poll_cq(cq, DEPTH, wc);
    if (n < 0) return die("ibv_poll_cq");
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        printf("rc_stream sender: error status %d (%s) after %ld writes\n", wc[i].status,
               ibv_wc_status_str(wc[i].status), done);
        fflush(stdout);
        return 2;
      }
      ++done;
    }
  }
  printf("rc_stream sender: %ld writes completed\n", done);
  fflush(stdout);
  ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  free(buf);
  return 0;
}
