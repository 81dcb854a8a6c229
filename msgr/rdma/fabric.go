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
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/wire"
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

// Completion contexts are integers, not pointers (no FI_CONTEXT mode):
// link id, operation kind and slot, so a completion for a link that is
// gone is recognised and dropped instead of touching freed memory.
// pollSleepMax bounds one sleep of the poller on the CQ's wait fd. Some
// providers' wait fds (an epoll set of sockets) do not always produce a new
// edge for Go's edge-triggered netpoller, so a sleep may last the whole
// bound: it caps that latency, at the cost of 500 idle wakeups a second.
const pollSleepMax = 2 * time.Millisecond

// sreadSleepMax bounds one sleep in fi_cq_sread. Anyone needing the token
// ends the sleep at once (wakeSleeper), and the provider ends it on socket
// events, but not on all of them: with the bound raised to an hour,
// sessions of the accept-churn test hung in their handshake, both pollers
// asleep with a frame sent (tcp appears to take data that comes with a
// connection's setup off the socket before the sleeping poll can see it).
// So the bound is the netpoller sleep's, for the same reason.
const sreadSleepMax = pollSleepMax

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
	cq     *C.struct_fid_cq
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
	// writeChunk is the longest RDMA write posted (Config.WriteChunk);
	// 0: a payload goes in one. writePieces counts the writes posted.
	writeChunk  int
	writePieces atomic.Uint64
	// transfers counts rendezvous payloads moving: reads we posted and
	// sources the peer has not finished reading. A software provider
	// (tcp) moves them only inside our fi_cq_read calls and completes
	// nothing on the source side, so the poller must not sleep while any
	// is outstanding.
	transfers atomic.Int64
	sleepBuf  *C.struct_osp_pollbuf // the poller's, for fi_cq_sread
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
	large     map[int][]*region // cached rendezvous buffers by size class
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
		busy, blocked atomic.Uint64
	}

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
		rdvWrite:   t.offersWrite(info),
		writeChunk: t.cfg.writeChunk(C.GoString(C.osp_info_prov(info))),
		name:       C.GoString(C.osp_info_domain(info)),
		cmOwners:   map[uintptr]cmOwner{}, large: map[int][]*region{},
		listeners:  map[*listener]struct{}{},
		done:       make(chan struct{}),
		poster:     newPoster(),
		pollResume: make(chan struct{}, 1),
		sleepBuf:   (*C.struct_osp_pollbuf)(C.calloc(1, C.sizeof_struct_osp_pollbuf)),
	}
	cqSize := C.int(max(4096, 4*t.cfg.SendSlots))
	var waitObj, eqWrite C.int
	if err := fiErrI("open fabric/domain", C.osp_fabric_domain(info, &d.fabric, &d.dom, &d.eq, &eqWrite, &d.cq, cqSize, &waitObj)); err != nil {
		d.closeFids()
		return nil, err
	}
	d.eqWake = eqWrite != 0
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
	d.srx = openSRX(d)
	d.wg.Add(2)
	go d.cmLoop()
	go d.pollLoop()
	return d, nil
}

