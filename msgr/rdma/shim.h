// Thin C wrappers around libfabric's inline functions and structs, so the Go
// side deals in plain integers and pointers. Every function returns a
// negative fi_errno on failure.
#ifndef OSPREY_RDMA_SHIM_H
#define OSPREY_RDMA_SHIM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_errno.h>

#define OSP_FI_VERSION FI_VERSION(1, 9)

// The memory-registration modes verbs needs; we always support them and
// honour whatever subset the provider asks for.
#define OSP_MR_MODES (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY)

static int osp_getinfo(const char *prov, const char *node, const char *service, int source,
                       struct fi_info **out) {
	struct fi_info *hints = fi_allocinfo();
	if (!hints) return -FI_ENOMEM;
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = 0; // we pass integers as contexts: no FI_CONTEXT
	hints->domain_attr->mr_mode = OSP_MR_MODES;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->domain_attr->control_progress = FI_PROGRESS_UNSPEC;
	hints->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
	hints->addr_format = FI_SOCKADDR_IN;
	if (prov && prov[0]) hints->fabric_attr->prov_name = strdup(prov);
	int rc = fi_getinfo(OSP_FI_VERSION, node, service, source ? FI_SOURCE : 0, hints, out);
	fi_freeinfo(hints);
	return rc;
}

static uint64_t osp_info_mr_mode(struct fi_info *i) { return i->domain_attr->mr_mode; }
static const char *osp_info_prov(struct fi_info *i) { return i->fabric_attr->prov_name; }
static const char *osp_info_domain(struct fi_info *i) { return i->domain_attr->name; }
static size_t osp_info_max_msg(struct fi_info *i) { return i->ep_attr->max_msg_size; }
static size_t osp_info_rx_size(struct fi_info *i) { return i->rx_attr->size; }
static size_t osp_info_tx_size(struct fi_info *i) { return i->tx_attr->size; }
// A send posted after an RDMA write is processed after it (FI_ORDER_SAW):
// the write rendezvous's RDV_DONE relies on it.
static int osp_info_saw(struct fi_info *i) { return (i->tx_attr->msg_order & FI_ORDER_SAW) != 0; }
static void *osp_info_handle(struct fi_info *i) { return i->handle; }

// osp_fabric_domain opens the fabric, domain, EQ and CQ; *wait_obj says
// which wait object the CQ got. FI_WAIT_POLLFD comes first: with it tcp
// drives progress with poll(2), where FI_WAIT_FD puts an epoll round and a
// wait-fd signal on every completion (2 to 3 us of a 64 B round trip here,
// docs/benchmarks.md). Providers without it (verbs, sockets) get
// FI_WAIT_FD, which verbs signals only when armed.
//
// The EQ is opened for fi_eq_write where the provider allows it
// (*eq_write), so osp_eq_wake can end a blocking read of it.
static int osp_fabric_domain(struct fi_info *info, struct fid_fabric **fab, struct fid_domain **dom,
                             struct fid_eq **eq, int *eq_write, struct fid_cq **cq, int cq_size, int *wait_obj) {
	int rc = fi_fabric(info->fabric_attr, fab, NULL);
	if (rc) return rc;
	rc = fi_domain(*fab, info, dom, NULL);
	if (rc) return rc;
	struct fi_eq_attr eqa = { .size = 256, .flags = FI_WRITE, .wait_obj = FI_WAIT_UNSPEC };
	*eq_write = 1;
	rc = fi_eq_open(*fab, &eqa, eq, NULL);
	if (rc) {
		eqa.flags = 0;
		*eq_write = 0;
		rc = fi_eq_open(*fab, &eqa, eq, NULL);
	}
	if (rc) return rc;
	// FORMAT_DATA: a receive from a shared receive context names its link
	// in the remote CQ data the sender attached (fi_senddata).
	static const enum fi_wait_obj waits[] = { FI_WAIT_POLLFD, FI_WAIT_FD, FI_WAIT_UNSPEC };
	for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++) {
		// FI_WAIT_UNSPEC last: no fd to poll, the poller falls back to sread.
		struct fi_cq_attr cqa = { .size = cq_size, .format = FI_CQ_FORMAT_DATA, .wait_obj = waits[i] };
		rc = fi_cq_open(*dom, &cqa, cq, NULL);
		*wait_obj = waits[i];
		// Any refusal moves on: providers differ in the error they give
		// for a wait object they lack; the last one's error is returned.
		if (rc == 0) break;
	}
	return rc;
}

