/* A C program written only against the system <infiniband/verbs.h> (rdma-core 44) and linked to
 * softhca's libibverbs.so.1: what an unmodified verbs application sees.
 *
 * It lists the devices, opens softhca_0, queries the device, port, GID and P_Key tables, and
 * builds PD, MR, CQ and an RC QP that it connects to itself (dest QPN = own QPN, DLID = own LID).
 * Over that loopback it does an 8-byte RDMA WRITE and an 8-byte SEND/RECV and checks the bytes
 * and the completions. It also checks libibverbs' answers to bad input:
 *   ibv_reg_mr with REMOTE_WRITE but no LOCAL_WRITE          -> NULL, errno EINVAL
 *   ibv_modify_qp RESET->INIT without IBV_QP_PORT             -> EINVAL, QP stays in RESET
 *   ibv_post_send / ibv_post_recv on a QP in RESET            -> EINVAL
 * It also checks the context's descriptors: async_fd is pollable (ibv_get_async_event on it, made
 * non-blocking, answers EAGAIN while no event is pending) and a completion channel has an fd.
 * Exit status 0 when everything holds; otherwise 1, with the failing check on stderr. */
#include <infiniband/verbs.h>

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEVICE_NAME "softhca_0"
#define PORT 1
#define BUF_BYTES 4096
#define POLL_TIMEOUT_S 10

static void fail(int line, const char *cond, const char *what) {
	fprintf(stderr, "c_api_smoke: FAIL at line %d: %s (%s); errno %d (%s)\n", line, what, cond,
		errno, strerror(errno));
	exit(1);
}

#define CHECK(cond, what)                          \
	do {                                       \
		if (!(cond))                       \
			fail(__LINE__, #cond, what); \
	} while (0)

static double seconds_since(const struct timespec *start) {
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) * 1e-9;
}

/* Polls one completion, failing after POLL_TIMEOUT_S seconds. */
static void poll_one(struct ibv_cq *cq, struct ibv_wc *wc, const char *what) {
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		CHECK(n >= 0, "ibv_poll_cq failed");
		if (n == 1) {
			if (wc->status != IBV_WC_SUCCESS)
				fprintf(stderr, "c_api_smoke: %s completed with '%s'\n", what,
					ibv_wc_status_str(wc->status));
			CHECK(wc->status == IBV_WC_SUCCESS, what);
			return;
		}
		CHECK(seconds_since(&start) < POLL_TIMEOUT_S, what);
		sched_yield();
	}
}

static int is_zero_gid(const union ibv_gid *gid) {
	static const union ibv_gid zero;
	return memcmp(gid, &zero, sizeof(zero)) == 0;
}

static void check_fd(int fd, const char *what) {
	CHECK(fd >= 0 && fcntl(fd, F_GETFD) != -1, what);
}

/* No asynchronous event is pending on a fresh context: non-blocking, the wait answers EAGAIN. */
static void check_async_events(struct ibv_context *ctx) {
	struct ibv_async_event event;
	int flags = fcntl(ctx->async_fd, F_GETFL);
	CHECK(flags != -1 && fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK) == 0,
	      "async_fd can be made non-blocking");
	errno = 0;
	CHECK(ibv_get_async_event(ctx, &event) == -1 && errno == EAGAIN,
	      "ibv_get_async_event on a non-blocking async_fd with no event is EAGAIN");
	CHECK(fcntl(ctx->async_fd, F_SETFL, flags) == 0, "async_fd flags restored");
}

static void check_comp_channel(struct ibv_context *ctx) {
	struct ibv_comp_channel *channel = ibv_create_comp_channel(ctx);
	CHECK(channel != NULL && channel->context == ctx, "ibv_create_comp_channel");
	check_fd(channel->fd, "a completion channel has an open fd");
	CHECK(ibv_destroy_comp_channel(channel) == 0, "ibv_destroy_comp_channel");
}

static struct ibv_device *find_device(struct ibv_device **list, int n) {
	for (int i = 0; i < n; ++i)
		if (strcmp(ibv_get_device_name(list[i]), DEVICE_NAME) == 0)
			return list[i];
	return NULL;
}

