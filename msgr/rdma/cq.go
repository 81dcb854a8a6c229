//go:build rdma

package rdma

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// A completion queue must never hold more completions than it has entries:
// verbs does not detect an overrun (fi_verbs(7)), the CQ goes into error
// and completions are lost. So a CQ is never promised more than it holds.
// Each endpoint reserves, when it is created, the most completions it can
// have outstanding (linkCQEntries) in one of its domain's CQs; one that
// fits none gets a new CQ, up to maxCQs per domain, and past that the link
// is refused with a *CQFullError. The reservation is given back once the
// endpoint is closed and a read has found its CQ empty, since completions
// the endpoint left behind still take entries until they are read.
//
// The first CQ is the one the poller sleeps on; the others are opened
// without a wait object and read by every poll (osp_poll), so a link on
// one of them may wait up to a sleep (pollSleepMax) for its first
// completion after an idle spell, and rendezvous transfers keep the poller
// spinning (spinForTransfers).

// cqSlots is the most CQs a domain can have: the poll's C array and its
// drained bits (64 at most).
const cqSlots = 32

// maxCQs is how many CQs a domain opens before it refuses links
// (cqSlots; tests lower it).
var maxCQs = cqSlots

// maxWritesOut bounds the RDMA writes (pieces of a write rendezvous, one
// completion each) a link has posted and not seen complete: a peer's
// RDV_READYs are otherwise all that bounds them. It holds an honest peer's
// maxReads payloads of up to four pieces each (a 1 MiB payload on tcp is
// three), so it never holds back a write that the protocol allows.
const maxWritesOut = 4 * maxReads

// CQFullError is a link refused because its domain's completion queues
// have no room for the completions it could have outstanding.
type CQFullError struct {
	Need    int // entries the link would reserve
	Entries int // entries of each CQ (Config.CQEntries)
	CQs     int // CQs the domain has open
}

func (e *CQFullError) Error() string {
	if e.Need > e.Entries {
		return fmt.Sprintf("rdma: a link needs %d completion-queue entries, more than a CQ of %d holds (raise Config.CQEntries, or lower SendSlots or the receive window)", e.Need, e.Entries)
	}
	return fmt.Sprintf("rdma: completion queues full: %d CQs of %d entries have no room for a link's %d (raise Config.CQEntries)", e.CQs, e.Entries, e.Need)
}

// compQueue is one CQ of a domain and what is promised of it.
type compQueue struct {
	cq   *C.struct_fid_cq
	size int
	// Under cqPool.mu: entries promised to endpoints, closed ones
	// included until their completions are read; releases holds those
	// of closed endpoints, in the order they closed.
	reserved int
	releases []int
	// nrel is len(releases), read by the poller without the lock.
	nrel atomic.Int32
}

// cqPool is a domain's CQs. The poller reads cqs[:n] under the token; a CQ
// is added under the token too, so a poll sees an array that does not
// change under it.
type cqPool struct {
	mu  sync.Mutex
	qs  []*compQueue
	arr *[cqSlots]*C.struct_fid_cq // C memory: osp_poll's array
	n   C.int                      // CQs in arr (under the token)
	// many: n > 1, read without the token.
	many atomic.Bool
	// releasing counts releases waiting for a drained CQ, in all CQs: 0
	// keeps the poll's bookkeeping off the common path.
	releasing atomic.Int32
	// snap is, per CQ, the releases queued before a poll began: those a
	// poll that finds the CQ empty may settle (token holder's).
	snap [cqSlots]int32
}

func newCQPool() *cqPool {
	return &cqPool{arr: (*[cqSlots]*C.struct_fid_cq)(C.calloc(cqSlots, C.size_t(unsafe.Sizeof(uintptr(0)))))}
}

// linkCQEntries is the most completions a link can have outstanding: one
// per posted receive (its window and control receives, from its own queue
// or the shared pool, whose buffers it is credited for), per send buffer
// and control send buffer, and per RDMA operation in flight (linkRMAOut).
func linkCQEntries(recvs, sendSlots, ctlSlots int, writes bool) int {
	return recvs + sendSlots + ctlSlots + linkRMAOut(writes)
}

// linkRMAOut is the most RDMA operations a link has posted at once:
// maxPiecesOut read pieces, or maxWritesOut write pieces where the write
// rendezvous may be agreed.
func linkRMAOut(writes bool) int {
	if writes {
		return max(maxPiecesOut, maxWritesOut)
	}
	return maxPiecesOut
}

// take reserves n entries of the first CQ with room, or returns nil.
// Caller holds p.mu.
func (p *cqPool) take(n int) *compQueue {
	for _, q := range p.qs {
		if q.size-q.reserved >= n {
			q.reserved += n
			return q
		}
	}
	return nil
}

