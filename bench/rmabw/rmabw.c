// rmabw: what each way of moving a rendezvous payload can reach on a
// libfabric provider. One process, two threads, both busy-polling: a 1 MiB
// stream with 16 in flight, as sends into posted receives (what the bench's
// raw-fabric row does), as RMA reads of the sender's registered buffers (the
// messenger's read rendezvous), as RMA writes into the receiver's (its write
// rendezvous), or as reads of 256 KiB pieces.
//
//   cc -O2 -o rmabw bench/rmabw/rmabw.c -lfabric -lpthread
//   ./rmabw 0 7811   # send/recv, port 7811 on 127.0.0.1
//   ./rmabw 1 7812   # RMA read
//   ./rmabw 2 7813   # RMA write
//   ./rmabw 3 7814   # RMA read, 4 x 256 KiB per MiB
//
// Provider: tcp (edit hints() for another). An experiment, not part of the
// build or the tests; docs/benchmarks.md has what it measured.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <sys/mman.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

#define SZ (1 << 20)
#define DEPTH 16
#define CHK(x) do { int _r = (int)(x); if (_r) { fprintf(stderr, "%s: %d %s\n", #x, _r, fi_strerror(-_r)); exit(1); } } while (0)

struct side {
	struct fid_fabric *fab; struct fid_domain *dom; struct fid_eq *eq; struct fid_cq *cq;
	struct fid_ep *ep; struct fid_mr *mr; char *mem; void *desc; uint64_t key;
};
static struct fi_info *hints(const char *port, int src) {
	struct fi_info *h = fi_allocinfo(), *info;
	h->ep_attr->type = FI_EP_MSG;
	h->caps = FI_MSG | FI_RMA;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->fabric_attr->prov_name = strdup("tcp");
	CHK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", port, src ? FI_SOURCE : 0, h, &info));
	fi_freeinfo(h);
	return info;
}
static void open_side(struct side *s, struct fi_info *info) {
	CHK(fi_fabric(info->fabric_attr, &s->fab, NULL));
	CHK(fi_domain(s->fab, info, &s->dom, NULL));
	struct fi_eq_attr ea = {.size = 16, .wait_obj = FI_WAIT_UNSPEC};
	CHK(fi_eq_open(s->fab, &ea, &s->eq, NULL));
	struct fi_cq_attr ca = {.size = 256, .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE};
	CHK(fi_cq_open(s->dom, &ca, &s->cq, NULL));
	s->mem = mmap(NULL, (size_t)SZ * DEPTH, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(s->mem, 1, (size_t)SZ * DEPTH);
	CHK(fi_mr_reg(s->dom, s->mem, (size_t)SZ * DEPTH, FI_SEND | FI_RECV | FI_READ | FI_REMOTE_READ | FI_WRITE | FI_REMOTE_WRITE, 0, 0, 0, &s->mr, NULL));
	s->desc = fi_mr_desc(s->mr);
	s->key = fi_mr_key(s->mr);
}
static void ep_open(struct side *s, struct fi_info *info) {
	CHK(fi_endpoint(s->dom, info, &s->ep, NULL));
	CHK(fi_ep_bind(s->ep, &s->eq->fid, 0));
	CHK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
	CHK(fi_enable(s->ep));
}
static struct side srv, cli;
static int got_srv[8], got_cli[8];
static struct fi_info *connreq;
static void pump(void) {
	struct fi_eq_cm_entry e;
	uint32_t ev;
	ssize_t rc = fi_eq_read(srv.eq, &ev, &e, sizeof e, 0);
	if (rc > 0) { got_srv[ev & 7] = 1; if (ev == FI_CONNREQ) connreq = e.info; }
	rc = fi_eq_read(cli.eq, &ev, &e, sizeof e, 0);
	if (rc > 0) got_cli[ev & 7] = 1;
}
static void wait_ev(struct side *s, uint32_t want, struct fi_info **info) {
	int *g = s == &srv ? got_srv : got_cli;
	while (!g[want & 7]) pump();
	if (info) *info = connreq;
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static volatile int stop, mode;
static int virt; // FI_MR_VIRT_ADDR: remote addresses are virtual, else offsets

// Target / sender thread: the client.
static void *cli_loop(void *arg) {
	struct fi_cq_entry e[16];
	int out = 0; uint64_t slot = 0;
	while (!stop) {
		if (mode == 0) { // send/recv: keep DEPTH sends in flight
			while (out < DEPTH) {
				ssize_t rc = fi_send(cli.ep, cli.mem + (slot % DEPTH) * SZ, SZ, cli.desc, 0, NULL);
				if (rc == -FI_EAGAIN) break;
				CHK(rc); out++; slot++;
			}
		}
		ssize_t n = fi_cq_read(cli.cq, e, 16);
		if (n > 0) out -= n;
	}
	return NULL;
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: rmabw 0|1|2|3 PORT  (0 send/recv, 1 RMA read, 2 RMA write, 3 RMA read in 256 KiB pieces)\n");
		return 2;
	}
	mode = atoi(argv[1]);
	if (mode < 0 || mode > 3) {
		fprintf(stderr, "rmabw: mode %s is not 0, 1, 2 or 3\n", argv[1]);
		return 2;
	}
	struct fi_info *si = hints(argv[2], 1);
	open_side(&srv, si);
	struct fid_pep *pep;
	CHK(fi_passive_ep(srv.fab, si, &pep, NULL));
	CHK(fi_pep_bind(pep, &srv.eq->fid, 0));
	CHK(fi_listen(pep));
	struct fi_info *ci = hints(argv[2], 0);
	virt = (ci->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
	open_side(&cli, ci);
	ep_open(&cli, ci);
	CHK(fi_connect(cli.ep, ci->dest_addr, NULL, 0));
	struct fi_info *ri;
	wait_ev(&srv, FI_CONNREQ, &ri);
	ep_open(&srv, ri);
	CHK(fi_accept(srv.ep, NULL, 0));
	wait_ev(&srv, FI_CONNECTED, NULL);
	wait_ev(&cli, FI_CONNECTED, NULL);

	struct fi_cq_entry e[16];
	int out = 0; uint64_t slot = 0, bytes = 0;
	if (mode == 0)
		for (int i = 0; i < DEPTH; i++) CHK(fi_recv(srv.ep, srv.mem + i * SZ, SZ, srv.desc, 0, (void *)(uintptr_t)i));
	pthread_t t;
	pthread_create(&t, NULL, cli_loop, NULL);
	double t0 = now(), tw = t0 + 0.3, tend = tw + 2.0;
	uint64_t wbytes = 0;
	for (;;) {
		double tn = now();
		if (tn > tend) break;
		if (wbytes == 0 && tn > tw) wbytes = bytes + 1;
		if (mode >= 1) {
			int chunks = mode == 3 ? 4 : 1; size_t csz = SZ / chunks;
			while (out < DEPTH * chunks) {
				uint64_t s = slot % (DEPTH * chunks);
				uint64_t raddr = (virt ? (uint64_t)(uintptr_t)cli.mem : 0) + s * csz;
				ssize_t rc = mode == 2 ? fi_write(srv.ep, srv.mem + s * csz, csz, srv.desc, 0, raddr, cli.key, (void *)(uintptr_t)s)
					: fi_read(srv.ep, srv.mem + s * csz, csz, srv.desc, 0, raddr, cli.key, (void *)(uintptr_t)s);
				if (rc == -FI_EAGAIN) break;
				CHK(rc); out++; slot++;
			}
		}
		ssize_t n = fi_cq_read(srv.cq, e, 16);
		if (n == -FI_EAVAIL) { struct fi_cq_err_entry ee = {0}; fi_cq_readerr(srv.cq, &ee, 0); fprintf(stderr, "cq err %d %s\n", ee.err, fi_strerror(ee.err)); exit(1); }
		for (ssize_t i = 0; i < n; i++) {
			bytes += mode == 3 ? SZ / 4 : SZ;
			if (mode == 0) CHK(fi_recv(srv.ep, srv.mem + (uintptr_t)e[i].op_context * SZ, SZ, srv.desc, 0, e[i].op_context));
			else out--;
		}
	}
	double el = now() - tw;
	stop = 1;
	pthread_join(t, NULL);
	static const char *names[] = {"send/recv", "rma read", "rma write", "rma read 4x256KiB"};
	printf("%s: %.2f GB/s\n", names[mode], (double)(bytes - (wbytes - 1)) / el / 1e9);
	return 0;
}