static void check_queries(struct ibv_context *ctx, struct ibv_port_attr *port) {
	struct ibv_device_attr dev;
	struct ibv_device_attr_ex dev_ex;
	union ibv_gid gid0;
	struct ibv_gid_entry entry;
	__be16 pkey;

	CHECK(ibv_query_device(ctx, &dev) == 0, "ibv_query_device");
	CHECK(dev.phys_port_cnt >= 1, "at least one port");
	CHECK(dev.node_guid != 0 && dev.sys_image_guid != 0, "non-zero node and system GUIDs");
	CHECK(dev.vendor_id != 0, "a vendor id");
	CHECK(dev.max_qp_rd_atom > 0, "RDMA READ/atomic responder resources");
	CHECK(dev.max_qp_wr >= 16 && dev.max_cqe >= 16 && dev.max_sge >= 1, "queue sizes");
	CHECK(dev.max_pkeys > 0, "a P_Key table");
	CHECK(ibv_query_device_ex(ctx, NULL, &dev_ex) == 0, "ibv_query_device_ex");
	CHECK(dev_ex.orig_attr.node_guid == dev.node_guid, "query_device_ex agrees with query_device");

	CHECK(ibv_query_port(ctx, PORT, port) == 0, "ibv_query_port");
	CHECK(port->state == IBV_PORT_ACTIVE, "port 1 ACTIVE");
	CHECK(port->link_layer == IBV_LINK_LAYER_INFINIBAND, "an InfiniBand link");
	CHECK(port->lid != 0, "a LID");
	CHECK(port->active_mtu >= IBV_MTU_1024, "active MTU of 1024 or more");
	CHECK(port->gid_tbl_len >= 2 && port->pkey_tbl_len >= 1, "GID and P_Key tables");
	CHECK(ibv_query_port(ctx, (uint8_t)(dev.phys_port_cnt + 1), port) == EINVAL,
	      "a port that does not exist is EINVAL");
	CHECK(ibv_query_port(ctx, PORT, port) == 0, "ibv_query_port again");

	/* GID 0: link-local prefix and a non-zero interface id (pyverbs skips zero ones). */
	CHECK(ibv_query_gid(ctx, PORT, 0, &gid0) == 0, "ibv_query_gid");
	CHECK(gid0.raw[0] == 0xfe && gid0.raw[1] == 0x80, "GID 0 has the link-local prefix");
	CHECK(gid0.global.interface_id != 0, "GID 0 has an interface id");
	CHECK(ibv_query_gid_ex(ctx, PORT, 0, &entry, 0) == 0, "ibv_query_gid_ex");
	CHECK(memcmp(&entry.gid, &gid0, sizeof(gid0)) == 0, "query_gid_ex agrees with query_gid");
	CHECK(entry.gid_type == IBV_GID_TYPE_IB && entry.port_num == PORT && entry.gid_index == 0,
	      "GID entry 0 is an IB GID of port 1");
	CHECK(ibv_query_gid_ex(ctx, PORT, 0, &entry, 1) == EINVAL, "query_gid_ex flags are EINVAL");
	CHECK(ibv_query_gid_ex(ctx, PORT, (uint32_t)port->gid_tbl_len, &entry, 0) == EINVAL,
	      "a GID index past the table is EINVAL");

	/* An empty slot: zeros from ibv_query_gid, ENODATA from ibv_query_gid_ex. */
	int empty = -1;
	for (int i = 1; i < port->gid_tbl_len && empty < 0; ++i) {
		union ibv_gid gid;
		CHECK(ibv_query_gid(ctx, PORT, i, &gid) == 0, "ibv_query_gid of every index");
		if (is_zero_gid(&gid))
			empty = i;
	}
	CHECK(empty > 0, "the GID table has an empty slot");
	CHECK(ibv_query_gid_ex(ctx, PORT, (uint32_t)empty, &entry, 0) == ENODATA,
	      "an empty GID slot is ENODATA");

	struct ibv_gid_entry table[64];
	size_t room = port->gid_tbl_len < 64 ? (size_t)port->gid_tbl_len : 64;
	ssize_t valid = ibv_query_gid_table(ctx, table, room, 0);
	CHECK(valid >= 1 && valid < port->gid_tbl_len, "ibv_query_gid_table lists the valid GIDs");
	CHECK(ibv_query_gid_table(ctx, table, 0, 0) == -EINVAL, "a GID table with no room is -EINVAL");

	CHECK(ibv_query_pkey(ctx, PORT, 0, &pkey) == 0, "ibv_query_pkey");
	CHECK(be16toh(pkey) == 0xffff, "P_Key 0 is the default full-member key");
	CHECK(ibv_get_pkey_index(ctx, PORT, pkey) == 0, "ibv_get_pkey_index finds it at 0");
}

