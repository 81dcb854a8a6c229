package wire

import (
	"sync"
	"time"
)

// Budget bounds the bytes of received messages a messenger holds at once,
// over all its links, as Ceph's osd_client_message_size_cap does for an
// OSD's clients. A link charges a message's buffer before it takes it: a
// small message whole once its preamble is read, a large one as its buffer
// grows with the bytes that arrive (StreamLink.readBody), so a peer that
// claims a large message and sends little holds little. The charge is
// returned when the dispatcher releases the message. Over the budget the
// link's reader waits: it stops reading its socket, so the peer's sends
// back up into TCP, instead of allocating.
//
// It never deadlocks on its own. Waiters are served in arrival order, so a
// large message is not overtaken for ever by small ones. When every charged
// byte belongs to a frame whose reader waits for more (no release can come),
// the first waiter is admitted over the budget and then leads: its frame
// grows to the end without waiting, and no other goes over until it is
// released. So at most one message is over the budget at a time: a message
// larger than the whole budget goes once nothing else is held, as in Ceph.
// (A dispatcher that holds messages while it waits for something only
// another message can bring can still deadlock a full budget:
// docs/messenger.md.)
//
// A nil *Budget admits everything. Safe for concurrent use.
type Budget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	peak    int64
	stalls  uint64
	waiters []*budgetWaiter // first come, first served
	stalled int64           // bytes the waiters already hold
	ended   int64           // time.Now().UnixNano() when a waiter last went
}

type budgetWaiter struct {
	c     *Charge // what the waiter already holds (its frame so far)
	n     int64   // what it asks for more
	ready chan struct{}
}

// NewBudget returns a budget of limit bytes; limit <= 0 means none (nil).
func NewBudget(limit int64) *Budget {
	if limit <= 0 {
		return nil
	}
	return &Budget{limit: limit}
}

// BudgetStats is a snapshot of a Budget.
type BudgetStats struct {
	Limit    int64  // the budget; 0 when there is none
	InFlight int64  // bytes charged now: read or being read, not yet released
	Peak     int64  // the most ever charged at once
	Stalls   uint64 // times a reader had to wait for bytes
	Waiting  int    // readers waiting now
	// WaitEnded is when a reader last stopped waiting (Unix ns; 0 never):
	// a link whose reader just went on has not read its frame yet, and
	// its silence until then was the budget's, not the peer's.
	WaitEnded int64
}

// Stats returns the counters.
func (b *Budget) Stats() BudgetStats {
	if b == nil {
		return BudgetStats{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return BudgetStats{Limit: b.limit, InFlight: b.used, Peak: b.peak, Stalls: b.stalls, Waiting: len(b.waiters), WaitEnded: b.ended}
}

// Charge is the bytes one received frame holds of a Budget. The zero
// Charge holds nothing. Release returns it, once.
type Charge struct {
	b    *Budget
	n    int64
	lead bool // admitted over the budget: grows without waiting
}

// Calm reports whether n more bytes would leave at least half the budget
// free: a link may then take a large frame's first buffer at the size the
// frame claims (up to growFrom) rather than a small one that grows.
func (b *Budget) Calm(n int64) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used+n <= b.limit/2
}

// Bytes is what the charge holds.
func (c Charge) Bytes() int64 { return c.n }

// Release returns the charged bytes to the budget; a second call does
// nothing.
func (c *Charge) Release() {
	if c.b != nil {
		c.b.release(c)
	}
	*c = Charge{}
}

// Grow adds n bytes to c, a frame's charge so far (the zero Charge for a
// new frame), waiting while they do not fit (more than the budget would be
// charged) or others wait before them. It returns false, adding nothing,
// if cancel is closed first; c keeps what it held.
func (b *Budget) Grow(c *Charge, n int64, cancel <-chan struct{}) bool {
	w := b.Reserve(c, n)
	if w == nil {
		return true
	}
	select {
	case <-w.Ready():
		return true
	case <-cancel:
	}
	w.Cancel()
	return false
}

// A BudgetWait is a charge waiting its turn (Reserve), for a reader that
// cannot block on it: an RDMA link's reader goes on taking the link's own
// frames while a payload waits for the budget.
type BudgetWait struct {
	b *Budget
	w *budgetWaiter
}

// TryGrow adds n bytes to c if they may go now, without waiting: it
// reports whether it did.
func (b *Budget) TryGrow(c *Charge, n int64) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tryLocked(c, n)
}

// tryLocked takes n bytes for c if they fit (or c leads) and no one waits
// before it.
func (b *Budget) tryLocked(c *Charge, n int64) bool {
	if c.lead || (len(b.waiters) == 0 && b.admitLocked(c, n, 0)) {
		c.b = b
		b.takeLocked(c, n)
		return true
	}
	return false
}

// Reserve is Grow for a caller that does not block: it adds n bytes to c
// and returns nil if they may go now; otherwise c joins the waiters and
// Reserve returns the wait, whose Ready channel is closed once c holds
// them. c must stay where it is until then, or until Cancel.
func (b *Budget) Reserve(c *Charge, n int64) *BudgetWait {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tryLocked(c, n) {
		return nil
	}
	c.b = b
	w := &budgetWaiter{c: c, n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.stalled += c.n
	b.stalls++
	// With this waiter every charged byte may now belong to a waiting
	// frame: then the first leads.
	b.grantLocked()
	return &BudgetWait{b: b, w: w}
}

// Ready is closed once the wait's charge holds its bytes.
func (bw *BudgetWait) Ready() <-chan struct{} { return bw.w.ready }

// Cancel ends the wait, adding nothing to its charge: bytes granted
// meanwhile go back.
func (bw *BudgetWait) Cancel() {
	b, w := bw.b, bw.w
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready:
		// Granted as the caller gave up: give the bytes back.
		b.used -= w.n
		w.c.n -= w.n
	default:
		for i, x := range b.waiters {
			if x == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				b.stalled -= w.c.n
				b.ended = time.Now().UnixNano()
				break
			}
		}
	}
	// Whoever waited behind us may go now.
	b.grantLocked()
}

// admitLocked reports whether c may grow by n now: it fits, or every byte
// charged belongs to c or to a waiting frame (others: the bytes the waiters
// other than c hold), so c leads. NB: a leader never waits, so while it
// holds bytes no other frame can lead; nor while its message is held.
func (b *Budget) admitLocked(c *Charge, n, others int64) bool {
	if b.used+n <= b.limit {
		return true
	}
	if b.used == others+c.n {
		c.lead = true
		return true
	}
	return false
}

func (b *Budget) takeLocked(c *Charge, n int64) {
	b.used += n
	c.n += n
	b.peak = max(b.peak, b.used)
}

func (b *Budget) release(c *Charge) {
	b.mu.Lock()
	b.used -= c.n
	if b.used < 0 {
		b.mu.Unlock()
		panic("wire: Budget released more than was charged")
	}
	b.grantLocked()
	b.mu.Unlock()
}

// grantLocked admits waiters from the front while they may go.
func (b *Budget) grantLocked() {
	for len(b.waiters) > 0 {
		w := b.waiters[0]
		if !b.admitLocked(w.c, w.n, b.stalled-w.c.n) {
			break
		}
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
		b.stalled -= w.c.n
		b.takeLocked(w.c, w.n)
		b.ended = time.Now().UnixNano()
		close(w.ready)
	}
	if len(b.waiters) == 0 {
		b.waiters = nil // do not keep a long queue's array
	}
}
