//go:build rdma

package rdma

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/wire"
)

// shutdownGrace is how long a peer's shutdown waits behind its last
// completions before peerShutDown's own poll to an empty queue: on a
// provider that moves data on a thread of its own (sockets) the CM event
// can come before the peer's last frames reach the CQ, and no poll of
// ours can hurry that thread. The side that closed a session waits
// through it for the end of its link, the peer's answer to its CLOSE.
const shutdownGrace = 100 * time.Millisecond

// drainTimeout bounds how long Close waits for posted sends to complete.
const drainTimeout = 500 * time.Millisecond

// readDrainTimeout bounds how long Close waits for the RDMA reads of ours
// still in flight where the provider must not see them at shutdown
// (domain.readsBreakClose); an endpoint whose reads outlast it is parked.
const readDrainTimeout = 500 * time.Millisecond

// sessCtlRecvs are the receives every link posts beside its window for
// the session's control frames under CONTROL_SLOTS (protocol.md §3.3,
// §13.2): the peer's one unanswered KEEPALIVE, its KEEPALIVE_ACK and its
// CLOSE, none of which takes a credit there. They are posted whatever the
// banners agree: a link posts its receives before the connection data
// says what the peer supports, and three buffers cost less than posting
// them later, once the connection is up and the peer may already send.
const sessCtlRecvs = 3

// link is one connected MSG endpoint. One credit of the session above is
// one of its posted receives: a receive buffer is posted again when the
// frame in it is released, before the credit for it is granted.
type link struct {
	d        *domain
	id       uint32
	ep       *C.struct_fid_ep
	features uint64
	lim      wire.Limits // in force: wire.HandshakeLimits until EndHandshake
	steady   wire.Limits
	noCRC    bool
	// dataChunk: wire.LinkOptions.DataChunk, the chunks a rendezvous
	// payload's CRCs are computed in (pendingRead.sum).
	dataChunk int
	bufSize   int
	inbound   *wire.InboundConn // the listener's accounting of this connection, or nil
	nrecv     int
	small     bool // wire.LinkOptions.SmallWindow: no write rendezvous either
	// sendLimit is the largest frame sent inline: our buffers and the
	// peer's, from the connection data, whichever is smaller.
	sendLimit int
	// ctlRecv: receives posted for the write rendezvous's control frames
	// (ctlRecvs when the domain offers it; sessCtlRecvs come beside
	// them); rdvWrite: the peer offers it too, so our rendezvous payloads
	// are written by the peer.
	ctlRecv  int
	rdvWrite bool
	// cq is the completion queue the endpoint is bound to, and cqNeed
	// the entries of it the link reserved (cq.go); writesOut counts its
	// RDMA write pieces posted and not completed (at most maxWritesOut).
	cq        *compQueue
	cqNeed    int
	writesOut atomic.Int32

	// srx: our receives come from the domain's shared pool (srx.go), and
	// recv/recvBufs are unused; peerSRX: the peer's do, so our sends
	// carry its link tag as remote CQ data. A tag is the link id and, where
	// the provider carries 8 bytes of CQ data, a random token the
	// completion must match: a peer cannot steer frames into another
	// link's session by naming its id.
	srx      bool
	tag      uint64
	peerSRX  bool
	peerTag  uint64
	recv     *region // recvs() receive buffers
	recvDesc C.uintptr_t
	recvBufs []*wire.Buffer
	send     *region // SendSlots send buffers, then ctlSlots control buffers
	sendFree chan uint32
	// draining: Close waits for posted sends (and reads, waitReads);
	// sendsIdle wakes it when the last send slot or the last read comes
	// back, or the link fails.
	draining  atomic.Bool
	sendsIdle chan struct{}
	// readsPosted: RDMA reads of ours the provider took and has not
	// completed (posted, complete).
	readsPosted atomic.Int32
	ctlFree     chan uint32

	rx       chan rxEvent
	readDone chan readDoneEv

	// reader goroutine only: rendezvous transfers in flight, frames in
	// order; rdvSeen numbers the rendezvous frames received
	pend      []*pendingRead
	rdvSeen   uint32
	readSlots [maxReads]*pendingRead
	freeReads []uint32
	readsOut  int
	piecesOut int // read pieces posted and not completed (maxPiecesOut)
	// piecesHigh is piecesOut's high-water mark, for tests.
	piecesHigh int
	pendFree   []*pendingRead
	// memWake, while a transfer waits for registered memory
	// (startTransfer), is closed once memory comes back; memTimeout
	// fires memWaitMax after the wait began (memSince), when the wait
	// gives up and fails the link (startTransfer).
	memWake    <-chan struct{}
	memTimeout <-chan time.Time
	memTimer   *time.Timer
	memSince   time.Time
	// memShort: the wait is counted in the domain's (tryLarge's short).
	memShort bool
	// budgetWait, while a rendezvous payload waits for the messenger's
	// receive budget (wire.LinkOptions.Budget) before it takes registered
	// memory (startTransfer), is that wait; budgetReady is its Ready
	// channel.
	budget      *wire.Budget
	budgetWait  *wire.BudgetWait
	budgetReady <-chan struct{}
	connected   chan error
	peerCM      []byte
	closed      chan struct{}
	// closing is set by the first Close, which closes closeDone once the
	// endpoint is closed and the link's memory given back.
	closing   atomic.Bool
	closeDone chan struct{}
	dead      atomic.Bool
	failed    atomic.Bool
	// epMu keeps Close from retiring the send region while a writer fills
	// a send buffer, and rendezvous reads from starting on a closed link.
	// Posts themselves are queued (post.go) and dropped once dead is set.
	epMu sync.RWMutex

	readMu sync.Mutex // held by ReadFrame: Close cleans up after the reader

	held atomic.Int32 // receive buffers held by frames above; the region lives until 0 after close
	// epClosed: fi_close of the endpoint has returned (dead comes first),
	// so the provider no longer uses the link's regions.
	epClosed atomic.Bool

	postMu  sync.Mutex
	postedN int64 // receives posted and not completed
	ledger  recvLedger

	// rendezvous: source buffers we sent, freed in order as the peer's
	// count of completed reads (the link word) advances
	rdvMu      sync.Mutex
	rdvOut     []rdvSource
	rdvOutN    atomic.Int32 // len(rdvOut), read without rdvMu
	rdvFreed   uint32
	rdvReadCnt atomic.Uint32 // rendezvous frames we handed up: our link word

	local, remote string
}

