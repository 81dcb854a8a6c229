//go:build rdma

package rdma

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/internal/invariants"
	"github.com/ospreystore/osprey/msgr/wire"
)

// A shared receive context (fi_srx_context) holds the receive buffers of
// every link of a domain that uses it, instead of one receive queue per
// endpoint. Credits stay exact: a link that joins reserves its window W in
// the pool, the pool is grown (registered and posted) until it holds at
// least the sum of the reservations, and a buffer consumed on any link is
// posted back to the pool before the credit for it is returned. So the
// buffers posted never number fewer than the credits all peers hold
// together, and no sender can find the pool empty: no receiver-not-ready,
// as with per-endpoint queues.
//
// What sharing buys: one receive queue per NIC port instead of one per
// connection (on verbs, one SRQ instead of a receive queue per QP), and
// buffers that outlive connections: a link that closes leaves its share in
// the pool for the next, so connection churn registers nothing and nothing
// waits to be unmapped.
//
// A receive completion of the pool names a buffer, not an endpoint, so the
// sender attaches the receiver's link id (learned from the connection
// data) to every send as remote CQ data (fi_senddata), and the poller
// routes the completion by it. The frame format does not change.

// srxMaxBufs is the most buffers the pool may hold: the size asked of the
// shared receive context. A provider that cannot have that many (sockets:
// 256) has its links post their own receives.
const srxMaxBufs = 4096

type srxPool struct {
	d  *domain
	ep *C.struct_fid_ep

	mu       sync.Mutex
	n        int // buffers in the pool
	reserved int // credits promised to links
	regions  []*region
	// bufs and descs by pool slot, allocated once: a slot's entry is set
	// before its first post and never changes, so readers need no lock.
	bufs  []*wire.Buffer
	descs []C.uintptr_t

	out   atomic.Int64 // buffers handed up to links, not yet reposted
	slots slotLedger   // posted (invariants build)
	// owner is, in the invariants build, the link each buffer out was
	// routed to, whose recvLedger its return credits (returned).
	owner    []atomic.Pointer[link]
	closed   atomic.Bool
	postErrs atomic.Uint64 // reposts the provider refused: buffers lost to the pool
}

// openSRX opens the domain's shared receive context, or returns nil when the
// provider has none or cannot tell a receive's link (no remote CQ data).
func openSRX(d *domain) *srxPool {
	if d.t.cfg.NoSharedRecv || C.osp_info_cq_data(d.info) < 4 {
		return nil
	}
	s := &srxPool{d: d, bufs: make([]*wire.Buffer, srxMaxBufs), descs: make([]C.uintptr_t, srxMaxBufs), slots: newSlotLedger(srxMaxBufs)}
	if invariants.Enabled {
		s.owner = make([]atomic.Pointer[link], srxMaxBufs)
	}
	if C.osp_srx(d.dom, d.info, srxMaxBufs, &s.ep) != 0 {
		C.osp_close(unsafe.Pointer(s.ep))
		return nil
	}
	return s
}

var errSRXFull = errors.New("rdma: shared receive pool full")

// reserve promises n more credits to a new link, growing the pool so that
// it holds at least the sum of all promises, and returns once every new
// buffer is posted (before the link's connection is accepted or
// requested).
func (s *srxPool) reserve(n int) error {
	s.mu.Lock()
	grow := s.reserved + n - s.n
	if s.reserved+n > srxMaxBufs {
		s.mu.Unlock()
		return errSRXFull
	}
	if grow > 0 {
		bs := s.d.t.cfg.BufSize
		r, err := s.d.register(grow * bs)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		s.regions = append(s.regions, r)
		for i := range grow {
			slot := uint32(s.n + i)
			s.bufs[slot] = wire.NewExternalBuffer(r.mem[i*bs:(i+1)*bs:(i+1)*bs], func(*wire.Buffer) { s.repost(slot) })
			s.bufs[slot].Lent = true
			s.descs[slot] = r.desc
			s.post(slot, false)
		}
		s.n += grow
	}
	s.reserved += n
	s.mu.Unlock()
	s.d.flushPosts()
	return nil
}

// unreserve takes back a closed link's promise; its buffers stay in the
// pool for the next link.
func (s *srxPool) unreserve(n int) {
	s.mu.Lock()
	s.reserved -= n
	s.mu.Unlock()
}

// endpoint is the context receives of the pool are posted to (nil: none).
func (s *srxPool) endpoint() *C.struct_fid_ep {
	if s == nil {
		return nil
	}
	return s.ep
}

// post queues a receive of the pool, lazily for a repost (postMaybeLater).
func (s *srxPool) post(slot uint32, lazy bool) {
	s.slots.posting("the shared pool", slot)
	b := s.bufs[slot].B
	s.d.postMaybeLater(postOp{kind: opRecv, slot: slot, buf: unsafe.Pointer(&b[:1][0]), n: len(b), desc: s.descs[slot]}, lazy)
}

// repost puts a buffer back in the pool when the frame in it is released;
// after the pool closed, the last one back frees the memory.
func (s *srxPool) repost(slot uint32) {
	s.returned(slot)
	s.bufs[slot].Reset(s.d.t.cfg.BufSize)
	out := s.out.Add(-1)
	if s.closed.Load() {
		if out == 0 {
			s.freeRegions()
		}
		return
	}
	s.post(slot, true)
}

// posted is the outcome of a queued pool receive.
func (s *srxPool) posted(err error) {
	switch {
	case err == nil:
		s.d.posted.Add(1)
	case !s.closed.Load():
		s.postErrs.Add(1)
	}
}

// complete routes a pool receive to the link its sender named. A frame for
// a link that is gone (or a peer that named none) gives its buffer back.
func (s *srxPool) complete(slot uint32, n int, data uint64, err error) {
	s.d.posted.Add(-1)
	s.out.Add(1)
	s.slots.completed("the shared pool", slot)
	if err != nil {
		// Cancelled as the pool closes, or a receive cut short when its
		// endpoint went (a peer that failed mid-frame): the buffer goes
		// back, or the pool would shrink below the credits it backs.
		s.repost(slot)
		return
	}
	v, _ := s.d.links.Load(uint32(data))
	l, _ := v.(*link)
	if l == nil || !l.srx || l.tag != data || l.dead.Load() {
		s.repost(slot)
		return
	}
	s.routed(slot, l)
	l.complete(opRecv, slot, n, nil)
	if l.dead.Load() {
		// Closed meanwhile: its reader may never take this one.
		l.drainRx()
	}
}

// close cancels the pool's receives; run after every link closed and the
// poller stopped. Memory still held by frames above is freed on its last
// release.
func (s *srxPool) close() {
	s.closed.Store(true)
	C.osp_close(unsafe.Pointer(s.ep))
	// Every link's receives were written off as it closed: what is left
	// posted is the pool's, and it is gone with the context.
	s.d.posted.Store(0)
	if s.out.Load() == 0 {
		s.freeRegions()
	}
}

func (s *srxPool) freeRegions() {
	s.mu.Lock()
	rs := s.regions
	s.regions = nil
	s.mu.Unlock()
	for _, r := range rs {
		r.free()
	}
}

// drainRx gives back the buffers of receives that reached a link after it
// closed: its reader stops at the close and would leave them.
func (l *link) drainRx() {
	for {
		select {
		case ev := <-l.rx:
			l.unread(ev)
		default:
			return
		}
	}
}
