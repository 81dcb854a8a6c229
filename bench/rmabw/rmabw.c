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
//   ./rmabw 4 7815   # the messenger's write rendezvous: the sender's small
//                    # RTS, the receiver's READY naming a destination, the
//                    # sender's RMA write and its DONE (3 small sends per MiB)
//   ./rmabw 5 7816   # destinations advertised ahead: write, DONE, and the
//                    # receiver's FREE giving the slot back (2 small sends)
//   ./rmabw 6 7817   # mode 4 with fi_writedata: the write's remote CQ data
//                    # tells the receiver it is done, so no DONE send
//
// -DSZ=BYTES changes the payload size (default 1 MiB), e.g. to find where
// the kernel splits a payload into one more TCP segment (docs/benchmarks.md).
// -DCHUNK=BYTES makes modes 4 and 5 write each payload in pieces of at most
// that size, as the messenger does on tcp (Config.WriteChunk).
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

#ifndef SZ
#define SZ (1 << 20)
#endif
#define DEPTH 16
#define NSMALL 64
#define SMALL 64
#define MEMSZ ((size_t)SZ * DEPTH + 2 * NSMALL * SMALL)
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
	struct fi_cq_attr ca = {.size = 256, .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_NONE};
	CHK(fi_cq_open(s->dom, &ca, &s->cq, NULL));
	// DEPTH payload slots, then NSMALL small buffers for control sends and
	// NSMALL for control receives (modes 4 to 6).
	s->mem = mmap(NULL, MEMSZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(s->mem, 1, MEMSZ);
	CHK(fi_mr_reg(s->dom, s->mem, MEMSZ, FI_SEND | FI_RECV | FI_READ | FI_REMOTE_READ | FI_WRITE | FI_REMOTE_WRITE, 0, 0, 0, &s->mr, NULL));
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

// Control messages of modes 4 to 6: 16 bytes, {type, slot, addr}.
enum { RTS = 1, READY, DONE, FREE };
struct ctl { uint32_t type, slot; uint64_t addr; };
static char *small_tx(struct side *s, int i) { return s->mem + (size_t)SZ * DEPTH + (size_t)(i % NSMALL) * SMALL; }
static char *small_rx(struct side *s, int i) { return s->mem + (size_t)SZ * DEPTH + (size_t)(NSMALL + i) * SMALL; }
// Contexts: receives carry 1<<32 | buffer, writes 2<<32 | slot, sends 0.
#define RXCTX(i) ((void *)(uintptr_t)((1ull << 32) | (uint64_t)(i)))
#define WRCTX(i) ((void *)(uintptr_t)((2ull << 32) | (uint64_t)(i)))
static void post_small_rx(struct side *s) {
	for (int i = 0; i < NSMALL; i++) CHK(fi_recv(s->ep, small_rx(s, i), SMALL, s->desc, 0, RXCTX(i)));
}
// ctl_send sends a control message from the next small buffer; NSMALL
// buffers are more than the sends that can be in flight.
static void ctl_send(struct side *s, int *next, uint32_t type, uint32_t slot, uint64_t addr) {
	struct ctl *c = (struct ctl *)small_tx(s, (*next)++);
	c->type = type; c->slot = slot; c->addr = addr;
	ssize_t rc;
	// The transmit queue (1024 on tcp) outnumbers what is ever in flight.
	while ((rc = fi_send(s->ep, c, sizeof *c, s->desc, 0, NULL)) == -FI_EAGAIN) {}
	CHK(rc);
}
static uint64_t slot_addr(struct side *s, uint32_t slot) {
	return (virt ? (uint64_t)(uintptr_t)s->mem : 0) + (uint64_t)slot * SZ;
}
// write_payload writes slot's payload to raddr; in mode 6 the write carries
// the slot as remote CQ data, which stands for the DONE send.
#ifndef CHUNK
#define CHUNK SZ
#endif
static void write_payload(uint32_t slot, uint64_t raddr, uint64_t key) {
	char *buf = cli.mem + (size_t)slot * SZ;
	ssize_t rc;
	size_t off = 0;
	for (; mode != 6 && SZ - off > CHUNK; off += CHUNK) {
		while ((rc = fi_write(cli.ep, buf + off, CHUNK, cli.desc, 0, raddr + off, key, (void *)(uintptr_t)(3ull << 32))) == -FI_EAGAIN) {}
		CHK(rc);
	}
	buf += off; raddr += off;
	while ((rc = mode == 6 ? fi_writedata(cli.ep, buf, SZ, cli.desc, slot, 0, raddr, key, WRCTX(slot))
	                       : fi_write(cli.ep, buf, SZ - off, cli.desc, 0, raddr, key, WRCTX(slot))) == -FI_EAGAIN) {}
	CHK(rc);
}
static int cli_next;

// The sender of modes 4 to 6: keeps DEPTH payloads moving.
static void cli_proto(void) {
	struct fi_cq_data_entry e[16];
	int out = 0; uint64_t slot = 0;
	post_small_rx(&cli);
	while (!stop) {
		while (out < DEPTH) {
			uint32_t s = (uint32_t)(slot % DEPTH);
			if (mode == 4 || mode == 6) ctl_send(&cli, &cli_next, RTS, s, 0);
			else { write_payload(s, slot_addr(&srv, s), srv.key); ctl_send(&cli, &cli_next, DONE, s, 0); }
			out++; slot++;
		}
		ssize_t n = fi_cq_read(cli.cq, e, 16);
		for (ssize_t i = 0; i < n; i++) {
			uint64_t c = (uint64_t)(uintptr_t)e[i].op_context;
			if (c >> 32 == 2 && (mode == 4 || mode == 6)) out--; // the write is done: the source is free
			if (c >> 32 != 1) continue;
			int b = (int)(uint32_t)c;
			struct ctl *m = (struct ctl *)small_rx(&cli, b);
			if (m->type == READY) {
				write_payload(m->slot, m->addr, srv.key);
				if (mode != 6) ctl_send(&cli, &cli_next, DONE, m->slot, 0);
			} else if (m->type == FREE) out--;
			CHK(fi_recv(cli.ep, small_rx(&cli, b), SMALL, cli.desc, 0, RXCTX(b)));
		}
	}
}

// Target / sender thread: the client.
static void *cli_loop(void *arg) {
	struct fi_cq_data_entry e[16];
	int out = 0; uint64_t slot = 0;
	if (mode >= 4) { cli_proto(); return NULL; }
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
		fprintf(stderr, "usage: rmabw 0-6 PORT  (0 send/recv, 1 RMA read, 2 RMA write, 3 RMA read in 256 KiB pieces, "
				"4 write rendezvous, 5 write into advertised slots, 6 write rendezvous with fi_writedata)\n");
		return 2;
	}
	mode = atoi(argv[1]);
	if (mode < 0 || mode > 6) {
		fprintf(stderr, "rmabw: mode %s is not 0 to 6\n", argv[1]);
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

	struct fi_cq_data_entry e[16];
	int out = 0; uint64_t slot = 0, bytes = 0;
	if (mode == 0)
		for (int i = 0; i < DEPTH; i++) CHK(fi_recv(srv.ep, srv.mem + i * SZ, SZ, srv.desc, 0, (void *)(uintptr_t)i));
	int srv_next = 0;
	if (mode >= 4) post_small_rx(&srv);
	pthread_t t;
	pthread_create(&t, NULL, cli_loop, NULL);
	double t0 = now(), tw = t0 + 0.3, tend = tw + 2.0;
	uint64_t wbytes = 0;
	for (;;) {
		double tn = now();
		if (tn > tend) break;
		if (wbytes == 0 && tn > tw) wbytes = bytes + 1;
		if (mode >= 1 && mode <= 3) {
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
		for (ssize_t i = 0; i < n && mode >= 4; i++) {
			uint64_t c = (uint64_t)(uintptr_t)e[i].op_context;
			if (e[i].flags & FI_REMOTE_CQ_DATA) {
				bytes += SZ;
				if (c >> 32 == 1) { int b = (int)(uint32_t)c; CHK(fi_recv(srv.ep, small_rx(&srv, b), SMALL, srv.desc, 0, RXCTX(b))); }
				continue;
			}
			if (c >> 32 != 1) continue;
			int b = (int)(uint32_t)c;
			struct ctl *m = (struct ctl *)small_rx(&srv, b);
			if (m->type == RTS) ctl_send(&srv, &srv_next, READY, m->slot, slot_addr(&srv, m->slot));
			else if (m->type == DONE) {
				bytes += SZ;
				if (mode == 5) ctl_send(&srv, &srv_next, FREE, m->slot, 0);
			}
			CHK(fi_recv(srv.ep, small_rx(&srv, b), SMALL, srv.desc, 0, RXCTX(b)));
		}
		for (ssize_t i = 0; i < n && mode < 4; i++) {
			bytes += mode == 3 ? SZ / 4 : SZ;
			if (mode == 0) CHK(fi_recv(srv.ep, srv.mem + (uintptr_t)e[i].op_context * SZ, SZ, srv.desc, 0, e[i].op_context));
			else out--;
		}
	}
	double el = now() - tw;
	stop = 1;
	pthread_join(t, NULL);
	static const char *names[] = {"send/recv", "rma read", "rma write", "rma read 4x256KiB", "write rendezvous", "write into advertised slots", "write rendezvous, fi_writedata for DONE"};
	printf("%s: %.2f GB/s\n", names[mode], (double)(bytes - (wbytes - 1)) / el / 1e9);
	return 0;
}
