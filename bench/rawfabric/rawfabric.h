// The raw libfabric baseline: two connected FI_EP_MSG endpoints in one
// process, each with its own fabric, domain, event queue and completion
// queue, driven by loops in C that busy-poll fi_cq_read as fi_pingpong and
// fi_msg_bw do. Go calls a loop for a bounded time and gets back the
// latencies of the messages it completed, so the cgo call costs nothing per
// message.
//
// The getinfo hints follow msgr/rdma's osp_getinfo (MSG endpoints, the
// memory-registration modes verbs needs, integer contexts), with FI_MSG
// only and FI_THREAD_DOMAIN, because each side's domain is driven by one
// thread. Every function returns 0 or a count on success and a negative
// fi_errno on failure, with the failing call's name in the side's errop.
#ifndef OSPREY_RAWFABRIC_H
#define OSPREY_RAWFABRIC_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define RF_FI_VERSION FI_VERSION(1, 9)
#define RF_MR_MODES (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY)
// Every message starts with a header: u64 id, i64 send time (CLOCK_MONOTONIC ns).
#define RF_HDR 16
// Completions read per fi_cq_read.
#define RF_CQ_BATCH 32

enum { RF_OP_SEND = 1, RF_OP_RECV = 2 };

static inline void *rf_ctx(int op, uint32_t slot) { return (void *)(uintptr_t)((uint64_t)op << 32 | slot); }
static inline int rf_ctx_op(void *ctx) { return (int)((uintptr_t)ctx >> 32); }
static inline uint32_t rf_ctx_slot(void *ctx) { return (uint32_t)(uintptr_t)ctx; }

static inline int64_t rf_now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int rf_getinfo(const char *prov, const char *node, const char *service, int source, struct fi_info **out) {
	struct fi_info *hints = fi_allocinfo();
	if (!hints) return -FI_ENOMEM;
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG;
	hints->mode = 0; // integer contexts: no FI_CONTEXT
	hints->domain_attr->mr_mode = RF_MR_MODES;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->domain_attr->control_progress = FI_PROGRESS_UNSPEC;
	hints->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
	hints->addr_format = FI_SOCKADDR_IN;
	if (prov && prov[0]) hints->fabric_attr->prov_name = strdup(prov);
	int rc = fi_getinfo(RF_FI_VERSION, node, service, source ? FI_SOURCE : 0, hints, out);
	fi_freeinfo(hints);
	return rc;
}

// rf_limits reports what the provider offers for MSG endpoints on node.
static int rf_limits(const char *prov, const char *node, uint64_t *max_msg, uint64_t *tx, uint64_t *rx,
                     uint64_t *mr_mode, char *name, size_t namelen) {
	struct fi_info *info = NULL;
	int rc = rf_getinfo(prov, node, "0", 1, &info);
	if (rc) return rc;
	*max_msg = info->ep_attr->max_msg_size;
	*tx = info->tx_attr->size;
	*rx = info->rx_attr->size;
	*mr_mode = info->domain_attr->mr_mode;
	snprintf(name, namelen, "%s", info->fabric_attr->prov_name ? info->fabric_attr->prov_name : "");
	fi_freeinfo(info);
	return 0;
}

// One end of the connection. Slots [0, nsend) of mem are send buffers,
// [nsend, nsend+nrecv) receive buffers, each slot_size bytes.
struct rf_side {
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_eq *eq;
	struct fid_cq *cq;
	struct fid_pep *pep;
	struct fid_ep *ep;
	struct fid_mr *mr;
	void *desc;
	char *mem;
	size_t memlen, slot_size, msg_len;
	uint32_t nsend, nrecv;
	int inject;                 // messages fit the provider's inject size: fi_inject, no send completions
	uint32_t *free_send, nfree; // stack of send slots not in flight
	uint32_t *pending, pend_head, pend_n; // server: received requests waiting for a send slot
	uint64_t outstanding;               // sends not completed
	uint64_t requests;                  // pingpong client: requests without a reply
	uint64_t next_id;
	int connected;
	const char *errop;
};