// newLink makes a link of info's endpoint. inbound is the listener's
// account of an accepted one (nil for a dial): set before anything can
// close the link, so that its first Close, whatever calls it, ends it.
func newLink(d *domain, info *C.struct_fi_info, opts wire.LinkOptions, inbound *wire.InboundConn) (*link, error) {
	cfg := d.t.cfg
	nrecv := max(opts.RecvWindow, 4)
	if rx := int(C.osp_info_rx_size(info)); rx > 0 && nrecv > rx {
		return nil, fmt.Errorf("rdma: receive window of %d exceeds the provider's receive queue of %d", nrecv, rx)
	}
	l := &link{
		d: d, lim: opts.Limits, steady: opts.Limits, noCRC: opts.NoDataCRC, dataChunk: max(opts.DataChunk, 0), bufSize: cfg.BufSize, nrecv: nrecv, small: opts.SmallWindow,
		budget: opts.Budget, inbound: inbound,
		readDone: make(chan readDoneEv, maxPiecesOut), connected: make(chan error, 1),
		closed: make(chan struct{}), closeDone: make(chan struct{}), sendFree: make(chan uint32, cfg.SendSlots), sendsIdle: make(chan struct{}, 1),
	}
	if opts.Handshake {
		l.lim = wire.HandshakeLimits
	}
	nctl := 0
	if d.rdvWrite && !l.small {
		// A small window's messages are few and small (a large one
		// takes the read rendezvous): the control frames' receives
		// would outnumber its credits.
		l.ctlRecv, nctl = ctlRecvs, ctlSlots
	}
	// Every send, read and write the link can have posted at once must
	// fit the provider's send queue: past it a post fails with FI_EAGAIN
	// and waits at the head of the domain's post queue, holding back
	// every link's posts until this one's completions come.
	if tx, need := int(C.osp_info_tx_size(info)), cfg.SendSlots+nctl+linkRMAOut(d.rdvWrite); tx > 0 && need > tx {
		return nil, fmt.Errorf("rdma: a link posts up to %d sends and RDMA operations at once (SendSlots %d), more than the provider's send queue of %d", need, cfg.SendSlots, tx)
	}
	// Room in a CQ for every completion the link can have outstanding,
	// before anything else is taken (freeRegions or Close gives it back).
	l.cqNeed = linkCQEntries(l.recvs(), cfg.SendSlots, nctl, d.rdvWrite)
	q, err := d.reserveCQ(l.cqNeed)
	if err != nil {
		return nil, err
	}
	l.cq = q
	d.ctlRecvs.Add(int64(l.controlRecvs())) // freeRegions or Close takes it back
	l.rx = make(chan rxEvent, l.recvs()+16)
	// A full pool (or a provider without one) leaves the link its own
	// receive queue.
	l.srx = d.srx != nil && d.srx.reserve(l.recvs()) == nil
	if l.srx {
		l.ledgerShared()
	} else {
		if l.recv, err = d.register(l.recvs() * cfg.BufSize); err != nil {
			l.freeRegions()
			return nil, err
		}
		l.recvDesc = l.recv.desc
	}
	if l.send, err = d.register(cfg.SendSlots*cfg.BufSize + nctl*ctlBufSize); err != nil {
		l.freeRegions()
		return nil, err
	}
	for i := range cfg.SendSlots {
		l.sendFree <- uint32(i)
	}
	l.ctlFree = make(chan uint32, nctl)
	for i := range nctl {
		l.ctlFree <- uint32(i)
	}
	for i := range maxReads {
		l.freeReads = append(l.freeReads, uint32(maxReads-1-i))
	}
	if err := d.addLink(l); err != nil {
		l.freeRegions()
		return nil, err
	}
	var srxEP *C.struct_fid_ep
	if l.srx {
		srxEP = d.srx.ep
	}
	if err := fiErrI("fi_endpoint", C.osp_endpoint(d.dom, info, d.eq, l.cq.cq, srxEP, &l.ep)); err != nil {
		d.removeLink(l)
		d.closeCM(unsafe.Pointer(l.ep))
		l.freeRegions()
		return nil, err
	}
	d.setCMOwner(unsafe.Pointer(l.ep), l)
	if l.srx {
		l.local = d.name
		return l, nil
	}
	l.recvBufs = make([]*wire.Buffer, l.recvs())
	l.ledger.slots = newSlotLedger(l.recvs())
	for i := range l.recvs() {
		b := l.recv.mem[i*cfg.BufSize : (i+1)*cfg.BufSize : (i+1)*cfg.BufSize]
		slot := uint32(i)
		l.recvBufs[i] = wire.NewExternalBuffer(b, func(*wire.Buffer) { l.repost(slot) })
		l.recvBufs[i].Lent = true
		l.postRecv(slot, false)
	}
	// Every receive is posted before the connection is requested or
	// accepted, so the peer's first frame finds a buffer.
	d.flushPosts()
	if l.failed.Load() {
		l.Close()
		return nil, errors.New("rdma: posting the receive buffers failed")
	}
	l.local = d.name
	return l, nil
}