// add makes q the pool's next CQ. Caller holds p.mu and the token.
func (p *cqPool) add(q *compQueue) {
	p.qs = append(p.qs, q)
	p.arr[p.n] = q.cq
	p.n++
	p.many.Store(p.n > 1)
}

// reserveCQ promises n entries of one of the domain's CQs to a new link,
// opening a CQ when none has room. Releases of closed links waiting for
// their CQ to be read empty are settled first by a poll of our own, so
// that connection churn does not open CQs it does not need.
func (d *domain) reserveCQ(n int) (*compQueue, error) {
	p, size := d.cqs, d.t.cfg.CQEntries
	if n > size {
		return nil, &CQFullError{Need: n, Entries: size, CQs: d.numCQs()}
	}
	for try := 0; ; try++ {
		p.mu.Lock()
		q := p.take(n)
		p.mu.Unlock()
		if q != nil {
			return q, nil
		}
		if p.releasing.Load() > 0 && try < 4 {
			d.lockToken()
			if p.arr != nil { // the domain has not closed its CQs
				d.pollLocked()
			}
			d.fiMu.Unlock()
			continue
		}
		return d.openCQ(n)
	}
}

// openCQ opens another CQ and reserves n entries of it, or refuses the
// link when the domain has maxCQs open (or is closed).
func (d *domain) openCQ(n int) (*compQueue, error) {
	p, size := d.cqs, d.t.cfg.CQEntries
	d.lockToken()
	defer d.fiMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	// Another link may have opened one, or released room, meanwhile.
	if q := p.take(n); q != nil {
		return q, nil
	}
	if p.arr == nil {
		return nil, errTransportClosed
	}
	if len(p.qs) >= min(maxCQs, cqSlots) {
		return nil, &CQFullError{Need: n, Entries: size, CQs: len(p.qs)}
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, errTransportClosed
	}
	q := &compQueue{size: size, reserved: n}
	if err := fiErrI("fi_cq_open", C.osp_cq_open(d.dom, C.int(size), &q.cq)); err != nil {
		return nil, err
	}
	p.add(q)
	return q, nil
}

// unreserveCQ takes back n entries of q at once: the link's endpoint never
// took an operation.
func (d *domain) unreserveCQ(q *compQueue, n int) {
	d.cqs.mu.Lock()
	q.reserved -= n
	d.cqs.mu.Unlock()
}

// releaseCQ gives back n entries of q once the endpoint that had them is
// closed (no completion of it can come any more) and the CQ has been read
// empty since (none of it is left in the queue).
func (d *domain) releaseCQ(q *compQueue, n int) {
	p := d.cqs
	p.mu.Lock()
	q.releases = append(q.releases, n)
	q.nrel.Store(int32(len(q.releases)))
	p.releasing.Add(1)
	p.mu.Unlock()
}

// snapReleases notes, before a poll, the releases each CQ has queued.
// Caller holds the token.
func (p *cqPool) snapReleases() bool {
	if p.releasing.Load() == 0 {
		return false
	}
	for i, q := range p.qs[:p.n] {
		p.snap[i] = q.nrel.Load()
	}
	return true
}

// settleReleases frees the releases noted by snapReleases of the CQs the
// poll found empty (bits of drained). Caller holds the token.
func (p *cqPool) settleReleases(drained uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, q := range p.qs[:p.n] {
		k := int(p.snap[i])
		if drained&(1<<i) == 0 || k == 0 {
			continue
		}
		for _, n := range q.releases[:k] {
			q.reserved -= n
		}
		m := copy(q.releases, q.releases[k:])
		clear(q.releases[m:])
		q.releases = q.releases[:m]
		q.nrel.Store(int32(m))
		p.releasing.Add(-int32(k))
	}
}

// numCQs is how many CQs the domain has open.
func (d *domain) numCQs() int {
	d.cqs.mu.Lock()
	defer d.cqs.mu.Unlock()
	return len(d.cqs.qs)
}

// cqReserved is the entries promised in all of the domain's CQs.
func (d *domain) cqReserved() int64 {
	d.cqs.mu.Lock()
	defer d.cqs.mu.Unlock()
	var n int64
	for _, q := range d.cqs.qs {
		n += int64(q.reserved)
	}
	return n
}

// close closes the CQs, the extra ones first, and frees the C array;
// after every endpoint of the domain is closed. Caller holds the token
// (reserveCQ polls under it while the CQs are open).
func (p *cqPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.qs) - 1; i >= 0; i-- {
		C.osp_close(unsafe.Pointer(p.qs[i].cq))
	}
	p.qs = nil
	p.n = 0
	C.free(unsafe.Pointer(p.arr))
	p.arr = nil
}