// The state both ends of a stream share: the sender keeps sent - received
// at most depth, and the receiver reposts a buffer before it counts it, so
// a send never finds no receive posted.
struct rf_shared {
	uint64_t sent, received;
	int sender_done, abort;
	int kick_cli, kick_srv; // set by rf_kick: the side's loop returns at once
};

struct rf_pair {
	struct rf_side srv, cli;
	struct rf_shared sh;
	int64_t *lat_srv, *lat_cli;
	size_t lat_cap;
};

static inline uint64_t rf_load(uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void rf_store(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline int rf_loadi(int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void rf_storei(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static inline int rf_fail(struct rf_side *s, const char *op, ssize_t rc) {
	if (!s->errop) s->errop = op;
	return rc < 0 ? (int)rc : -FI_EOTHER;
}

static inline char *rf_slot(struct rf_side *s, uint32_t slot) { return s->mem + (size_t)slot * s->slot_size; }

static int rf_close(void *fid) { return fid ? fi_close((fid_t)fid) : 0; }

static void rf_side_close(struct rf_side *s) {
	if (s->ep && s->connected) fi_shutdown(s->ep, 0);
	rf_close(s->ep);
	rf_close(s->pep);
	rf_close(s->mr);
	rf_close(s->cq);
	rf_close(s->eq);
	rf_close(s->dom);
	rf_close(s->fab);
	// Only now: the provider's progress, if it has threads, is gone.
	if (s->mem) munmap(s->mem, s->memlen);
	free(s->free_send);
	free(s->pending);
	memset(s, 0, sizeof(*s));
}

static void rf_pair_free(struct rf_pair *p) {
	if (!p) return;
	rf_side_close(&p->cli);
	rf_side_close(&p->srv);
	free(p->lat_srv);
	free(p->lat_cli);
	free(p);
}

// rf_side_open opens the fabric, domain, queues and registered buffers of
// one side from info.
static int rf_side_open(struct rf_side *s, struct fi_info *info, size_t msg_len, uint32_t nsend, uint32_t nrecv) {
	int rc = fi_fabric(info->fabric_attr, &s->fab, NULL);
	if (rc) return rf_fail(s, "fi_fabric", rc);
	rc = fi_domain(s->fab, info, &s->dom, NULL);
	if (rc) return rf_fail(s, "fi_domain", rc);
	struct fi_eq_attr eqa = {.size = 64, .wait_obj = FI_WAIT_UNSPEC};
	rc = fi_eq_open(s->fab, &eqa, &s->eq, NULL);
	if (rc) return rf_fail(s, "fi_eq_open", rc);
	struct fi_cq_attr cqa = {.size = 2 * (nsend + nrecv) + 64, .format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
	rc = fi_cq_open(s->dom, &cqa, &s->cq, NULL);
	if (rc) return rf_fail(s, "fi_cq_open", rc);
	s->msg_len = msg_len;
	s->slot_size = (msg_len + 63) & ~(size_t)63;
	s->nsend = nsend;
	s->nrecv = nrecv;
	s->memlen = s->slot_size * (nsend + nrecv);
	size_t page = 4096;
	s->memlen = (s->memlen + page - 1) & ~(page - 1);
	void *m = mmap(NULL, s->memlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		s->memlen = 0;
		return rf_fail(s, "mmap", -FI_ENOMEM);
	}
	s->mem = m;
	rc = fi_mr_reg(s->dom, s->mem, s->memlen, FI_SEND | FI_RECV, 0, 0, 0, &s->mr, NULL);
	if (rc) return rf_fail(s, "fi_mr_reg", rc);
	s->desc = fi_mr_desc(s->mr);
	s->free_send = calloc(nsend + 1, sizeof(uint32_t));
	s->pending = calloc(nrecv + 1, sizeof(uint32_t));
	if (!s->free_send || !s->pending) return rf_fail(s, "calloc", -FI_ENOMEM);
	for (uint32_t i = 0; i < nsend; i++) s->free_send[s->nfree++] = nsend - 1 - i;
	return 0;
}

static int rf_post_recv(struct rf_side *s, uint32_t slot) {
	// At most nrecv receives are ever posted, within the provider's queue,
	// so -FI_EAGAIN is not expected; retry a while before calling it an error.
	for (int tries = 0;; tries++) {
		ssize_t rc = fi_recv(s->ep, rf_slot(s, s->nsend + slot), s->slot_size, s->desc, 0, rf_ctx(RF_OP_RECV, slot));
		if (rc == 0) return 0;
		if (rc != -FI_EAGAIN || tries == 1000000) return rf_fail(s, "fi_recv", rc);
	}
}

static int rf_ep_open(struct rf_side *s, struct fi_info *info) {
	int rc = fi_endpoint(s->dom, info, &s->ep, NULL);
	if (rc) return rf_fail(s, "fi_endpoint", rc);
	rc = fi_ep_bind(s->ep, &s->eq->fid, 0);
	if (rc) return rf_fail(s, "fi_ep_bind(eq)", rc);
	rc = fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV);
	if (rc) return rf_fail(s, "fi_ep_bind(cq)", rc);
	rc = fi_enable(s->ep);
	if (rc) return rf_fail(s, "fi_enable", rc);
	// As fi_pingpong does: small messages are injected, which copies them
	// and generates no completion.
	s->inject = s->msg_len <= info->tx_attr->inject_size;
	for (uint32_t i = 0; i < s->nrecv; i++) {
		rc = rf_post_recv(s, i);
		if (rc) return rc;
	}
	return 0;
}

// rf_eq_poll reads one CM event without waiting: 1 with *event and
// *info (CONNREQ only) set, 0 if none, or a negative fi_errno.
static int rf_eq_poll(struct rf_side *s, uint32_t *event, struct fi_info **info) {
	struct fi_eq_cm_entry e;
	ssize_t rc = fi_eq_read(s->eq, event, &e, sizeof(e), 0);
	if (rc == -FI_EAGAIN) return 0;
	if (rc == -FI_EAVAIL) {
		struct fi_eq_err_entry ee;
		memset(&ee, 0, sizeof(ee));
		if (fi_eq_readerr(s->eq, &ee, 0) > 0 && ee.err) return rf_fail(s, "connect (eq error)", -ee.err);
		return rf_fail(s, "connect (eq error)", -FI_EOTHER);
	}
	if (rc < 0) return rf_fail(s, "fi_eq_read", rc);
	*info = (*event == FI_CONNREQ) ? e.info : NULL;
	if (*event != FI_CONNREQ && e.info) fi_freeinfo(e.info);
	return 1;
}

// rf_pair_open connects a client to a server on node (a local address,
// e.g. 127.0.0.1), both in this process, within timeout_ms. The server
// gets srv_send send and srv_recv receive slots, the client cli_send and
// cli_recv; every slot holds msg_len bytes. Receives are posted before the
// connection is accepted (server) or requested (client).
static int rf_pair_open(struct rf_pair **out, const char *prov, const char *node, size_t msg_len,
                        uint32_t srv_send, uint32_t srv_recv, uint32_t cli_send, uint32_t cli_recv,
                        size_t lat_cap, int timeout_ms, const char **errop) {
	struct rf_pair *p = calloc(1, sizeof(*p));
	struct fi_info *sinfo = NULL, *cinfo = NULL;
	char port[16];
	int rc;
	*errop = NULL;
	if (!p) return -FI_ENOMEM;
	p->lat_cap = lat_cap;
	p->lat_srv = calloc(lat_cap, sizeof(int64_t));
	p->lat_cli = calloc(lat_cap, sizeof(int64_t));
	if (!p->lat_srv || !p->lat_cli) {
		rc = rf_fail(&p->srv, "calloc", -FI_ENOMEM);
		goto fail;
	}

	rc = rf_getinfo(prov, node, "0", 1, &sinfo);
	if (rc) {
		rf_fail(&p->srv, "fi_getinfo (server)", rc);
		goto fail;
	}
	if ((rc = rf_side_open(&p->srv, sinfo, msg_len, srv_send, srv_recv))) goto fail;
	rc = fi_passive_ep(p->srv.fab, sinfo, &p->srv.pep, NULL);
	if (rc) {
		rf_fail(&p->srv, "fi_passive_ep", rc);
		goto fail;
	}
	if ((rc = fi_pep_bind(p->srv.pep, &p->srv.eq->fid, 0))) {
		rf_fail(&p->srv, "fi_pep_bind", rc);
		goto fail;
	}
	if ((rc = fi_listen(p->srv.pep))) {
		rf_fail(&p->srv, "fi_listen", rc);
		goto fail;
	}
	struct sockaddr_storage ss;
	size_t sslen = sizeof(ss);
	if ((rc = fi_getname(&p->srv.pep->fid, &ss, &sslen))) {
		rf_fail(&p->srv, "fi_getname", rc);
		goto fail;
	}
	if (ss.ss_family == AF_INET)
		snprintf(port, sizeof(port), "%d", ntohs(((struct sockaddr_in *)&ss)->sin_port));
	else if (ss.ss_family == AF_INET6)
		snprintf(port, sizeof(port), "%d", ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
	else {
		rc = rf_fail(&p->srv, "fi_getname (address family)", -FI_EINVAL);
		goto fail;
	}

	rc = rf_getinfo(prov, node, port, 0, &cinfo);
	if (rc) {
		rf_fail(&p->cli, "fi_getinfo (client)", rc);
		goto fail;
	}
	if ((rc = rf_side_open(&p->cli, cinfo, msg_len, cli_send, cli_recv))) goto fail;
	if ((rc = rf_ep_open(&p->cli, cinfo))) goto fail;
	if ((rc = fi_connect(p->cli.ep, cinfo->dest_addr, NULL, 0))) {
		rf_fail(&p->cli, "fi_connect", rc);
		goto fail;
	}

	// Both event queues are polled from here: some providers (tcp) make
	// connection progress only when their EQ is read.
	int64_t deadline = rf_now() + (int64_t)timeout_ms * 1000000;
	while (!p->srv.connected || !p->cli.connected) {
		uint32_t ev;
		struct fi_info *ci = NULL;
		rc = rf_eq_poll(&p->srv, &ev, &ci);
		if (rc < 0) goto fail;
		if (rc == 1 && ev == FI_CONNREQ) {
			if (p->srv.ep) { // only one connection is expected
				fi_reject(p->srv.pep, ci->handle, NULL, 0);
				fi_freeinfo(ci);
			} else {
				rc = rf_ep_open(&p->srv, ci);
				if (rc == 0 && (rc = fi_accept(p->srv.ep, NULL, 0))) rf_fail(&p->srv, "fi_accept", rc);
				fi_freeinfo(ci);
				if (rc) goto fail;
			}
		} else if (rc == 1 && ev == FI_CONNECTED) {
			p->srv.connected = 1;
		} else if (rc == 1 && ev == FI_SHUTDOWN) {
			rc = rf_fail(&p->srv, "connect (server shut down)", -FI_ECONNABORTED);
			goto fail;
		}
		rc = rf_eq_poll(&p->cli, &ev, &ci);
		if (rc < 0) goto fail;
		if (rc == 1 && ev == FI_CONNECTED) {
			p->cli.connected = 1;
		} else if (rc == 1 && ev == FI_SHUTDOWN) {
			rc = rf_fail(&p->cli, "connect (client shut down)", -FI_ECONNREFUSED);
			goto fail;
		}
		if (rf_now() > deadline) {
			rc = rf_fail(&p->cli, "connect (timed out)", -FI_ETIMEDOUT);
			goto fail;
		}
	}
	fi_freeinfo(sinfo);
	fi_freeinfo(cinfo);
	*out = p;
	return 0;
fail:
	*errop = p->srv.errop ? p->srv.errop : p->cli.errop;
	if (sinfo) fi_freeinfo(sinfo);
	if (cinfo) fi_freeinfo(cinfo);
	rf_pair_free(p);
	return rc ? rc : -FI_EOTHER;
}

// rf_cq_err reads the error entry behind -FI_EAVAIL.
static int rf_cq_err(struct rf_side *s) {
	struct fi_cq_err_entry ee;
	memset(&ee, 0, sizeof(ee));
	if (fi_cq_readerr(s->cq, &ee, 0) > 0 && ee.err) {
		const char *op = rf_ctx_op(ee.op_context) == RF_OP_SEND ? "send completion" : "receive completion";
		return rf_fail(s, op, -ee.err);
	}
	return rf_fail(s, "completion", -FI_EOTHER);
}

// rf_poll reads up to max completions into e; it returns the count, 0 if
// none, or a negative fi_errno.
static inline ssize_t rf_poll(struct rf_side *s, struct fi_cq_msg_entry *e, size_t max) {
	ssize_t n = fi_cq_read(s->cq, e, max);
	if (n >= 0) return n;
	if (n == -FI_EAGAIN) return 0;
	if (n == -FI_EAVAIL) return rf_cq_err(s);
	return rf_fail(s, "fi_cq_read", n);
}

// rf_post_send sends send slot's message; -FI_EAGAIN when the queue is
// full. Unless the message was injected, the slot is taken off the free
// stack (it must be its top) until its completion.
static inline ssize_t rf_post_send(struct rf_side *s, uint32_t slot) {
	ssize_t rc;
	if (s->inject) {
		rc = fi_inject(s->ep, rf_slot(s, slot), s->msg_len, 0);
		if (rc && rc != -FI_EAGAIN) return rf_fail(s, "fi_inject", rc);
		return rc;
	}
	rc = fi_send(s->ep, rf_slot(s, slot), s->msg_len, s->desc, 0, rf_ctx(RF_OP_SEND, slot));
	if (rc && rc != -FI_EAGAIN) return rf_fail(s, "fi_send", rc);
	if (rc == 0) {
		s->nfree--;
		s->outstanding++;
	}
	return rc;
}

static inline void rf_stamp(struct rf_side *s, uint32_t slot) {
	int64_t *h = (int64_t *)rf_slot(s, slot);
	h[0] = (int64_t)++s->next_id;
	h[1] = rf_now();
}

static inline int rf_check_recv(struct rf_side *s, struct fi_cq_msg_entry *e) {
	if (rf_ctx_op(e->op_context) != RF_OP_RECV || rf_ctx_slot(e->op_context) >= s->nrecv)
		return rf_fail(s, "completion (unexpected context)", -FI_EOTHER);
	if (e->len != s->msg_len) return rf_fail(s, "receive (wrong length)", -FI_EMSGSIZE);
	return 0;
}

static inline int rf_check_send(struct rf_side *s, struct fi_cq_msg_entry *e) {
	if (rf_ctx_op(e->op_context) != RF_OP_SEND || rf_ctx_slot(e->op_context) >= s->nsend)
		return rf_fail(s, "completion (unexpected context)", -FI_EOTHER);
	return 0;
}

// The loops below run for budget_ns (checked once per poll), or less as
// noted, and return early when the pair is aborted or their side kicked.

// rf_kicked consumes a kick.
static inline int rf_kicked(int *k) { return rf_loadi(k) && __atomic_exchange_n(k, 0, __ATOMIC_ACQ_REL); }

// rf_stream_send runs the stream's sender: it reaps send completions and
// sends while a send slot is free and fewer than depth messages are sent
// but not yet received. With drain set it sends nothing and returns once
// every send completed and every message arrived: it must keep polling
// until then, as that is what makes a provider with manual progress (tcp)
// send what it queued. It returns the messages not yet sent and received,
// or a negative fi_errno.
static ssize_t rf_stream_send(struct rf_pair *p, uint64_t depth, int drain, int64_t budget_ns) {
	struct rf_side *s = &p->cli;
	struct fi_cq_msg_entry e[RF_CQ_BATCH];
	int64_t end = rf_now() + budget_ns;
	uint64_t sent = p->sh.sent;
	for (;;) {
		ssize_t n = rf_poll(s, e, RF_CQ_BATCH);
		if (n < 0) return n;
		for (ssize_t i = 0; i < n; i++) {
			if (rf_check_send(s, &e[i])) return -FI_EOTHER;
			s->free_send[s->nfree++] = rf_ctx_slot(e[i].op_context);
			s->outstanding--;
		}
		if (drain) {
			if (s->outstanding == 0 && rf_load(&p->sh.received) == sent) return 0;
		} else {
			while (s->nfree > 0 && sent - rf_load(&p->sh.received) < depth) {
				uint32_t slot = s->free_send[s->nfree - 1];
				rf_stamp(s, slot);
				ssize_t rc = rf_post_send(s, slot);
				if (rc == -FI_EAGAIN) break;
				if (rc) return rc;
				rf_store(&p->sh.sent, ++sent);
			}
		}
		if (rf_loadi(&p->sh.abort) || rf_kicked(&p->sh.kick_cli) || rf_now() >= end) {
			uint64_t pending = sent - rf_load(&p->sh.received);
			return (ssize_t)(pending > s->outstanding ? pending : s->outstanding);
		}
	}
}

// rf_stream_recv runs the stream's receiver, returning early when the
// latency array is full or the sender is done and everything it sent
// arrived: every message is reposted, counted, and its one way latency
// written to lat_srv. It returns the number of latencies, or a negative
// fi_errno.
static ssize_t rf_stream_recv(struct rf_pair *p, int64_t budget_ns) {
	struct rf_side *s = &p->srv;
	struct fi_cq_msg_entry e[RF_CQ_BATCH];
	int64_t end = rf_now() + budget_ns;
	size_t k = 0;
	uint64_t received = p->sh.received;
	while (k < p->lat_cap) {
		size_t max = p->lat_cap - k < RF_CQ_BATCH ? p->lat_cap - k : RF_CQ_BATCH;
		ssize_t n = rf_poll(s, e, max);
		if (n < 0) return n;
		int64_t now = rf_now();
		for (ssize_t i = 0; i < n; i++) {
			if (rf_check_recv(s, &e[i])) return -FI_EOTHER;
			uint32_t slot = rf_ctx_slot(e[i].op_context);
			p->lat_srv[k++] = now - ((int64_t *)rf_slot(s, s->nsend + slot))[1];
			int rc = rf_post_recv(s, slot);
			if (rc) return rc;
		}
		if (n > 0) {
			received += n;
			rf_store(&p->sh.received, received);
		}
		if (rf_loadi(&p->sh.abort) || rf_kicked(&p->sh.kick_srv) || now >= end) break;
		if (n == 0 && rf_loadi(&p->sh.sender_done) && received == rf_load(&p->sh.sent)) break;
	}
	return (ssize_t)k;
}

// rf_pp_client runs the pingpong client, returning early when the latency
// array is full: it keeps depth requests outstanding (none new with stop
// set, returning once all are answered) and writes the round trip of every
// reply to lat_cli. It returns the number of latencies, or a negative
// fi_errno.
static ssize_t rf_pp_client(struct rf_pair *p, uint64_t depth, int stop, int64_t budget_ns) {
	struct rf_side *s = &p->cli;
	struct fi_cq_msg_entry e[RF_CQ_BATCH];
	int64_t end = rf_now() + budget_ns;
	size_t k = 0;
	while (k < p->lat_cap) {
		while (!stop && s->requests < depth && s->nfree > 0) {
			uint32_t slot = s->free_send[s->nfree - 1];
			rf_stamp(s, slot);
			ssize_t rc = rf_post_send(s, slot);
			if (rc == -FI_EAGAIN) break;
			if (rc) return rc;
			s->requests++;
		}
		size_t max = p->lat_cap - k < RF_CQ_BATCH ? p->lat_cap - k : RF_CQ_BATCH;
		ssize_t n = rf_poll(s, e, max);
		if (n < 0) return n;
		int64_t now = rf_now();
		for (ssize_t i = 0; i < n; i++) {
			uint32_t slot = rf_ctx_slot(e[i].op_context);
			if (rf_ctx_op(e[i].op_context) == RF_OP_SEND) {
				if (rf_check_send(s, &e[i])) return -FI_EOTHER;
				s->free_send[s->nfree++] = slot;
				s->outstanding--;
				continue;
			}
			if (rf_check_recv(s, &e[i])) return -FI_EOTHER;
			p->lat_cli[k++] = now - ((int64_t *)rf_slot(s, s->nsend + slot))[1];
			int rc = rf_post_recv(s, slot);
			if (rc) return rc;
			s->requests--;
		}
		if (stop && s->requests == 0) break;
		if (rf_loadi(&p->sh.abort) || rf_kicked(&p->sh.kick_cli) || now >= end) break;
	}
	return (ssize_t)k;
}

// rf_pp_server runs the pingpong server: every request is answered with a
// message of the same length carrying the request's header, sent from a
// send slot so that the receive is posted again at once. A request that
// finds no free send slot waits in pending, its receive not yet reposted,
// until a send completes. It returns 0 or a negative fi_errno.
static ssize_t rf_pp_server(struct rf_pair *p, int64_t budget_ns) {
	struct rf_side *s = &p->srv;
	struct fi_cq_msg_entry e[RF_CQ_BATCH];
	int64_t end = rf_now() + budget_ns;
	for (;;) {
		ssize_t n = rf_poll(s, e, RF_CQ_BATCH);
		if (n < 0) return n;
		for (ssize_t i = 0; i < n; i++) {
			uint32_t slot = rf_ctx_slot(e[i].op_context);
			if (rf_ctx_op(e[i].op_context) == RF_OP_SEND) {
				if (rf_check_send(s, &e[i])) return -FI_EOTHER;
				s->free_send[s->nfree++] = slot;
				s->outstanding--;
				continue;
			}
			if (rf_check_recv(s, &e[i])) return -FI_EOTHER;
			if (s->pend_n == s->nrecv) return rf_fail(s, "server (pending overflow)", -FI_EOTHER);
			s->pending[(s->pend_head + s->pend_n++) % s->nrecv] = slot;
		}
		while (s->pend_n > 0 && s->nfree > 0) {
			uint32_t r = s->pending[s->pend_head];
			uint32_t t = s->free_send[s->nfree - 1];
			memcpy(rf_slot(s, t), rf_slot(s, s->nsend + r), RF_HDR);
			ssize_t rc = rf_post_send(s, t);
			if (rc == -FI_EAGAIN) break;
			if (rc) return rc;
			s->pend_head = (s->pend_head + 1) % s->nrecv;
			s->pend_n--;
			if ((rc = rf_post_recv(s, r))) return rc;
		}
		if (rf_loadi(&p->sh.abort) || rf_kicked(&p->sh.kick_srv) || rf_now() >= end) return 0;
	}
}

static void rf_abort(struct rf_pair *p) { rf_storei(&p->sh.abort, 1); }
static void rf_kick(struct rf_pair *p) {
	rf_storei(&p->sh.kick_cli, 1);
	rf_storei(&p->sh.kick_srv, 1);
}
static int rf_aborted(struct rf_pair *p) { return rf_loadi(&p->sh.abort); }
static void rf_set_sender_done(struct rf_pair *p) { rf_storei(&p->sh.sender_done, 1); }
static int rf_sender_done(struct rf_pair *p) { return rf_loadi(&p->sh.sender_done); }
static uint64_t rf_sent(struct rf_pair *p) { return rf_load(&p->sh.sent); }
static uint64_t rf_received(struct rf_pair *p) { return rf_load(&p->sh.received); }
static uint64_t rf_requests(struct rf_side *s) { return s->requests; }

#endif
