/* The device view agrees with the verbs API (docs/device-view.md): for every device, reads the
 * files a stack would read under /sys/class/infiniband/<dev> and /sys/class/infiniband_verbs, checks
 * /dev/infiniband/uverbs<N> is a character device the user may open, and compares each value with
 * what ibv_query_device, ibv_query_port, ibv_query_gid and ibv_query_pkey return. Prints one line
 * per mismatch and exits 1 if there is any; 0 and "device view: N devices agree" otherwise. */
#include <endian.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures;

static void read_file(const char* path, char* buf, size_t len) {
	FILE* f = fopen(path, "r");
	buf[0] = '\0';
	if (f == NULL) return;
	if (fgets(buf, (int)len, f) == NULL) buf[0] = '\0';
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
}

static void expect(const char* dir, const char* file, const char* want) {
	char path[512], got[256];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	read_file(path, got, sizeof(got));
	if (strcmp(got, want) != 0) {
		printf("MISMATCH %s: file says '%s', verbs say '%s'\n", path, got, want);
		failures++;
	}
}

static void gid_str(const union ibv_gid* g, char* out) {
	for (int i = 0; i < 8; i++) sprintf(out + 5 * i, "%02x%02x%s", g->raw[2 * i], g->raw[2 * i + 1], i < 7 ? ":" : "");
}

int main(void) {
	int n = 0;
	struct ibv_device** list = ibv_get_device_list(&n);
	if (list == NULL || n == 0) {
		printf("no device\n");
		return 1;
	}
	for (int d = 0; d < n; d++) {
		const char* name = ibv_get_device_name(list[d]);
		char dir[256], buf[256];
		struct stat st;
		snprintf(buf, sizeof(buf), "/dev/infiniband/%s", list[d]->dev_name);
		if (stat(buf, &st) != 0 || !S_ISCHR(st.st_mode) || access(buf, R_OK | W_OK) != 0) {
			printf("MISMATCH %s is not a character device the user may open\n", buf);
			failures++;
		}
		snprintf(dir, sizeof(dir), "/sys/class/infiniband_verbs/%s", list[d]->dev_name);
		expect(dir, "ibdev", name);
		struct ibv_context* ctx = ibv_open_device(list[d]);
		struct ibv_device_attr attr;
		if (ctx == NULL || ibv_query_device(ctx, &attr) != 0) {
			printf("cannot query %s\n", name);
			return 1;
		}
		snprintf(dir, sizeof(dir), "/sys/class/infiniband/%s", name);
		const uint8_t* g = (const uint8_t*)&attr.node_guid;
		snprintf(buf, sizeof(buf), "%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]);
		expect(dir, "node_guid", buf);
		expect(dir, "fw_ver", attr.fw_ver);
		expect(dir, "node_type", "1: CA");
		for (int p = 1; p <= attr.phys_port_cnt; p++) {
			struct ibv_port_attr pa;
			if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0) {
				printf("cannot query port %d\n", p);
				return 1;
			}
			char pdir[320];
			snprintf(pdir, sizeof(pdir), "%s/ports/%d", dir, p);
			snprintf(buf, sizeof(buf), "%d: %s", pa.state, pa.state == IBV_PORT_ACTIVE ? "ACTIVE" : "?");
			expect(pdir, "state", buf);
			snprintf(buf, sizeof(buf), "0x%x", pa.lid);
			expect(pdir, "lid", buf);
			snprintf(buf, sizeof(buf), "0x%x", pa.sm_lid);
			expect(pdir, "sm_lid", buf);
			expect(pdir, "link_layer", pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand");
			for (int i = 0; i < pa.gid_tbl_len; i++) {
				union ibv_gid gid;
				if (ibv_query_gid(ctx, (uint8_t)p, i, &gid) != 0) break;
				char file[32];
				gid_str(&gid, buf);
				snprintf(file, sizeof(file), "gids/%d", i);
				expect(pdir, file, buf);
			}
			for (int i = 0; i < pa.pkey_tbl_len; i++) {
				uint16_t pkey;
				if (ibv_query_pkey(ctx, (uint8_t)p, i, &pkey) != 0) break;
				char file[32];
				snprintf(buf, sizeof(buf), "0x%04x", be16toh(pkey));
				snprintf(file, sizeof(file), "pkeys/%d", i);
				expect(pdir, file, buf);
			}
		}
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	if (failures == 0) printf("device view: %d devices agree\n", n);
	return failures == 0 ? 0 : 1;
}