static int osp_passive(struct fid_fabric *fab, struct fi_info *info, struct fid_eq *eq, struct fid_pep **pep) {
	int rc = fi_passive_ep(fab, info, pep, NULL);
	if (rc) return rc;
	rc = fi_pep_bind(*pep, &eq->fid, 0);
	if (rc) return rc;
	return fi_listen(*pep);
}

// osp_port returns the port of a bound endpoint (IPv4 or IPv6 sockaddr).
static int osp_port(fid_t fid) {
	struct sockaddr_storage ss;
	size_t len = sizeof(ss);
	int rc = fi_getname(fid, &ss, &len);
	if (rc) return rc;
	if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return -FI_EINVAL;
}

// osp_peer copies a connection's peer address into ss and returns its
// length, 0 if none is known: the endpoint's peer (fi_getpeer), when ep is
// given and the provider tells, else the connection request's source
// (dest_addr of the CONNREQ's info).
static size_t osp_peer(struct fid_ep *ep, struct fi_info *info, struct sockaddr_storage *ss) {
	size_t len = sizeof(*ss);
	// A provider may report the length the address needs, more than ss.
	if (ep && fi_getpeer(ep, ss, &len) == 0 && len <= sizeof(*ss)) return len;
	if (info && info->dest_addr && info->dest_addrlen <= sizeof(*ss)) {
		memcpy(ss, info->dest_addr, info->dest_addrlen);
		return info->dest_addrlen;
	}
	return 0;
}

// osp_srx opens the domain's shared receive context of size entries; the
// provider may not have one (-FI_ENOSYS and the like).
static int osp_srx(struct fid_domain *dom, struct fi_info *info, size_t size, struct fid_ep **srx) {
	struct fi_rx_attr attr = *info->rx_attr;
	attr.size = size;
	return fi_srx_context(dom, &attr, srx, NULL);
}
static size_t osp_info_cq_data(struct fi_info *i) { return i->domain_attr->cq_data_size; }

// osp_endpoint opens an endpoint on info; with srx, its receives come from
// that shared receive context.
static int osp_endpoint(struct fid_domain *dom, struct fi_info *info, struct fid_eq *eq, struct fid_cq *cq,
                        struct fid_ep *srx, struct fid_ep **ep) {
	if (srx) info->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
	int rc = fi_endpoint(dom, info, ep, NULL);
	if (rc) return rc;
	if (srx) {
		rc = fi_ep_bind(*ep, &srx->fid, 0);
		if (rc) return rc;
	}
	rc = fi_ep_bind(*ep, &eq->fid, 0);
	if (rc) return rc;
	rc = fi_ep_bind(*ep, &cq->fid, FI_TRANSMIT | FI_RECV);
	if (rc) return rc;
	return fi_enable(*ep);
}

static int osp_connect(struct fid_ep *ep, struct fi_info *info, const void *data, size_t len) {
	return fi_connect(ep, info->dest_addr, data, len);
}
static int osp_accept(struct fid_ep *ep, const void *data, size_t len) { return fi_accept(ep, data, len); }
static int osp_reject(struct fid_pep *pep, void *handle) { return fi_reject(pep, (fid_t)handle, NULL, 0); }
static int osp_shutdown(struct fid_ep *ep) { return fi_shutdown(ep, 0); }
static int osp_close(void *fid) { return fid ? fi_close((fid_t)fid) : 0; }

// osp_eq_wake queues an FI_NOTIFY event, which ends the CM loop's wait in
// fi_eq_sread (fabric.go, closeCM).
static int osp_eq_wake(struct fid_eq *eq) {
	struct fi_eq_entry e;
	memset(&e, 0, sizeof(e));
	ssize_t rc = fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0);
	return rc < 0 ? (int)rc : 0;
}

// osp_eq_read waits up to timeout_ms for a CM event. On success it returns
// the event and fills fid, info (for CONNREQ) and up to len bytes of
// connection data (*datalen). An error entry returns -FI_EAVAIL with fid and
// *err set.
static ssize_t osp_eq_read(struct fid_eq *eq, uint32_t *event, void **fid, struct fi_info **info,
                           void *data, size_t len, size_t *datalen, int *err, int timeout_ms) {
	size_t sz = sizeof(struct fi_eq_cm_entry) + len;
	struct fi_eq_cm_entry *e = calloc(1, sz);
	if (!e) return -FI_ENOMEM;
	ssize_t rc = fi_eq_sread(eq, event, e, sz, timeout_ms, 0);
	if (rc == -FI_EAVAIL) {
		struct fi_eq_err_entry ee;
		memset(&ee, 0, sizeof(ee));
		if (fi_eq_readerr(eq, &ee, 0) > 0) {
			*fid = ee.fid;
			*err = ee.err;
		}
		free(e);
		return -FI_EAVAIL;
	}
	if (rc >= (ssize_t)sizeof(struct fi_eq_cm_entry)) {
		*fid = e->fid;
		// info is defined for connection requests only; other events may
		// leave it uninitialised (the sockets provider does).
		*info = (*event == FI_CONNREQ) ? e->info : NULL;
		*datalen = rc - sizeof(struct fi_eq_cm_entry);
		if (*datalen > len) *datalen = len;
		memcpy(data, e->data, *datalen);
		rc = 0;
	} else if (rc >= 0) {
		*fid = e->fid;
		*info = NULL;
		*datalen = 0;
		rc = 0;
	}
	free(e);
	return rc;
}