static void check_bad_registration(struct ibv_pd *pd, char *buf) {
	volatile unsigned int variable_access = IBV_ACCESS_REMOTE_WRITE;
	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, BUF_BYTES, IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EINVAL,
	      "REMOTE_WRITE without LOCAL_WRITE is EINVAL (ibv_reg_mr)");
	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, BUF_BYTES, variable_access) == NULL && errno == EINVAL,
	      "REMOTE_WRITE without LOCAL_WRITE is EINVAL (ibv_reg_mr_iova2)");

	/* perftest always adds RELAXED_ORDERING (an optional bit a device may ignore). */
	variable_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, BUF_BYTES, variable_access);
	CHECK(mr != NULL, "RELAXED_ORDERING is accepted");
	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
}

static void check_reset_qp(struct ibv_qp *qp, struct ibv_mr *mr, char *buf) {
	struct ibv_qp_attr attr;
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr swr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1};
	struct ibv_send_wr *bad_swr = NULL;
	struct ibv_recv_wr *bad_rwr = NULL;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.pkey_index = 0;
	attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
	CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS) ==
		      EINVAL,
	      "RESET->INIT without IBV_QP_PORT is EINVAL");
	CHECK(qp->state == IBV_QPS_RESET, "a failed modify leaves the QP in RESET");

	CHECK(ibv_post_send(qp, &swr, &bad_swr) == EINVAL && bad_swr == &swr,
	      "ibv_post_send on a RESET QP is EINVAL");
	CHECK(ibv_post_recv(qp, &rwr, &bad_rwr) == EINVAL && bad_rwr == &rwr,
	      "ibv_post_recv on a RESET QP is EINVAL");
}