func (d *domain) closeFids() {
	C.osp_close(unsafe.Pointer(d.cq))
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
	d.wg.Wait()
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
	d.reapRetired(true)
	if d.waitFile != nil {
		d.waitFile.Close()
	}
	d.closeFids()
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
	if d.eqWake {
		// Under mu: the loop cannot have taken c and left yet, so the EQ
		// is still open.
		C.osp_eq_wake(d.eq)
	}
	d.mu.Unlock()
	<-c.done
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

// pollLoop is the domain's completion poller: it busy-polls for BusyPoll
// after the last completion, then arms the CQ with fi_trywait and sleeps on
// its wait fd in the Go netpoller, so an idle transport burns no core. A CQ
// whose wait object is not one fd (tcp's FI_WAIT_POLLFD) is slept on in
// fi_cq_sread instead (sleepInRead). Each
// turn is one cgo call that posts what is queued and reads up to 64
// completions. While a link's reader polls for its own frames (pollFor),
// the poller stays out of its way.
func (d *domain) pollLoop() {
	defer d.wg.Done()
	var rawConn syscall.RawConn
	if d.waitFile != nil {
		rawConn, _ = d.waitFile.SyscallConn()
	}
	idleSince := time.Now()
	waitFirst := true
	duty := time.NewTimer(time.Hour)
	defer duty.Stop()
	for {
		select {
		case <-d.done:
			return
		default:
		}
		if d.readerPolls() {
			// A reader polls. Wake when it stops, or to take over if it
			// has not polled for a while (a long handler), so other
			// links' completions are never stranded behind it.
			duty.Reset(dutyCheck)
			select {
			case <-d.pollResume:
			case <-duty.C:
			case <-d.done:
				return
			}
			idleSince = d.lastActive()
			continue
		}
		d.fiMu.Lock()
		n, posted, again := d.pollLocked()
		d.fiMu.Unlock()
		if n != 0 || posted {
			idleSince = time.Now()
			continue
		}
		if again || d.pq.n.Load() > 0 || d.transfers.Load() > 0 || time.Since(idleSince) < d.t.cfg.BusyPoll {
			runtime.Gosched()
			continue
		}
		d.pollStats.blocked.Add(1)
		d.reapRetired(false)
		var armed bool
		if rawConn != nil {
			d.fiMu.Lock()
			armed = C.osp_trywait(d.fabric, d.cq) == 0
			d.fiMu.Unlock()
			// Posts queued while we held the token would wait out the
			// sleep: go round again instead. Later ones post themselves.
			if d.pq.n.Load() > 0 {
				continue
			}
		}
		if armed {
			// A deadline bounds the sleep, so a missed edge or a domain
			// close can never strand the poller.
			d.waitFile.SetReadDeadline(time.Now().Add(pollSleepMax))
			rawConn.Read(func(uintptr) bool {
				first := waitFirst
				waitFirst = false
				return !first
			})
			waitFirst = true
		} else if rawConn == nil {
			d.sleepInRead()
		}
		idleSince = time.Now()
	}
}

// sleepInRead is the poller's sleep where the CQ has no fd for the Go
// netpoller: a blocking fi_cq_sread. It holds the token throughout, as
// every completion read must (two goroutines each delivering a batch they
// read would hand a link its frames out of order), so whoever needs the
// token meanwhile ends the sleep with fi_cq_signal (wakeSleeper).
func (d *domain) sleepInRead() {
	d.fiMu.Lock()
	defer d.fiMu.Unlock()
	d.sleeping.Store(true)
	// Checked after sleeping is set, as wakeSleeper's callers publish
	// their want before they look at it: one of the two sees the other.
	if d.tokenWanted.Load() == 0 && d.pq.n.Load() == 0 && d.pollDuty.Load() == nil {
		pb := d.sleepBuf
		d.deliver(pb, C.osp_cq_sread(d.cq, pb, C.int(sreadSleepMax/time.Millisecond)))
	}
	d.sleeping.Store(false)
	d.wakeSent.Store(false)
}

// wakeSleeper ends the poller's sleep in fi_cq_sread, if it sleeps, for a
// goroutine that needs the token it holds there. The caller has made its
// want visible first (a queued post, the poll duty, tokenWanted).
func (d *domain) wakeSleeper() {
	if d.sleeping.Load() && d.wakeSent.CompareAndSwap(false, true) {
		C.osp_cq_signal(d.cq)
	}
}

// lockToken takes the token, waking the poller if it sleeps holding it.
func (d *domain) lockToken() {
	if d.fiMu.TryLock() {
		return
	}
	d.tokenWanted.Add(1)
	d.wakeSleeper()
	d.fiMu.Lock()
	d.tokenWanted.Add(-1)
}

// pollLocked posts what is queued and reads one batch of completions in one
// cgo call, then hands each completion to its link. It returns the number
// of completions (negative for an error entry), whether anything was
// posted, and whether the provider refused a post for now. Caller holds
// the token.
func (d *domain) pollLocked() (n int, posted, again bool) {
	pb := d.poster.pb
	nops := d.preparePosts()
	rc := C.osp_poll(d.cq, &d.poster.cops[0], nops, pb)
	again, partial := d.settlePosts(pb.nposted)
	// A piece of a write (osp_write) is progress too, though the write
	// stays queued.
	posted = pb.nposted > 0 || partial
	// The write's other pieces go at once, a call each, as a poster's
	// would (kickPosts): left for later polls, they trickled out behind
	// other goroutines' turns, and four streams into one server moved
	// about 8% less (docs/benchmarks.md, "Writes in pieces").
	for partial && !again && d.pq.n.Load() > 0 {
		again = d.postQueued()
	}
	if rc != 0 {
		d.active.Store(int64(time.Since(monoEpoch)))
	}
	d.deliver(pb, rc)
	return int(rc), posted, again
}

// deliver hands the completions of a poll to their links.
func (d *domain) deliver(pb *C.struct_osp_pollbuf, rc C.ssize_t) {
	switch {
	case rc > 0:
		for i := range int(rc) {
			d.complete(uint64(pb.ctx[i]), int(pb.lens[i]), uint64(pb.data[i]), nil)
		}
	case rc == -C.FI_EAVAIL:
		d.complete(uint64(pb.errctx), 0, 0, &FabricError{Op: "completion", Code: int(pb.err)})
	}
}

// dutyCheck is how often the parked poller looks whether the reader that
// polls for the domain still does: the longest a completion for another
// link can wait while that reader runs a long handler.
const dutyCheck = 200 * time.Microsecond

// monoEpoch turns monotonic times into integers for atomics.
var monoEpoch = time.Now()

// lastActive is when a poll last found work (a completion).
func (d *domain) lastActive() time.Time {
	return monoEpoch.Add(time.Duration(d.active.Load()))
}

// readerPolls reports whether a link's reader is polling for the domain
// and did so recently.
func (d *domain) readerPolls() bool {
	return d.pollDuty.Load() != nil && time.Since(monoEpoch)-time.Duration(d.dutyPolled.Load()) < max(d.t.cfg.BusyPoll, dutyCheck)
}

// pollFor lets the reader of l, which has nothing to hand up, poll the
// completion queue itself rather than sleep until the poller hands it a
// frame: run to completion, as a raw libfabric loop does. The poller's
// hand-off costs a goroutine wake-up per frame on each side of a round
// trip. One reader per domain at a time takes the duty (the others sleep
// as before, woken by whoever polls); it keeps it across frames, and gives
// it back to the poller after BusyPoll without completions for anyone. It
// reports whether l has something to read.
func (d *domain) pollFor(l *link) bool {
	if d.pollDuty.Load() != l && !d.pollDuty.CompareAndSwap(nil, l) {
		return false
	}
	ready := func() bool {
		return len(l.rx) > 0 || len(l.readDone) > 0 || l.dead.Load()
	}
	// The clock is read and other goroutines are let in every few turns
	// only: each turn is a cgo call of about a microsecond, and reading
	// the clock and yielding on every one cost a third of a round trip.
	const turns = 8
	now := time.Since(monoEpoch)
	deadline := now + d.t.cfg.BusyPoll
	for i := 1; ; i++ {
		if ready() {
			d.dutyPolled.Store(int64(now))
			return true
		}
		if d.fiMu.TryLock() {
			n, posted, _ := d.pollLocked()
			d.fiMu.Unlock()
			if n != 0 || posted {
				if n != 0 {
					now = time.Duration(d.active.Load()) // pollLocked just read the clock
				} else {
					now = time.Since(monoEpoch)
				}
				deadline = now + d.t.cfg.BusyPoll
				d.dutyPolled.Store(int64(now))
				continue
			}
		} else {
			d.wakeSleeper() // we hold the duty: the poller parks once awake
		}
		if i%turns == 0 {
			now = time.Since(monoEpoch)
			d.dutyPolled.Store(int64(now))
			if now > deadline && d.transfers.Load() == 0 {
				d.dropDuty(l)
				return ready()
			}
			runtime.Gosched()
		}
	}
}

// dropDuty gives the polling back to the poller if l's reader has it.
func (d *domain) dropDuty(l *link) {
	if d.pollDuty.CompareAndSwap(l, nil) {
		select {
		case d.pollResume <- struct{}{}:
		default:
		}
	}
}

// complete routes one completion to its link.
// A receive of the shared pool has link id 0 (links count from 1) and is
// routed by the link id its sender attached as remote CQ data.
func (d *domain) complete(ctx uint64, n int, data uint64, err error) {
	id, op, slot := splitCtx(ctx)
	if id == 0 && op == opRecv && d.srx != nil {
		d.srx.complete(slot, n, data, err)
		return
	}
	v, _ := d.links.Load(id)
	l, _ := v.(*link)
	if l == nil {
		return // the link is gone; its buffers were reclaimed with it
	}
	l.complete(op, slot, n, err)
}

func (d *domain) addLink(l *link) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("rdma: transport closed")
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

// region is registered memory outside the Go heap: mmap'd, registered
// once, released with munmap after deregistration. Being mmap'd, mem
// starts on a page, a multiple of wire.DataAlign: a rendezvous payload
// received at offset 0 is aligned for O_DIRECT (link.startTransfer).
type region struct {
	d   *domain
	wb  *wire.Buffer // handed up with received rendezvous payloads; reused
	mem []byte
	mr  *C.struct_fid_mr
	// desc is the provider's memory descriptor: an opaque handle that need
	// not be a pointer (sockets returns small integers), so it is kept as an
	// integer: a Go pointer-typed slot holding 0x1 crashes the stack copier.
	desc C.uintptr_t
	key  uint64
}

func (d *domain) register(size int) (*region, error) {
	size = (size + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	if int64(size) > d.t.cfg.MemBudget {
		// Never satisfiable: a wire error of kind too-large, so the
		// session ends with ErrMessageTooLarge instead of redialing.
		return nil, &wire.Error{Kind: wire.ErrKindTooLarge, Msg: fmt.Sprintf(
			"rdma: %d bytes of registered memory asked, the budget is %d", size, d.t.cfg.MemBudget)}
	}
	if cur := d.registered.Load(); cur+int64(size) > d.t.cfg.MemBudget {
		d.trimLarge(int64(size))
		if cur := d.registered.Load(); cur+int64(size) > d.t.cfg.MemBudget {
			return nil, fmt.Errorf("rdma: registered memory budget of %d bytes exhausted (%d in use, %d more asked)",
				d.t.cfg.MemBudget, cur, size)
		}
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("rdma: mmap %d bytes: %w", size, err)
	}
	r := &region{d: d, mem: mem}
	d.mu.Lock()
	d.nextKey++
	key := d.nextKey
	d.mu.Unlock()
	var ckey C.uint64_t
	if err := fiErrI("fi_mr_reg", C.osp_mr_reg(d.dom, unsafe.Pointer(&mem[0]), C.size_t(size), C.uint64_t(key), cBool(d.rdvWrite), &r.mr, &r.desc, &ckey)); err != nil {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("%w (check `ulimit -l`: registered memory must be lockable)", err)
	}
	r.key = uint64(ckey)
	hw := d.registered.Add(int64(size))
	for {
		old := d.highWater.Load()
		if hw <= old || d.highWater.CompareAndSwap(old, hw) {
			break
		}
	}
	return r, nil
}

func (r *region) free() {
	if r.mr != nil {
		C.osp_close(unsafe.Pointer(r.mr))
		r.mr = nil
		r.d.registered.Add(-int64(len(r.mem)))
		syscall.Munmap(r.mem)
	}
}

// remoteAddr is what a peer puts in fi_read for b: the virtual address
// under FI_MR_VIRT_ADDR, else the offset into the region.
func (r *region) remoteAddr(off int) uint64 {
	if r.d.mrMode&C.FI_MR_VIRT_ADDR != 0 {
		return uint64(uintptr(unsafe.Pointer(&r.mem[0]))) + uint64(off)
	}
	return uint64(off)
}

// holds reports where p's bytes start in r, if they lie in it.
func (r *region) holds(p []byte) (off int, ok bool) {
	if len(p) == 0 || len(r.mem) == 0 {
		return 0, false
	}
	o := int(uintptr(unsafe.Pointer(&p[0])) - uintptr(unsafe.Pointer(&r.mem[0])))
	return o, o >= 0 && o+len(p) <= len(r.mem)
}

func (r *region) ptr(off int) unsafe.Pointer { return unsafe.Pointer(&r.mem[off]) }

// buffer wraps the first n bytes of a rendezvous region for the frame that
// carries them; the last Release puts the region back in the cache. The
// wrapper is made once per region, so a cached region costs no allocation.
func (r *region) buffer(n int) *wire.Buffer {
	if r.wb == nil {
		r.wb = wire.NewExternalBuffer(r.mem, func(*wire.Buffer) { r.d.putLarge(r) })
		r.wb.Owner = r
	}
	r.wb.Reset(n)
	return r.wb
}

// freeClosed frees a region of an endpoint whose fi_close has returned.
// After fi_close a provider no longer uses the endpoint's buffers, so the
// region goes at once and its bytes leave the budget: with the 2 s delay
// every closed link used to take, 1,000 links dialed and closed in 1.5 s
// ran the default 1 GiB budget out. The exception is sockets, whose
// progress thread the code has long been said to touch buffers shortly
// after fi_close (never reproduced here): it still retires them.
func (d *domain) freeClosed(r *region) {
	if d.t.prov == "sockets" {
		d.retire(r)
		return
	}
	r.free()
}

// retire frees a region after retireDelay: a buffer of a transfer that
// failed while its endpoint was still open may yet be written to until
// the endpoint closes, and some providers' progress threads (sockets) are
// said to touch an endpoint's buffers shortly after fi_close returns.
func (d *domain) retire(r *region) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		r.free()
		return
	}
	d.retired = append(d.retired, retiredRegion{r: r, at: time.Now()})
	d.mu.Unlock()
}

