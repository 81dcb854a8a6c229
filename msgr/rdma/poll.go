//go:build rdma

package rdma

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"time"
)

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

// pollLoop is the domain's completion poller: it busy-polls for the spin
// budget (spinBudget: up to BusyPoll, while spinning pays) after the last
// completion, then arms the CQ with fi_trywait and sleeps on
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
	// spinning: the poller spins since work of its own (spinBudget
	// learns how that ends). woke: the last sleep was on the wait fd,
	// slept long, and the next poll says whether the wake-up found work.
	spinning, woke, timedOut := false, false, false
	var slept time.Duration
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
			spinning, woke = false, false
			continue
		}
		if l := d.pollDuty.Load(); l != nil && time.Since(monoEpoch)-time.Duration(d.dutyPolled.Load()) > dutyStale {
			// Its reader returned a frame and has not come back to poll
			// for the next (its session waits, or the link is quiet):
			// take the duty back, or the poller could never sleep
			// (maySleepInRead) and an idle domain would keep a core. The
			// reader takes it again when it next polls.
			d.pollDuty.CompareAndSwap(l, nil)
		}
		d.fiMu.Lock()
		n, posted, again := d.pollLocked()
		d.fiMu.Unlock()
		if woke {
			d.spin.woke(slept, n != 0, timedOut)
			woke = false
		}
		if n != 0 || posted {
			if n != 0 && spinning {
				d.spin.caught()
			}
			idleSince = time.Now()
			spinning = true
			continue
		}
		if again || d.pq.n.Load() > 0 || d.spinForTransfers() || time.Since(idleSince) < d.spin.budget() {
			runtime.Gosched()
			continue
		}
		if rawConn == nil && !d.maySleepInRead() {
			// Whoever wants the token would end the sleep at once: go
			// round instead, as a spin would.
			runtime.Gosched()
			continue
		}
		if spinning && d.spin.budget() > 0 {
			d.spin.spunEmpty()
		}
		spinning = false
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
		start, found := time.Now(), false
		if armed {
			// A deadline bounds the sleep, so a missed edge or a domain
			// close can never strand the poller.
			d.waitFile.SetReadDeadline(start.Add(pollSleepMax))
			err := rawConn.Read(func(uintptr) bool {
				first := waitFirst
				waitFirst = false
				return !first
			})
			waitFirst = true
			woke, timedOut = true, errors.Is(err, os.ErrDeadlineExceeded)
		} else if rawConn == nil {
			found = d.sleepInRead()
		}
		idleSince = time.Now()
		slept = idleSince.Sub(start)
		if rawConn == nil {
			// fi_cq_sread delivered what woke it, if anything.
			d.spin.woke(slept, found, !found && slept >= sreadSleepMax)
			spinning = found
		}
	}
}

// sleepInRead is the poller's sleep where the CQ has no fd for the Go
// netpoller: a blocking fi_cq_sread. It holds the token throughout, as
// every completion read must (two goroutines each delivering a batch they
// read would hand a link its frames out of order), so whoever needs the
// token meanwhile ends the sleep with fi_cq_signal (wakeSleeper).
// It reports whether the sleep found completions.
func (d *domain) sleepInRead() (found bool) {
	d.fiMu.Lock()
	defer d.fiMu.Unlock()
	d.sleeping.Store(true)
	// Checked after sleeping is set, as wakeSleeper's callers publish
	// their want before they look at it: one of the two sees the other.
	if d.maySleepInRead() {
		pb := d.sleepBuf
		rc := C.osp_cq_sread(d.cq, pb, C.int(sreadSleepMax/time.Millisecond))
		d.deliver(pb, rc)
		found = rc != 0
	}
	d.sleeping.Store(false)
	d.wakeSent.Store(false)
	return found
}

// maySleepInRead reports whether no one wants the token that a sleep in
// fi_cq_sread holds: no goroutine waits for it, nothing is queued to post,
// and no reader has the poll duty (one that went off to handle its frame
// takes it back without waiting).
func (d *domain) maySleepInRead() bool {
	return d.tokenWanted.Load() == 0 && d.pq.n.Load() == 0 && d.pollDuty.Load() == nil
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
	pb, cqs := d.poster.pb, d.cqs
	nops := d.preparePosts()
	releases := cqs.snapReleases()
	rc := C.osp_poll(&cqs.arr[0], cqs.n, &d.poster.cops[0], nops, pb)
	if releases && pb.drained != 0 {
		cqs.settleReleases(uint64(pb.drained))
	}
	d.pollStats.polls.Add(1) // under fiMu: no other writer contends
	again, partial := d.settlePosts(pb.nposted)
	// A piece of a write (osp_write) is progress too, though the write
	// stays queued.
	posted = pb.nposted > 0 || partial
	// The write's other pieces go at once, a call each, as a poster's
	// would (kickPosts): left for later polls, they trickled out behind
	// other goroutines' turns, and four streams into one server moved
	// less (measured when this loop was added; see its commit).
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

// dutyStale is how long a reader that keeps the poll duty may stay away
// before the poller takes it back to sleep. Meanwhile the poller polls
// for it: taken back sooner, from a reader busy with its frame, the duty
// cost ping-pong round trips a wake-up of the sleeping poller each.
const dutyStale = pollSleepMax

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
// it back to the poller after BusyPoll without completions for anyone
// (the full bound: the reader waits for its own frame, as a raw
// libfabric loop does, where the poller's spin adapts). It
// reports whether l has something to read.
func (d *domain) pollFor(l *link) bool {
	if d.pollDuty.Load() != l && !d.pollDuty.CompareAndSwap(nil, l) {
		return false
	}
	ready := func() bool {
		return len(l.rx) > 0 || len(l.readDone) > 0 || l.dead.Load() || l.memReady() || l.budgetGranted()
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
			if now > deadline && !d.spinForTransfers() {
				d.dropDuty(l)
				return ready()
			}
			runtime.Gosched()
		}
	}
}

// spinForTransfers reports whether polling must go on without a pause
// because rendezvous payloads move that only our CQ reads move
// (domain.sleepMoves): a sleep in fi_cq_sread moves those of the first
// CQ's endpoints only.
func (d *domain) spinForTransfers() bool {
	return (!d.sleepMoves || d.cqs.many.Load()) && d.transfers.Load() > 0
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