// osp_mr_reg registers buf for sends, receives and RDMA reads both ways;
// with remote_write also as the target of a peer's RDMA write, which only a
// domain that does the write rendezvous grants (link.go).
static int osp_mr_reg(struct fid_domain *dom, void *buf, size_t len, uint64_t key, int remote_write,
                      struct fid_mr **mr, uintptr_t *desc, uint64_t *outkey) {
	uint64_t access = FI_SEND | FI_RECV | FI_READ | FI_REMOTE_READ;
	if (remote_write) access |= FI_WRITE | FI_REMOTE_WRITE;
	int rc = fi_mr_reg(dom, buf, len, access, 0, key, 0, mr, NULL);
	if (rc) return rc;
	*desc = (uintptr_t)fi_mr_desc(*mr);
	*outkey = fi_mr_key(*mr);
	return 0;
}


// One data-path operation queued on the Go side (msgr/rdma/post.go): kind 1
// receive (on an endpoint or a shared receive context), 2 send, 3 RDMA
// read, 4 send with remote CQ data, 5 RDMA write (the Go op constants and
// cKind); rc is its result. An RDMA write longer than chunk (when not 0) is
// posted as writes of chunk bytes; off is how much of it is posted.
struct osp_op {
	struct fid_ep *ep;
	void *buf;
	uint64_t len;
	uintptr_t desc;
	uint64_t raddr, rkey, ctx, data, chunk, off;
	int32_t kind, rc;
};

// osp_write posts the next piece of o's RDMA write, from o->off on: at
// most o->chunk bytes (all that is left when chunk is 0), with the op's
// context. It returns 1 while more is left, so that each piece is a cgo
// call of its own: on tcp here that more than halved the polls per 1 MiB
// payload and moved it 30% faster, where the same pieces posted in one
// call were slower than one write (docs/benchmarks.md, "Writes in
// pieces"). The tcp provider copies into the socket inside fi_write, so a
// long call is likely to lose its P to the Go runtime's sysmon.
static ssize_t osp_write(struct osp_op *o) {
	uint64_t n = o->len - o->off;
	if (o->chunk && n > o->chunk) n = o->chunk;
	ssize_t rc = fi_write(o->ep, (char *)o->buf + o->off, n, (void *)o->desc, 0, o->raddr + o->off, o->rkey,
	                      (void *)(uintptr_t)o->ctx);
	if (rc) return rc;
	o->off += n;
	return o->off < o->len;
}

// osp_post posts ops in order and returns how many the provider took; it
// stops at the first -FI_EAGAIN (that op and those after it stay queued)
// and after a write with more to post (its rc 1, off what it posted).
// Any other failure is left in the op's rc and posting goes on.
static int osp_post(struct osp_op *ops, int n) {
	for (int i = 0; i < n; i++) {
		struct osp_op *o = &ops[i];
		ssize_t rc;
		switch (o->kind) {
		case 1: rc = fi_recv(o->ep, o->buf, o->len, (void *)o->desc, 0, (void *)(uintptr_t)o->ctx); break;
		case 2: rc = fi_send(o->ep, o->buf, o->len, (void *)o->desc, 0, (void *)(uintptr_t)o->ctx); break;
		case 3: rc = fi_read(o->ep, o->buf, o->len, (void *)o->desc, 0, o->raddr, o->rkey, (void *)(uintptr_t)o->ctx); break;
		case 4: rc = fi_senddata(o->ep, o->buf, o->len, (void *)o->desc, o->data, 0, (void *)(uintptr_t)o->ctx); break;
		case 5: rc = osp_write(o); break;
		default: rc = -FI_EINVAL;
		}
		if (rc == -FI_EAGAIN) return i;
		o->rc = (int32_t)rc;
		if (rc == 1) return i;
	}
	return n;
}

