//go:build rdma

package rdma

/*
#cgo LDFLAGS: -lfabric
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Built reports whether this binary has the RDMA transport.
const Built = true

// FabricError is a libfabric failure.
type FabricError struct {
	Op   string
	Code int // positive fi_errno
}

func (e *FabricError) Error() string {
	return fmt.Sprintf("rdma: %s: %s (%d)", e.Op, C.GoString(C.fi_strerror(C.int(e.Code))), e.Code)
}

func fiErr(op string, rc C.ssize_t) error {
	if rc >= 0 {
		return nil
	}
	return &FabricError{Op: op, Code: int(-rc)}
}

func fiErrI(op string, rc C.int) error { return fiErr(op, C.ssize_t(rc)) }

// Operation kinds, as completion contexts carry them (4 bits). The C kind
// posted differs for some (cKind in post.go).
const (
	opRecv  = 1
	opSend  = 2 // a frame from one of the link's send buffers
	opRead  = 3 // a rendezvous read
	opWrite = 5 // a rendezvous write
	opCtl   = 6 // an RDV_READY or RDV_DONE frame from a control buffer
)

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// Completion contexts are integers, not pointers (no FI_CONTEXT mode):
// link id, operation kind and slot, so a completion for a link that is
// gone is recognised and dropped instead of touching freed memory.
func ctxID(link uint32, op uint8, slot uint32) C.uint64_t {
	return C.uint64_t(uint64(link)<<32 | uint64(op)<<28 | uint64(slot&(1<<28-1)))
}

func splitCtx(ctx uint64) (link uint32, op uint8, slot uint32) {
	return uint32(ctx >> 32), uint8(ctx >> 28 & 0xf), uint32(ctx & (1<<28 - 1))
}

// domain is one fabric + domain + CM event queue + completion queue, shared
// by every endpoint of a transport. One goroutine reads CM events, one
// polls completions.
type domain struct {
	t      *Transport
	info   *C.struct_fi_info
	fabric *C.struct_fid_fabric
	dom    *C.struct_fid_domain
	eq     *C.struct_fid_eq
	// cq is the first of the domain's completion queues, the one the
	// poller sleeps on; cqs has it and those opened when it was full
	// (cq.go).
	cq     *C.struct_fid_cq
	cqs    *cqPool
	mrMode uint64
	name   string

	// fiMu is the token for data-path calls into the provider, pq the
	// operations waiting for it, poster the holder's buffers (post.go).
	fiMu   sync.Mutex
	pq     postQueue
	poster *poster
	// pollDuty is the link whose reader polls for the domain (pollFor),
	// nil when the poller does; dutyPolled and active are monotonic
	// nanoseconds of its last poll and of the last completion.
	pollDuty   atomic.Pointer[link]
	dutyPolled atomic.Int64
	active     atomic.Int64
	pollResume chan struct{}
	srx        *srxPool // nil: every link posts its own receives
	// rdvWrite: this domain's links offer the rendezvous by RDMA write
	// (Config.Rendezvous), so its memory is registered for remote writes.
	rdvWrite bool
	// readsBreakClose: the provider must not shut an endpoint down while
	// an RDMA read's response is part way in. libfabric's tcp provider
	// before 1.18 (upstream a74ea0fcd) then frees the read's transfer
	// entry twice, from its queue of reads and as the receive in
	// progress; its pool of entries hands that one out for several
	// operations at once from then on, and every link of the domain sends
	// and receives other frames' bytes. So Close waits for such reads
	// (link.waitReads), and parks an endpoint whose reads never end.
	readsBreakClose bool
	// parked: links whose endpoint Close left open (readsBreakClose),
	// closed with the domain (under mu).
	parked []*link
	// writeChunk is the longest RDMA write posted (Config.WriteChunk);
	// 0: a payload goes in one. writePieces counts the writes posted.
	writeChunk  int
	writePieces atomic.Uint64
	// readPieces counts the RDMA reads posted, pieces of the payloads
	// counted in reads (readPieces in rendezvous.go).
	readPieces atomic.Uint64
	// transfers counts rendezvous payloads moving: reads we posted and
	// sources the peer has not finished reading. A software provider
	// (tcp) moves them only inside our CQ reads and completes nothing on
	// the source side, so the poller must not sleep while any is
	// outstanding, unless its sleep moves them too (sleepMoves).
	transfers atomic.Int64
	// sleepMoves: the poller's sleep lets rendezvous payloads move, so it
	// needs not spin for them (spinForTransfers). It does where the sleep
	// is fi_cq_sread (tcp): libfabric's sread runs the provider's progress
	// and wakes on its sockets' POLLIN, and on POLLOUT while it has data
	// to send (1.17's tcpx_update_poll), which is every event a transfer
	// waits for. Spinning for them instead kept every domain's poller on a
	// core for as long as any payload moved (all the time under load).
	// The sleep on a wait fd (verbs, sockets) keeps the spin: sockets'
	// transfers stalled behind it (its conformance run hung), and verbs'
	// was not measured.
	sleepMoves bool
	sleepBuf   *C.struct_osp_pollbuf // the poller's, for fi_cq_sread
	// sleeping: the poller is in fi_cq_sread holding the token; wakeSent:
	// fi_cq_signal was called to end that sleep; tokenWanted: goroutines
	// waiting in lockToken.
	sleeping, wakeSent atomic.Bool
	tokenWanted        atomic.Int32

	mu sync.Mutex
	// links by id: stored and deleted under mu (so close sees every link
	// added before it), read without it on the completion path.
	links     sync.Map
	closing   map[*link]struct{}  // links whose Close began and has not ended (under mu): close waits for them
	cmOwners  map[uintptr]cmOwner // endpoint or passive endpoint fid -> owner
	nextLink  uint32
	nextKey   uint64
	large     map[int][]*region // cached rendezvous buffers by size (largeSize)
	memw      memWaiters        // transfers waiting for registered memory (memwait.go)
	lent      lentRegions       // handed out for long-lived use (region.go)
	retired   []retiredRegion   // regions of closed endpoints, freed later
	listeners map[*listener]struct{}
	closed    bool
	// cmCloses: endpoints waiting for the CM loop to close them, and
	// cmStopped once it no longer does (closeCM). eqWake: the EQ takes
	// fi_eq_write, so a waiting close can end the loop's read at once.
	cmCloses  []cmClose
	cmStopped bool
	eqWake    bool
	done      chan struct{}
	wg        sync.WaitGroup
	waitFile  *os.File // the CQ's wait fd, through the netpoller
	pollStats struct {
		polls, blocked atomic.Uint64 // CQ reads, and the poller's sleeps
		posts          atomic.Uint64 // calls that only posted (postQueued)
	}
	spin *spinBudget // how long the pollers spin before they sleep

	registered atomic.Int64
	highWater  atomic.Int64
	inUse      atomic.Int64 // registered buffers handed out (receive, send, rendezvous)
	posted     atomic.Int64 // receives posted
	// rendezvous sends straight from a caller's registered payload, and
	// those that copied the payload into a registered buffer first
	zeroCopy, copied atomic.Uint64
	// rendezvous payloads moved by our reads and by our writes
	reads, writes atomic.Uint64
	ctlRecvs      atomic.Int64 // receives for control frames, of the links alive
}

var errTransportClosed = errors.New("rdma: transport closed")

// cmOwner receives CM events for an endpoint. cmEvent runs on the CM
// loop, which also closes endpoints (closeCM): it must not wait for a close.
type cmOwner interface {
	cmEvent(event uint32, info *C.struct_fi_info, data []byte, err error)
}

// openDomain opens the fabric and domain that info names; it keeps a copy
// of info.
func openDomain(t *Transport, src *C.struct_fi_info) (*domain, error) {
	info := C.fi_dupinfo(src)
	if info == nil {
		return nil, errors.New("rdma: fi_dupinfo failed")
	}
	d := &domain{
		t: t, info: info, mrMode: uint64(C.osp_info_mr_mode(info)),
		rdvWrite:        t.offersWrite(info),
		readsBreakClose: C.GoString(C.osp_info_prov(info)) == "tcp" && uint32(C.fi_version()) < fixedTCPReads,
		writeChunk:      t.cfg.writeChunk(C.GoString(C.osp_info_prov(info))),
		name:            C.GoString(C.osp_info_domain(info)),
		cmOwners:        map[uintptr]cmOwner{}, large: map[int][]*region{},
		listeners:  map[*listener]struct{}{},
		done:       make(chan struct{}),
		poster:     newPoster(),
		pollResume: make(chan struct{}, 1),
		spin:       newSpinBudget(t.cfg.BusyPoll),
		sleepBuf:   (*C.struct_osp_pollbuf)(C.calloc(1, C.sizeof_struct_osp_pollbuf)),
		cqs:        newCQPool(),
	}
	cqSize := C.int(t.cfg.CQEntries)
	var waitObj, eqWrite C.int
	if err := fiErrI("open fabric/domain", C.osp_fabric_domain(info, &d.fabric, &d.dom, &d.eq, &eqWrite, &d.cq, cqSize, &waitObj)); err != nil {
		d.closeFids()
		return nil, err
	}
	d.eqWake = eqWrite != 0
	d.cqs.add(&compQueue{cq: d.cq, size: t.cfg.CQEntries}) // nothing polls yet
	// A FI_WAIT_POLLFD set (tcp) holds signal fds of the provider's that
	// only its own wait resets: one left set would wake every sleep at
	// once. Such a CQ is slept on in fi_cq_sread instead.
	var fd C.int
	if waitObj == C.FI_WAIT_FD && C.osp_cq_waitfd(d.cq, &fd) == 0 && fd >= 0 {
		// Through the Go netpoller, so an idle poller holds no thread.
		// A dup, so closing our *os.File never closes libfabric's fd.
		if dup, err := syscall.Dup(int(fd)); err == nil {
			if err := syscall.SetNonblock(dup, true); err == nil {
				d.waitFile = os.NewFile(uintptr(dup), "fi-cq-wait")
			} else {
				syscall.Close(dup)
			}
		}
	}
	d.sleepMoves = d.waitFile == nil
	d.srx = openSRX(d)
	d.wg.Add(2)
	go d.cmLoop()
	go d.pollLoop()
	return d, nil
}

func (d *domain) closeFids() {
	if len(d.cqs.qs) == 0 {
		C.osp_close(unsafe.Pointer(d.cq)) // opened, or not, before the pool had it
	}
	d.lockToken()
	d.cqs.close()
	d.fiMu.Unlock()
	C.osp_close(unsafe.Pointer(d.eq))
	C.osp_close(unsafe.Pointer(d.dom))
	C.osp_close(unsafe.Pointer(d.fabric))
	if d.info != nil {
		C.fi_freeinfo(d.info)
	}
	d.poster.free()
	C.free(unsafe.Pointer(d.sleepBuf))
}

// close ends the domain after every link and listener closed.
func (d *domain) close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	var links []*link
	d.links.Range(func(_, v any) bool {
		links = append(links, v.(*link))
		return true
	})
	// A link out of links may still be closing (Close returns to a
	// second caller at once): its endpoint must be closed before the
	// domain's.
	for l := range d.closing {
		links = append(links, l)
	}
	lns := make([]*listener, 0, len(d.listeners))
	for ln := range d.listeners {
		lns = append(lns, ln)
	}
	d.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, l := range links {
		l.waitClosed()
	}
	close(d.done)
	d.tokenWanted.Add(1) // never to sleep again
	d.wakeSleeper()
	// The CM loop sees done between two reads of the EQ: wake the one it
	// is in, which would otherwise hold every transport's Close for its
	// 100 ms timeout.
	d.mu.Lock()
	d.wakeCMLocked()
	d.mu.Unlock()
	d.wg.Wait()
	d.closeParked()
	if d.srx != nil {
		d.srx.close()
	}
	d.mu.Lock()
	for _, rs := range d.large {
		for _, r := range rs {
			r.free()
		}
	}
	d.large = nil
	d.mu.Unlock()
	d.closeLent()
	d.reapRetired(true)
	if d.waitFile != nil {
		d.waitFile.Close()
	}
	d.closeFids()
}

// fixedTCPReads is the first libfabric whose tcp provider may shut an
// endpoint down with a read's response part way in (readsBreakClose).
const fixedTCPReads = 1<<16 | 18

// park keeps the endpoint of l open, with its memory, until the domain
// closes: its reads did not end in time (link.waitReads), and shutting it
// down might find one part way in.
func (d *domain) park(l *link) {
	d.mu.Lock()
	d.parked = append(d.parked, l)
	d.mu.Unlock()
}

// closeParked closes the parked endpoints and frees their memory, once
// nothing polls the CQ any more: a transfer entry freed twice now is
// freed into a pool that goes with the CQ.
func (d *domain) closeParked() {
	d.mu.Lock()
	ls := d.parked
	d.parked = nil
	d.mu.Unlock()
	for _, l := range ls {
		l.shutdownEndpoint()
		l.releaseMemory()
		l.maybeFreeRecv()
	}
}

// cmLoop reads connection-management events and routes them to their
// owners. It is the one goroutine that blocks in fi_eq_sread, with a short
// timeout so it sees the domain close.
func (d *domain) cmLoop() {
	defer d.wg.Done()
	defer d.runCMCloses(true)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, 256)
	cbuf := C.malloc(C.size_t(len(buf)))
	defer C.free(cbuf)
	for {
		d.runCMCloses(false)
		select {
		case <-d.done:
			return
		default:
		}
		var (
			event   C.uint32_t
			fid     unsafe.Pointer
			info    *C.struct_fi_info
			datalen C.size_t
			cerr    C.int
		)
		rc := C.osp_eq_read(d.eq, &event, &fid, &info, cbuf, C.size_t(len(buf)), &datalen, &cerr, 100)
		if rc == -C.FI_EAGAIN || rc == -C.FI_ETIMEDOUT || rc == -C.FI_EINTR || (rc == 0 && event == C.FI_NOTIFY) {
			continue
		}
		// A connection event may change the provider's set of sockets
		// (done by the time fi_eq_read returns it), and a poller already
		// asleep in fi_cq_sread polls the old set: tcp does not wake it
		// for a socket added meanwhile. So it starts its sleep again.
		d.wakeSleeper()
		d.mu.Lock()
		owner := d.cmOwners[uintptr(fid)]
		d.mu.Unlock()
		if rc == -C.FI_EAVAIL {
			if owner != nil {
				owner.cmEvent(0, nil, nil, &FabricError{Op: "connection", Code: int(cerr)})
			}
			continue
		}
		if rc < 0 {
			select {
			case <-d.done:
				return
			default:
			}
			continue
		}
		data := buf[:datalen]
		copy(data, unsafe.Slice((*byte)(cbuf), int(datalen)))
		if owner == nil {
			if info != nil {
				C.fi_freeinfo(info)
			}
			continue
		}
		owner.cmEvent(uint32(event), info, append([]byte(nil), data...), nil)
	}
}

// cmClose is an endpoint or passive endpoint for the CM loop to close.
type cmClose struct {
	fid  unsafe.Pointer
	done chan struct{}
}

// closeCM closes an endpoint or passive endpoint bound to the domain's EQ,
// on the CM loop between two of its reads. The sockets provider's
// fi_close purges the endpoint's events from the EQ list under the EQ
// lock, while its fi_eq_sread finds the list non-empty before taking that
// lock: a close between the two made the read free the list head (glibc's
// "free(): invalid pointer" abort, one conformance run in ten). With the
// EQ's one reader doing the closing, the two never overlap on any
// provider. The wake event ends a blocking read at once; where the EQ
// takes no writes the close waits out the read's 100 ms timeout.
func (d *domain) closeCM(fid unsafe.Pointer) {
	if fid == nil {
		return
	}
	c := cmClose{fid: fid, done: make(chan struct{})}
	d.mu.Lock()
	if d.cmStopped {
		// No reader any more: nothing to overlap with.
		d.mu.Unlock()
		C.osp_close(fid)
		return
	}
	d.cmCloses = append(d.cmCloses, c)
	d.wakeCMLocked()
	d.mu.Unlock()
	<-c.done
}

// wakeCMLocked ends the CM loop's blocking read of the EQ, where the EQ
// takes writes (else the read ends at its 100 ms timeout). d.mu is held:
// a loop that has not stopped (cmStopped, set under mu) cannot have left
// and closed the EQ meanwhile.
func (d *domain) wakeCMLocked() {
	if d.eqWake && !d.cmStopped {
		C.osp_eq_wake(d.eq)
	}
}

// runCMCloses closes what closeCM queued; with stop, the CM loop is
// leaving and later closes happen in place.
func (d *domain) runCMCloses(stop bool) {
	d.mu.Lock()
	cs := d.cmCloses
	d.cmCloses = nil
	d.cmStopped = d.cmStopped || stop
	d.mu.Unlock()
	for _, c := range cs {
		C.osp_close(c.fid)
		close(c.done)
	}
}

func (d *domain) addLink(l *link) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errTransportClosed
	}
	d.nextLink++
	l.id = d.nextLink
	l.tag = uint64(l.id)
	if C.osp_info_cq_data(d.info) >= 8 {
		l.tag |= uint64(rand.Uint32()) << 32
	}
	d.links.Store(l.id, l)
	return nil
}

func (d *domain) addListener(ln *listener) {
	d.mu.Lock()
	d.listeners[ln] = struct{}{}
	d.mu.Unlock()
}

func (d *domain) removeListener(ln *listener) {
	d.mu.Lock()
	delete(d.listeners, ln)
	d.mu.Unlock()
}

// closeBegun and closeEnded bracket a link's Close for the domain's close.
func (d *domain) closeBegun(l *link) {
	d.mu.Lock()
	if d.closing == nil {
		d.closing = map[*link]struct{}{}
	}
	d.closing[l] = struct{}{}
	d.mu.Unlock()
}

func (d *domain) closeEnded(l *link) {
	d.mu.Lock()
	delete(d.closing, l)
	d.mu.Unlock()
}

func (d *domain) removeLink(l *link) {
	d.mu.Lock()
	d.links.Delete(l.id)
	d.mu.Unlock()
}

func (d *domain) setCMOwner(fid unsafe.Pointer, o cmOwner) {
	d.mu.Lock()
	if o == nil {
		delete(d.cmOwners, uintptr(fid))
	} else {
		d.cmOwners[uintptr(fid)] = o
	}
	d.mu.Unlock()
}
