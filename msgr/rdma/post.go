//go:build rdma

package rdma

/*
#include "shim.h"
*/
import "C"

import (
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Data-path calls into the provider (receives, sends, RDMA reads and
// completion reads) are made by one goroutine at a time, whoever holds the
// domain's token (domain.fiMu). The providers are opened FI_THREAD_SAFE, so
// concurrent calls would be correct, but they serialise them on internal
// mutexes: with a poller spinning in fi_cq_read and the writer and reader
// posting beside it, most of a round trip went to futex sleeps inside
// libfabric (perf: __lll_lock_wait behind nine context switches in ten).
//
// So a goroutine that wants to post queues the operation and, if the token
// is free, takes it and posts the whole queue itself, in one cgo call; if the
// poller (or another poster) holds it, the holder posts the queue before it
// lets go. The poller posts whatever is queued and reads completions in the
// same cgo call. One FIFO queue per domain keeps every link's operations in
// the order they were queued: a receive reposted before a credit grant is
// queued is posted before the send that carries the grant.

// postBatch is the most operations one cgo call posts.
const postBatch = 64

// postOp is one queued data-path operation. buf points into registered
// memory outside the Go heap. A receive with no link is one of the shared
// receive pool's (srx.go); a send with imm carries data as remote CQ data.
type postOp struct {
	l           *link
	kind        uint8 // opRecv, opSend, opRead, opWrite, opCtl
	slot        uint32
	buf         unsafe.Pointer
	n           int
	desc        C.uintptr_t
	raddr, rkey uint64
	imm         bool
	data        uint64
	// off is how much of a write the provider has taken: a write longer
	// than the domain's writeChunk goes as several, and a refusal with
	// FI_EAGAIN part way leaves the rest at the head of the queue.
	off int
}

// The C kinds of osp_post (shim.h) that differ from the Go ones.
const (
	cSend     = 2
	cSendData = 4 // a send with remote CQ data
)

// cKind is what osp_post does for op: a control frame is a send, and a send
// to a peer that receives from a shared pool carries its link tag.
func (op *postOp) cKind() C.int32_t {
	switch {
	case op.imm:
		return cSendData
	case op.kind == opCtl:
		return cSend
	}
	return C.int32_t(op.kind)
}

// postQueue is the domain's FIFO of operations not yet posted. Anyone
// pushes; only the token holder looks at or pops the head.
type postQueue struct {
	mu   sync.Mutex
	ops  []postOp
	head int
	n    atomic.Int32 // queued, readable without mu
}

func (q *postQueue) push(op postOp) {
	q.mu.Lock()
	if q.head > 0 && q.head >= len(q.ops)/2 {
		// Slide down rather than grow: the array is reused.
		k := copy(q.ops, q.ops[q.head:])
		clear(q.ops[k:])
		q.ops, q.head = q.ops[:k], 0
	}
	q.ops = append(q.ops, op)
	q.n.Add(1)
	q.mu.Unlock()
}

// poster is the token holder's state: the operations taken from the head
// of the queue for one cgo call and their C copies.
type poster struct {
	cops    *[postBatch]C.struct_osp_op // C memory, so no cgo pointer checks
	pb      *C.struct_osp_pollbuf       // completions of the holder's poll
	taken   [postBatch]postOp
	live    [postBatch]bool // taken[i] went into cops (its link was not dead)
	ntaken  int
	nlive   int
	liveIdx [postBatch]int // cops[j] is taken[liveIdx[j]]
	// held: the batch stops at a write whose link has maxWritesOut
	// pieces out; it waits at the head of the queue, as one the provider
	// refused with FI_EAGAIN, until completions free room.
	held bool
}

func newPoster() *poster {
	return &poster{
		cops: (*[postBatch]C.struct_osp_op)(C.calloc(postBatch, C.sizeof_struct_osp_op)),
		pb:   (*C.struct_osp_pollbuf)(C.calloc(1, C.sizeof_struct_osp_pollbuf)),
	}
}

func (p *poster) free() {
	if p.cops != nil {
		C.free(unsafe.Pointer(p.cops))
		C.free(unsafe.Pointer(p.pb))
		p.cops, p.pb = nil, nil
	}
}

// prepare copies up to postBatch operations from the head of the queue into
// C memory, leaving out those of links that have been closed (Close marks a
// link dead, then waits for the token, so none of its operations can be
// posted after Close has passed the token). It returns the number to post.
// Caller holds the token.
func (d *domain) preparePosts() C.int {
	p, q := d.poster, &d.pq
	p.ntaken, p.nlive, p.held = 0, 0, false
	if q.n.Load() == 0 {
		return 0
	}
	q.mu.Lock()
	p.ntaken = copy(p.taken[:], q.ops[q.head:])
	q.mu.Unlock()
	for i := range p.ntaken {
		op := &p.taken[i]
		ep, id := d.srx.endpoint(), uint32(0)
		if op.l != nil {
			ep, id = op.l.ep, op.l.id
			p.live[i] = !op.l.dead.Load()
		} else {
			p.live[i] = !d.srx.closed.Load()
		}
		if !p.live[i] {
			continue
		}
		if op.kind == opWrite && op.l.writesOut.Load() >= maxWritesOut {
			// Its completions must fit the link's CQ reservation.
			p.ntaken, p.held = i, true
			break
		}
		c := &p.cops[p.nlive]
		c.ep, c.buf, c.len, c.desc = ep, op.buf, C.uint64_t(op.n), op.desc
		c.raddr, c.rkey, c.ctx = C.uint64_t(op.raddr), C.uint64_t(op.rkey), ctxID(id, op.kind, op.slot)
		c.kind, c.rc, c.data = op.cKind(), 0, C.uint64_t(op.data)
		c.chunk, c.off = 0, C.uint64_t(op.off)
		if op.kind == opWrite {
			c.chunk = C.uint64_t(d.writeChunk)
		}
		p.liveIdx[p.nlive] = i
		p.nlive++
	}
	return C.int(p.nlive)
}

// settlePosts pops what the provider took (posted, failed, or dropped with a
// dead link) and tells the links; the rest stays at the head of the queue
// for the next call. It reports whether the provider refused one with
// FI_EAGAIN, and whether a write at the head posted a piece and has more
// (partial). Caller holds the token.
func (d *domain) settlePosts(nposted C.int) (again, partial bool) {
	p, q := d.poster, &d.pq
	if p.ntaken == 0 {
		return p.held, false
	}
	consumed := p.ntaken
	again = p.held
	if int(nposted) < p.nlive {
		// Refused for now, or a write with more pieces to post.
		partial = p.cops[nposted].rc == 1
		consumed, again = p.liveIdx[nposted], !partial
	}
	q.mu.Lock()
	clear(q.ops[q.head : q.head+consumed])
	q.head += consumed
	q.n.Add(-int32(consumed))
	if partial {
		q.ops[q.head].off = int(p.cops[nposted].off)
		q.ops[q.head].l.writesOut.Add(1)
		d.writePieces.Add(1)
	}
	q.mu.Unlock()
	j := 0
	for i := range consumed {
		op := &p.taken[i]
		var err error
		if p.live[i] {
			err = fiErr(opName[op.kind], C.ssize_t(p.cops[j].rc))
			j++
			if op.kind == opWrite && err == nil {
				op.l.writesOut.Add(1)
				d.writePieces.Add(1) // its last piece (osp_write posts one a call)
			}
		} else {
			err = net.ErrClosed
		}
		if op.l != nil {
			op.l.posted(op.kind, op.slot, err, p.live[i])
		} else {
			d.srx.posted(err)
		}
		*op = postOp{}
	}
	return again, partial
}

var opName = [...]string{opRecv: "fi_recv", opSend: "fi_send", opRead: "fi_read", opWrite: "fi_write", opCtl: "fi_send"}

// postQueued posts up to postBatch queued operations in one cgo call and
// reports whether the provider refused one for now. Caller holds the token.
func (d *domain) postQueued() (again bool) {
	d.pollStats.posts.Add(1) // under fiMu, as polls
	again, _ = d.settlePosts(C.osp_post(&d.poster.cops[0], d.preparePosts()))
	return again
}

// post queues op and, when no one is calling into the provider, posts the
// queue from this goroutine.
func (d *domain) post(op postOp) { d.postMaybeLater(op, false) }

// postMaybeLater queues op and, when lazy, leaves it there if a reader
// polls for the domain: a reposted receive then goes with that reader's
// next poll or with the send that usually follows the release of a frame,
// in one cgo call rather than one each. Nothing is stranded: the poller
// posts the queue before it sleeps, and takes the duty over from a reader
// that stopped polling.
func (d *domain) postMaybeLater(op postOp, lazy bool) {
	d.pq.push(op)
	if !lazy || d.pollDuty.Load() == nil {
		d.kickPosts()
	}
}

// kickPosts posts the queue if the token is free. Whoever holds it looks at
// the queue again after letting go, so an operation queued meanwhile is
// never stranded: the poller before it sleeps, a poster here.
func (d *domain) kickPosts() {
	for d.pq.n.Load() > 0 {
		if !d.fiMu.TryLock() {
			d.wakeSleeper() // the poller posts the queue once awake
			return
		}
		again := d.postQueued()
		d.fiMu.Unlock()
		if again {
			return // the provider's queues are full: the poller retries as completions free them
		}
	}
}

// flushPosts posts everything queued so far, waiting for the token and for
// room in the provider's queues: a new link's receives must be posted
// before the connection is accepted or requested.
func (d *domain) flushPosts() {
	for d.pq.n.Load() > 0 {
		d.lockToken()
		again := d.postQueued()
		d.fiMu.Unlock()
		if again {
			runtime.Gosched()
		}
	}
}

// passToken waits until no one is inside a post or completion read, so an
// endpoint marked dead before the call has nothing posted for it after.
func (d *domain) passToken() {
	d.lockToken()
	d.fiMu.Unlock() //nolint:staticcheck // an empty critical section is the point: a barrier
}

// posted is the outcome of a queued operation of the link: posted (err nil),
// refused by the provider, or dropped because the link was closed first.
func (l *link) posted(kind uint8, slot uint32, err error, tried bool) {
	switch kind {
	case opRecv:
		if err == nil {
			l.countPosted(1)
		} else if tried {
			l.fail(err)
		}
	case opSend:
		if err != nil {
			l.freeSendSlot(slot)
			if tried {
				l.fail(err)
			}
		}
	case opRead:
		if err == nil {
			l.readsPosted.Add(1)
		} else {
			select {
			case l.readDone <- readDoneEv{slot: slot, err: err}:
			default:
			}
		}
	case opCtl:
		if err != nil {
			l.ctlDone(slot)
			if tried {
				l.fail(err)
			}
		}
	case opWrite:
		// The peer's transfer waits for the RDV_DONE behind this write:
		// without the write, the link cannot go on.
		if err != nil && tried {
			l.fail(err)
		}
	}
}