// RecvWindow is the receives the link posts for its session's window:
// fewer than asked when its dialer asked for a small window.
func (l *link) RecvWindow() int { return l.nrecv }

// recvs is the number of receives the link posts: its window and those
// for control frames.
func (l *link) recvs() int { return l.nrecv + l.controlRecvs() }

// controlRecvs is the receives the link posts for control frames, which no
// session credit pays for: the write rendezvous's and the session's.
func (l *link) controlRecvs() int { return l.ctlRecv + sessCtlRecvs }

func (l *link) freeRegions() {
	l.d.unreserveCQ(l.cq, l.cqNeed) // no endpoint took an operation
	l.d.ctlRecvs.Add(-int64(l.controlRecvs()))
	if l.srx {
		l.d.srx.unreserve(l.recvs())
	}
	if l.recv != nil {
		l.recv.free()
	}
	if l.send != nil {
		l.send.free()
	}
}

// fail makes the link report err to its reader and writer.
func (l *link) fail(err error) { l.failWith(err, false) }

// endOfStream is fail for a peer's orderly shutdown: the reader gets the
// frames that arrived before it, then err, as a TCP reader gets the data
// before EOF, and the link closes once the reader took err (frameFrom),
// or after endCloseAfter if it does not read. fail's Close at once drops
// them (Close marks the link dead), so a peer's last words (a WAIT, a
// SESSION_RESET) were lost to a reader busy elsewhere for longer than the
// grace.
func (l *link) endOfStream(err error) { l.failWith(err, true) }