static void connect_to_self(struct ibv_qp *qp, const struct ibv_port_attr *port) {
	struct ibv_qp_attr attr;
	const uint32_t psn = 0x1234;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.pkey_index = 0;
	attr.port_num = PORT;
	attr.qp_access_flags =
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	CHECK(ibv_modify_qp(qp, &attr,
			    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "RESET->INIT");
	CHECK(qp->state == IBV_QPS_INIT, "qp->state follows the modify (INIT)");

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = IBV_MTU_1024;
	attr.dest_qp_num = qp->qp_num;
	attr.rq_psn = psn;
	attr.max_dest_rd_atomic = 1;
	attr.min_rnr_timer = 12;
	attr.ah_attr.is_global = 0;
	attr.ah_attr.dlid = port->lid;
	attr.ah_attr.sl = 0;
	attr.ah_attr.src_path_bits = 0;
	attr.ah_attr.port_num = PORT;
	CHECK(ibv_modify_qp(qp, &attr,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER) == 0,
	      "INIT->RTR");
	CHECK(qp->state == IBV_QPS_RTR, "qp->state follows the modify (RTR)");

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.sq_psn = psn; /* it talks to itself: the PSNs it sends are the ones it expects */
	attr.max_rd_atomic = 1;
	CHECK(ibv_modify_qp(qp, &attr,
			    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "RTR->RTS");
	CHECK(qp->state == IBV_QPS_RTS, "qp->state follows the modify (RTS)");

	struct ibv_qp_init_attr init;
	memset(&attr, 0, sizeof(attr));
	CHECK(ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_CAP, &init) == 0, "ibv_query_qp");
	CHECK(attr.qp_state == IBV_QPS_RTS, "ibv_query_qp reports RTS");
}

static void rdma_write_to_self(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *mr, char *buf) {
	static const char payload[8] = {'R', 'D', 'M', 'A', '-', 'W', 'R', '!'};
	char *src = buf;
	char *dst = buf + 1024;
	struct ibv_wc wc;

	memcpy(src, payload, sizeof(payload));
	memset(dst, 0, sizeof(payload));
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = sizeof(payload), .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 0x1001, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	wr.wr.rdma.remote_addr = (uintptr_t)dst;
	wr.wr.rdma.rkey = mr->rkey;
	CHECK(ibv_post_send(qp, &wr, &bad) == 0, "post RDMA WRITE");
	poll_one(cq, &wc, "RDMA WRITE completion");
	CHECK(wc.wr_id == 0x1001 && wc.opcode == IBV_WC_RDMA_WRITE, "RDMA WRITE completion fields");
	CHECK(memcmp(dst, payload, sizeof(payload)) == 0, "RDMA WRITE placed the 8 bytes");
}

static void send_to_self(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *mr, char *buf) {
	static const char payload[8] = {'s', 'e', 'n', 'd', '/', 'r', 'c', 'v'};
	char *src = buf + 512;
	char *dst = buf + 2048;
	int got_send = 0, got_recv = 0;

	memcpy(src, payload, sizeof(payload));
	memset(dst, 0, 64);
	struct ibv_sge rsge = {.addr = (uintptr_t)dst, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 0x2001, .sg_list = &rsge, .num_sge = 1};
	struct ibv_recv_wr *bad_rwr = NULL;
	CHECK(ibv_post_recv(qp, &rwr, &bad_rwr) == 0, "post RECV");

	struct ibv_sge ssge = {.addr = (uintptr_t)src, .length = sizeof(payload), .lkey = mr->lkey};
	struct ibv_send_wr swr = {.wr_id = 0x2002, .sg_list = &ssge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad_swr = NULL;
	CHECK(ibv_post_send(qp, &swr, &bad_swr) == 0, "post SEND");

	for (int i = 0; i < 2; ++i) {
		struct ibv_wc wc;
		poll_one(cq, &wc, "SEND/RECV completion");
		if (wc.opcode == IBV_WC_SEND) {
			CHECK(wc.wr_id == 0x2002 && !got_send, "one SEND completion with its wr_id");
			got_send = 1;
		} else {
			CHECK(wc.opcode == IBV_WC_RECV, "the other completion is the RECV");
			CHECK(wc.wr_id == 0x2001 && !got_recv, "one RECV completion with its wr_id");
			CHECK(wc.byte_len == sizeof(payload), "RECV byte_len is 8");
			CHECK(wc.qp_num == qp->qp_num, "RECV completion names the QP");
			got_recv = 1;
		}
	}
	CHECK(memcmp(dst, payload, sizeof(payload)) == 0, "SEND delivered the 8 bytes");
}

int main(void) {
	int num = -1;
	struct ibv_device **list = ibv_get_device_list(&num);
	CHECK(list != NULL, "ibv_get_device_list");
	CHECK(num >= 1 && list[num] == NULL, "a NULL-terminated list of at least one device");
	struct ibv_device *device = find_device(list, num);
	CHECK(device != NULL, "device " DEVICE_NAME " is listed (is this softhca's libibverbs?)");
	CHECK(device->node_type == IBV_NODE_CA && device->transport_type == IBV_TRANSPORT_IB,
	      "an InfiniBand channel adapter");
	CHECK(ibv_get_device_guid(device) != 0, "a node GUID");

	struct ibv_context *ctx = ibv_open_device(device);
	CHECK(ctx != NULL, "ibv_open_device");
	CHECK(ctx->device == device, "context->device");
	CHECK(ctx->num_comp_vectors >= 1, "at least one completion vector");
	check_fd(ctx->cmd_fd, "cmd_fd is an open descriptor");
	check_fd(ctx->async_fd, "async_fd is an open descriptor");

	struct ibv_port_attr port;
	check_queries(ctx, &port);
	check_async_events(ctx);
	check_comp_channel(ctx);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL && pd->context == ctx, "ibv_alloc_pd");
	char *buf = aligned_alloc(4096, BUF_BYTES);
	CHECK(buf != NULL, "buffer");
	memset(buf, 0, BUF_BYTES);
	check_bad_registration(pd, buf);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, BUF_BYTES,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ);
	CHECK(mr != NULL, "ibv_reg_mr");
	CHECK(mr->addr == buf && mr->length == BUF_BYTES && mr->pd == pd, "MR fields");

	struct ibv_cq *cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	CHECK(cq != NULL && cq->cqe >= 32 && cq->context == ctx, "ibv_create_cq");

	struct ibv_qp_init_attr init;
	memset(&init, 0, sizeof(init));
	init.send_cq = cq;
	init.recv_cq = cq;
	init.cap.max_send_wr = 16;
	init.cap.max_recv_wr = 16;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.qp_type = IBV_QPT_RC;
	struct ibv_qp *spare = ibv_create_qp(pd, &init);
	CHECK(spare != NULL, "ibv_create_qp (a QP left in RESET)");
	CHECK(spare->state == IBV_QPS_RESET && spare->qp_type == IBV_QPT_RC, "a new QP is in RESET");
	check_reset_qp(spare, mr, buf);

	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	CHECK(qp != NULL, "ibv_create_qp");
	CHECK(qp->qp_num != spare->qp_num, "QP numbers are unique");
	CHECK(init.cap.max_send_wr >= 16 && init.cap.max_recv_wr >= 16, "caps written back");
	connect_to_self(qp, &port);
	rdma_write_to_self(qp, cq, mr, buf);
	send_to_self(qp, cq, mr, buf);

	CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	CHECK(ibv_destroy_qp(spare) == 0, "ibv_destroy_qp (spare)");
	CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	ibv_free_device_list(list);
	free(buf);
	printf("c_api_smoke: OK\n");
	return 0;
}