// reapRetired frees retired regions whose delay has passed; all of them
// when all is set (domain close).
func (d *domain) reapRetired(all bool) {
	d.mu.Lock()
	var drop []*region
	keep := d.retired[:0]
	for _, rr := range d.retired {
		if all || time.Since(rr.at) > retireDelay {
			drop = append(drop, rr.r)
		} else {
			keep = append(keep, rr)
		}
	}
	d.retired = keep
	d.mu.Unlock()
	for _, r := range drop {
		r.free()
	}
}

type retiredRegion struct {
	r  *region
	at time.Time
}

const retireDelay = 2 * time.Second

// Large (rendezvous) buffers are cached per power-of-two class.
func largeClass(n int) int {
	c := 0
	for 1<<c < n {
		c++
	}
	return c
}

func (d *domain) getLarge(n int) (*region, error) {
	c := largeClass(n)
	d.mu.Lock()
	if rs := d.large[c]; len(rs) > 0 {
		r := rs[len(rs)-1]
		d.large[c] = rs[:len(rs)-1]
		d.mu.Unlock()
		d.inUse.Add(1)
		return r, nil
	}
	d.mu.Unlock()
	r, err := d.register(1 << c)
	if err == nil {
		d.inUse.Add(1)
	}
	return r, err
}

func (d *domain) putLarge(r *region) {
	d.inUse.Add(-1)
	d.mu.Lock()
	if d.closed || d.large == nil {
		d.mu.Unlock()
		r.free()
		return
	}
	c := largeClass(len(r.mem))
	d.large[c] = append(d.large[c], r)
	d.mu.Unlock()
}

// trimLarge frees cached rendezvous buffers to make room for need bytes.
func (d *domain) trimLarge(need int64) {
	d.mu.Lock()
	var drop []*region
	var freed int64
	for c, rs := range d.large {
		for len(rs) > 0 && freed < need {
			drop = append(drop, rs[len(rs)-1])
			freed += int64(len(rs[len(rs)-1].mem))
			rs = rs[:len(rs)-1]
		}
		d.large[c] = rs
	}
	d.mu.Unlock()
	for _, r := range drop {
		r.free()
	}
}