// failWith is fail, and with eof endOfStream.
func (l *link) failWith(err error, eof bool) {
	select {
	case l.connected <- err:
	default:
	}
	queued := false
	select {
	case l.rx <- rxEvent{err: err, eof: eof}:
		queued = true
	default:
	}
	l.failed.Store(true)
	l.pokeDrain()
	if eof && queued {
		time.AfterFunc(endCloseAfter, func() { l.Close() })
		return
	}
	// No room behind the frames (the reader learns it from closed), or
	// any other failure: close now. Not inline: fail runs on the poller,
	// which Close's drain waits on.
	go l.Close()
}

// endCloseAfter bounds how long a link the peer shut down stays open for
// its reader to take what came before (endOfStream).
const endCloseAfter = time.Second

func (l *link) failure() error { return net.ErrClosed }

// EndHandshake lifts the handshake limits (wire.LinkOptions.Handshake).
func (l *link) EndHandshake() { l.lim = l.steady }

func (l *link) Features() uint64   { return l.features }
func (l *link) LocalAddr() string  { return l.local }
func (l *link) RemoteAddr() string { return l.remote }

// Inbound returns the listener's account of an accepted link (nil on a
// dialed one), for the messenger to mark the peer authenticated.
func (l *link) Inbound() *wire.InboundConn { return l.inbound }

// Close shuts the endpoint down and reclaims its memory. Receive buffers
// still held by frames above are unmapped when the last is released.
//
// Only the first call tears the link down; a later or concurrent one
// returns at once. The teardown waits on the provider (fi_shutdown, and
// fi_close on the CM loop), which may take its time with an endpoint
// whose connection never completed (the sockets provider's fi_close waits
// for its own connection thread; verbs' rdma_destroy_id for the CM events
// of the id): a dial or handshake given up at its deadline closes its link
// and must return then, not when the provider is done. closeDone says
// when it is (waitClosed).
func (l *link) Close() error {
	if !l.closing.CompareAndSwap(false, true) {
		return nil
	}
	l.d.closeBegun(l)
	defer func() {
		l.d.closeEnded(l)
		close(l.closeDone)
	}()
	func() {
		defer l.inbound.Done()
		// Drain: sends already posted (a CLOSE frame, say) complete
		// before the endpoint goes, unless the link has failed. The
		// completions that free the last send slot, and a failure, signal
		// sendsIdle once draining is set.
		l.draining.Store(true)
		deadline := time.NewTimer(drainTimeout)
	drain:
		for !l.failed.Load() && len(l.sendFree) < cap(l.sendFree) {
			select {
			case <-l.sendsIdle:
			case <-deadline.C:
				break drain
			}
		}
		deadline.Stop()
		l.closeEndpoint()
		// The reader may have stopped calling ReadFrame (its caller gave
		// up on the link after a frame) with frames queued behind a
		// rendezvous read and completions in the channel: let go of
		// them once it is out of ReadFrame, which the close ends.
		l.readMu.Lock()
		l.dropPending()
		l.drainRx()
		l.readMu.Unlock()
		l.maybeFreeRecv()
	}()
	return nil
}

