package wire

import "sync"

// Budget bounds the bytes of received messages a messenger holds at once,
// over all its links, as Ceph's osd_client_message_size_cap does for an
// OSD's clients. A link charges a message's bytes after reading its
// preamble and before reading (or allocating for) its segments; the charge
// is returned when the dispatcher releases the message. Over the budget the
// link's reader waits: it stops reading its socket, so the peer's sends
// back up into TCP, instead of allocating.
//
// It never deadlocks on its own: a message larger than the whole budget is
// admitted once nothing else is charged, and waiters are served in arrival
// order, so a large message is not overtaken for ever by small ones. (A
// dispatcher that holds messages while it waits for something only another
// message can bring can still deadlock a full budget: docs/messenger.md.)
//
// A nil *Budget admits everything. Safe for concurrent use.
type Budget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	peak    int64
	stalls  uint64
	waiters []*budgetWaiter // first come, first served
}

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed when the bytes were charged
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
}

// Stats returns the counters.
func (b *Budget) Stats() BudgetStats {
	if b == nil {
		return BudgetStats{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return BudgetStats{Limit: b.limit, InFlight: b.used, Peak: b.peak, Stalls: b.stalls, Waiting: len(b.waiters)}
}

// Charge is the bytes one received frame holds of a Budget. The zero
// Charge holds nothing. Release returns it, once.
type Charge struct {
	b *Budget
	n int64
}

// Bytes is what the charge holds.
func (c Charge) Bytes() int64 { return c.n }

// Release returns the charged bytes to the budget; a second call does
// nothing.
func (c *Charge) Release() {
	if c.b != nil {
		c.b.release(c.n)
	}
	*c = Charge{}
}

// Acquire charges n bytes, waiting while they do not fit (more than the
// budget would be charged) or others wait before them. It returns ok false,
// charging nothing, if cancel is closed first.
func (b *Budget) Acquire(n int64, cancel <-chan struct{}) (c Charge, ok bool) {
	if b == nil {
		return Charge{}, true
	}
	b.mu.Lock()
	if len(b.waiters) == 0 && b.fitsLocked(n) {
		b.takeLocked(n)
		b.mu.Unlock()
		return Charge{b: b, n: n}, true
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.stalls++
	b.mu.Unlock()
	select {
	case <-w.ready:
		return Charge{b: b, n: n}, true
	case <-cancel:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready:
		// Granted as cancel closed: give the bytes back.
		b.used -= n
	default:
		for i, x := range b.waiters {
			if x == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
	}
	// Whoever waited behind us may fit now.
	b.grantLocked()
	return Charge{}, false
}

// fitsLocked: n bytes may be charged now. One message larger than the
// whole budget goes when nothing else is charged.
func (b *Budget) fitsLocked(n int64) bool { return b.used == 0 || b.used+n <= b.limit }

func (b *Budget) takeLocked(n int64) {
	b.used += n
	b.peak = max(b.peak, b.used)
}

func (b *Budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	if b.used < 0 {
		b.mu.Unlock()
		panic("wire: Budget released more than was charged")
	}
	b.grantLocked()
	b.mu.Unlock()
}

// grantLocked admits waiters from the front while they fit.
func (b *Budget) grantLocked() {
	for len(b.waiters) > 0 && b.fitsLocked(b.waiters[0].n) {
		w := b.waiters[0]
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
		b.takeLocked(w.n)
		close(w.ready)
	}
	if len(b.waiters) == 0 {
		b.waiters = nil // do not keep a long queue's array
	}
}
