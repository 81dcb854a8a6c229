//go:build rdma

package rdma

import (
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// errMemBudget is the error of a registration that does not fit what is
// left of Config.MemBudget now, though it fits the whole budget: memory
// comes back as received messages are released, sources are read by the
// peer and cached buffers are trimmed, so a rendezvous transfer waits for
// it (memWaiters) instead of failing its link. The fault only made the
// session reconnect and replay everything, into the same shortage
// (docs/messenger.md §5.3: a slow consumer pushes back). A request above
// the whole budget is a wire error of kind too-large instead (register).
var errMemBudget = errors.New("rdma: registered memory budget exhausted")

// memWaiters lets rendezvous transfers wait for registered memory to come
// back. A waiter takes the channel (memWait) before it tries again, so a
// return between its failed try and its wait is not lost; whoever gives
// memory back (memReturned: a deregistration, a buffer back in the cache)
// closes the channel, if anyone took it. No waiter, no lock: a return
// costs an atomic load.
type memWaiters struct {
	want  atomic.Bool
	mu    sync.Mutex
	freed chan struct{} // under mu; nil until someone waits
	// waits counts the times a transfer found the budget spent and
	// waited (Stats.MemWaits).
	waits atomic.Uint64
	// giveUps counts the waits that ended at memWaitMax and failed
	// their link (Stats.MemGiveUps).
	giveUps atomic.Uint64
	// srcBytes is registered memory held by copies of payloads we send
	// (rendezvousSource) until the peer has moved them; at most
	// MemBudget/srcShare unless it is the only one. The rest stays for
	// the destinations of payloads we receive, which a waiting source
	// may need to come free: two transports whose budgets were all
	// sources, each waiting for the other to read them, would wait for
	// ever.
	srcBytes atomic.Int64
	// short counts the transfers waiting for the budget itself (a
	// destination in startTransfer, a source's copy in getSource), from
	// their first failed try to their last. While any does, lent memory
	// is not handed out (allocLent): a cache must not take back what it
	// gave up for them (reclaim), even kept as a spare region, which
	// only the waiter's own registration frees (trimLarge).
	short atomic.Int32
	// reclaimers are the holders of lent memory that give some back when
	// a transfer waits for the budget (reclaim), in the order they came;
	// reclaiming: one reclaim is running; reclaimTurn rotates which
	// holder is asked first.
	reclaimMu   sync.Mutex
	reclaimers  []*reclaimer
	reclaiming  atomic.Bool
	reclaimTurn int
}

// reclaimer is a holder of lent memory that can let go of some of it
// (Listener.OnRegisteredPressure).
type reclaimer struct {
	fn func(need int64) (freed int64)
}

// memWaitMax bounds a wait for registered memory. Memory a consumer holds
// for a while comes back within it; memory that does not is held in a
// cycle: two OSDs each forwarding, zero-copy, payloads they received
// (held until the other has read them) while each waits for room to
// receive the other's. Past it the transfer fails its link, as before
// waits, and the fault lets go of what the link held (its sources, its
// receive buffers), which breaks the cycle; the lossless session replays.
const memWaitMax = 2 * time.Second

// errMemWait is the error of a wait for registered memory that gave up.
var errMemWait = errors.New("rdma: registered memory did not come back within " + memWaitMax.String())

// srcShare: the copies of payloads being sent take at most
// MemBudget/srcShare of a domain's registered memory, but one of any size
// (within the budget) goes when none is out.
const srcShare = 4

// memReturned wakes the transfers that wait for registered memory.
func (d *domain) memReturned() {
	w := &d.memw
	if !w.want.Load() {
		return
	}
	w.mu.Lock()
	if w.freed != nil {
		close(w.freed)
		w.freed = nil
	}
	w.want.Store(false)
	w.mu.Unlock()
}

// memWait returns a channel closed at the next memReturned.
func (d *domain) memWait() <-chan struct{} {
	w := &d.memw
	w.mu.Lock()
	if w.freed == nil {
		w.freed = make(chan struct{})
	}
	ch := w.freed
	w.want.Store(true)
	w.mu.Unlock()
	return ch
}

// tryLarge is getLarge, for a caller that can wait: when only the spent
// budget stands in the way it returns no error and a channel closed once
// memory came back, to try again then. short is the caller's: set, and
// the domain's count of waiting transfers raised (memWaiters.short), at
// its first wait, before the holders of lent memory are asked for some
// back (reclaim), so that none takes back what it gives; the caller lowers
// it (endShort) when its wait ends, however it ends.
func (d *domain) tryLarge(n int, short *bool) (*region, <-chan struct{}, error) {
	r, err := d.getLarge(n)
	if !errors.Is(err, errMemBudget) {
		return r, nil, err
	}
	wait := d.memWait()
	if r, err = d.getLarge(n); !errors.Is(err, errMemBudget) {
		return r, nil, err
	}
	d.memw.waits.Add(1)
	if !*short {
		*short = true
		d.memw.short.Add(1)
	}
	d.reclaim(int64(largeSize(n)))
	return nil, wait, nil
}

// endShort ends a transfer's wait for the budget (tryLarge's short).
func (d *domain) endShort(short *bool) {
	if *short {
		*short = false
		d.memw.short.Add(-1)
	}
}

// addReclaimer has fn called with the bytes a transfer waits for whenever
// one finds the budget spent, until the returned func is called.
func (d *domain) addReclaimer(fn func(need int64) (freed int64)) (remove func()) {
	r := &reclaimer{fn: fn}
	w := &d.memw
	w.reclaimMu.Lock()
	w.reclaimers = append(w.reclaimers, r)
	w.reclaimMu.Unlock()
	return func() {
		w.reclaimMu.Lock()
		w.reclaimers = slices.DeleteFunc(w.reclaimers, func(x *reclaimer) bool { return x == r })
		w.reclaimMu.Unlock()
	}
}

// reclaim asks the holders of lent memory for need bytes back: an OSD's
// read cache, which may hold half the budget, lets go of the extents it
// used least, and their memory comes back (putLent, then trimLarge) once
// nothing sends from them any more. Without it a transfer could wait for
// memory only a cache held, until it gave up (memWaitMax), while the
// transfers it held up were the ones that would have let the cache's
// extents go. One call at a time: waiters woken together would only each
// ask for the same bytes; one that still finds the budget spent asks
// again. The holders of a shared domain (the OSDs of osprey up) are
// asked in turn, each for what the others have not given, the first a
// different one each time. It runs on the waiter's goroutine with no
// lock of the domain held, so fn may release lent buffers.
func (d *domain) reclaim(need int64) {
	w := &d.memw
	if !w.reclaiming.CompareAndSwap(false, true) {
		return
	}
	defer w.reclaiming.Store(false)
	w.reclaimMu.Lock()
	rs := slices.Clone(w.reclaimers)
	first := 0
	if len(rs) > 0 {
		first = w.reclaimTurn % len(rs)
		w.reclaimTurn = first + 1
	}
	w.reclaimMu.Unlock()
	for i := range rs {
		if need <= 0 {
			break
		}
		need -= rs[(first+i)%len(rs)].fn(need)
	}
}

// getSource returns a registered buffer for a copy of an n-byte payload
// we send, waiting while the sources' share of the domain's budget, then
// the budget itself, is spent, until closed is closed. The share is
// reserved first and held while the buffer is waited for; giving it back
// (a failure, the link closing, putSource) wakes the sources that wait
// for room in it. putSource gives the buffer back.
func (d *domain) getSource(n int, closed <-chan struct{}) (*region, error) {
	// The waits, both of them, end memWaitMax after the first began.
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	giveUp := func() <-chan time.Time {
		if timer == nil {
			timer = time.NewTimer(memWaitMax)
		}
		return timer.C
	}
	for !d.reserveSource(n) {
		// Take the channel first, then look again, as tryLarge does.
		wait := d.memWait()
		if d.reserveSource(n) {
			break
		}
		d.memw.waits.Add(1)
		select {
		case <-wait:
		case <-closed:
			return nil, net.ErrClosed
		case <-giveUp():
			d.memw.giveUps.Add(1)
			return nil, errMemWait
		}
	}
	short := false
	defer d.endShort(&short)
	for {
		r, wait, err := d.tryLarge(n, &short)
		if wait == nil {
			if r == nil {
				d.unreserveSource(int64(largeSize(n)))
			}
			return r, err
		}
		select {
		case <-wait:
		case <-closed:
			d.unreserveSource(int64(largeSize(n)))
			return nil, net.ErrClosed
		case <-giveUp():
			d.unreserveSource(int64(largeSize(n)))
			d.memw.giveUps.Add(1)
			return nil, errMemWait
		}
	}
}

// unreserveSource takes c bytes out of the sources' share and wakes the
// sources that wait for room in it.
func (d *domain) unreserveSource(c int64) {
	d.memw.srcBytes.Add(-c)
	d.memReturned()
}

// reserveSource counts a source of n bytes in the sources' share, if it
// fits or is the only one.
func (d *domain) reserveSource(n int) bool {
	c := int64(largeSize(n))
	limit := d.t.cfg.MemBudget / srcShare
	for {
		cur := d.memw.srcBytes.Load()
		if cur > 0 && cur+c > limit {
			return false
		}
		if d.memw.srcBytes.CompareAndSwap(cur, cur+c) {
			return true
		}
	}
}

// putSource gives back a source buffer once the peer has its payload.
func (d *domain) putSource(r *region) {
	// Out of the share before the buffer is back, whose return wakes the
	// waiters.
	d.memw.srcBytes.Add(-int64(len(r.mem)))
	d.putLarge(r)
}