// The completions one poll read, in C memory so the Go side passes no
// pointers of its own: contexts, lengths and remote CQ data (0 when the
// completion has none), or for an error entry its context and error.
// drained has bit i set when CQ i of the poll was read empty (-FI_EAGAIN),
// which releases the reservations of endpoints closed before the poll
// (msgr/rdma/cq.go); next is the CQ the next multi-CQ poll reads first.
struct osp_pollbuf {
	uint64_t ctx[64], lens[64], data[64], errctx, drained;
	int err, nposted, next;
};

// osp_cq_result turns the result of fi_cq_read/fi_cq_sread into what the
// Go side wants: the count (0 when empty) with the entries copied into pb,
// or -FI_EAVAIL with the failed op's context and error in pb.
static ssize_t osp_cq_result(struct fid_cq *cq, ssize_t rc, struct fi_cq_data_entry *e, struct osp_pollbuf *pb) {
	if (rc == -FI_EAGAIN) return 0;
	if (rc == -FI_EAVAIL) {
		struct fi_cq_err_entry ee;
		memset(&ee, 0, sizeof(ee));
		if (fi_cq_readerr(cq, &ee, 0) > 0) {
			pb->errctx = (uint64_t)(uintptr_t)ee.op_context;
			pb->err = ee.err;
		}
		return -FI_EAVAIL;
	}
	for (ssize_t i = 0; i < rc; i++) {
		pb->ctx[i] = (uint64_t)(uintptr_t)e[i].op_context;
		pb->lens[i] = e[i].len;
		pb->data[i] = (e[i].flags & FI_REMOTE_CQ_DATA) ? e[i].data : 0;
	}
	return rc;
}

// osp_poll is a poll's one cgo call: post what is queued (pb->nposted
// taken), then read up to 64 completions into pb without waiting.
//
// With several CQs (cqs[0..ncq)) it reads them in turn, starting one
// further each poll so that none waits behind a busy one, until 64
// completions are read; an error entry is returned alone, from the first
// CQ that has one when nothing was read before it.
static ssize_t osp_poll(struct fid_cq **cqs, int ncq, struct osp_op *ops, int nops, struct osp_pollbuf *pb) {
	pb->nposted = nops > 0 ? osp_post(ops, nops) : 0;
	struct fi_cq_data_entry e[64];
	if (ncq == 1) {
		ssize_t rc = fi_cq_read(cqs[0], e, 64);
		pb->drained = rc == -FI_EAGAIN;
		return osp_cq_result(cqs[0], rc, e, pb);
	}
	pb->drained = 0;
	ssize_t total = 0;
	int first = pb->next % ncq;
	pb->next = first + 1;
	for (int k = 0; k < ncq && total < 64; k++) {
		int i = (first + k) % ncq;
		ssize_t rc = fi_cq_read(cqs[i], e + total, 64 - total);
		if (rc == -FI_EAGAIN) {
			pb->drained |= 1ull << i;
		} else if (rc == -FI_EAVAIL) {
			if (total == 0) return osp_cq_result(cqs[i], rc, e, pb);
			break; // read on the next poll, which starts one further
		} else if (rc > 0) {
			total += rc;
		}
	}
	return osp_cq_result(cqs[0], total, e, pb);
}

// osp_cq_open opens one more completion queue of size entries for the
// domain's completion queue pool (msgr/rdma/cq.go). No wait object: the
// poller sleeps on the first CQ only and reads the others when it polls.
static int osp_cq_open(struct fid_domain *dom, int size, struct fid_cq **cq) {
	struct fi_cq_attr cqa = { .size = size, .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_NONE };
	return fi_cq_open(dom, &cqa, cq, NULL);
}

static int osp_cq_waitfd(struct fid_cq *cq, int *fd) { return fi_control(&cq->fid, FI_GETWAIT, fd); }
static int osp_cq_signal(struct fid_cq *cq) { return fi_cq_signal(cq); }
static int osp_trywait(struct fid_fabric *fab, struct fid_cq *cq) {
	struct fid *f = &cq->fid;
	return fi_trywait(fab, &f, 1);
}
// osp_cq_sread reads completions waiting up to timeout_ms, for providers
// without a pollable wait fd.
static ssize_t osp_cq_sread(struct fid_cq *cq, struct osp_pollbuf *pb, int timeout_ms) {
	struct fi_cq_data_entry e[64];
	return osp_cq_result(cq, fi_cq_sread(cq, e, 64, NULL, timeout_ms), e, pb);
}
#endif