// testHookProviderClose, when set (tests), runs where Close hands the
// endpoint to the provider's teardown, to make that teardown slow.
var testHookProviderClose func()

// waitClosed closes the link and waits until its teardown, whoever began
// it, is over.
func (l *link) waitClosed() {
	l.Close()
	<-l.closeDone
}

// closeEndpoint marks the link dead, closes the endpoint and gives back
// what the link held of the domain's. An endpoint whose reads did not end
// in time (waitReads) is parked instead, open, with its memory, until the
// domain closes.
func (l *link) closeEndpoint() {
	l.epMu.Lock()
	defer l.epMu.Unlock()
	l.dead.Store(true)
	close(l.closed)
	// Whatever is still queued for the endpoint is dropped from now.
	l.d.passToken()
	// Still in the domain's links, so that their completions count.
	settled := l.waitReads()
	l.d.removeLink(l)
	if l.ep != nil {
		l.d.setCMOwner(unsafe.Pointer(l.ep), nil)
		if settled {
			l.shutdownEndpoint()
		} else {
			l.d.park(l)
		}
		// Receives still posted die with the endpoint.
		l.postMu.Lock()
		l.d.posted.Add(-l.postedN)
		l.postedN = 0
		l.postMu.Unlock()
	}
	l.d.ctlRecvs.Add(-int64(l.controlRecvs()))
	if l.srx {
		l.d.srx.unreserve(l.recvs())
	}
	if !settled {
		return // closeParked frees the rest; the CQ goes with the domain
	}
	l.d.releaseCQ(l.cq, l.cqNeed)
	l.releaseMemory()
}

// shutdownEndpoint shuts the endpoint down and closes it.
func (l *link) shutdownEndpoint() {
	if testHookProviderClose != nil {
		testHookProviderClose()
	}
	// Under the token where a shared receive pool exists: libfabric
	// 1.17's tcp provider frees a shared-pool receive the endpoint had
	// part way filled (ep->cur_rx) under the CQ's lock, not the pool's
	// (tcpx_ep_flush_all_queues calls tcpx_free_xfer, not tcpx_free_rx),
	// so a post to the pool at the same moment (ofi_buf_alloc under
	// srx->lock) would corrupt the pool's free list. Our posts to the pool
	// all go under the token, so holding it serialises the two. The tcp
	// shutdown does not block (one non-blocking flush of its buffered
	// send), and the first flush leaves nothing for fi_close's.
	if l.d.srx != nil {
		l.d.lockToken()
		C.osp_shutdown(l.ep)
		l.d.fiMu.Unlock()
	} else {
		C.osp_shutdown(l.ep)
	}
	// After fi_close the provider no longer touches our
	// buffers; pending completions for this link id are dropped
	// by the poller.
	l.d.closeCM(unsafe.Pointer(l.ep))
}

// releaseMemory gives back the send region and rendezvous sources once
// the endpoint is closed; the receive region follows when no frame above
// holds a buffer of it (maybeFreeRecv).
func (l *link) releaseMemory() {
	l.epClosed.Store(true)
	l.d.freeClosed(l.send)
	l.rdvMu.Lock()
	for _, src := range l.rdvOut {
		src.release(l.d)
	}
	l.rdvOut = nil
	l.rdvOutN.Store(0)
	l.rdvMu.Unlock()
}

// waitReads waits, where the provider mishandles it
// (domain.readsBreakClose), until no RDMA read of ours is in flight on
// the endpoint, so that its shutdown cannot find a read's response part
// way in. A peer that died fails them as soon as the provider sees its
// socket go; a live one completes them. It reports false if some are
// still out after readDrainTimeout. REQUIRES: the link is dead, and the
// token passed since, so that no read can be posted any more.
func (l *link) waitReads() bool {
	if !l.d.readsBreakClose || l.readsPosted.Load() == 0 {
		return true
	}
	deadline := time.NewTimer(readDrainTimeout)
	defer deadline.Stop()
	for l.readsPosted.Load() > 0 {
		select {
		case <-l.sendsIdle:
		case <-deadline.C:
			return l.readsPosted.Load() == 0
		}
	}
	return true
}
