// Package pending holds the requests that wait for their replies, by the
// tid a reply echoes in its envelope (msgr.Message.Tid): one table for
// every requester (the SDK, the mon client, an OSD calling its peers). It
// does no I/O and never blocks on what it holds: failing or answering an
// entry is the caller's, after the entry has left the table, so each
// entry is answered at most once.
package pending

import (
	"sync"
	"sync/atomic"
)

// Table maps tids to what waits on them. The zero value is ready.
type Table[T any] struct {
	next atomic.Uint64

	mu     sync.Mutex
	m      map[uint64]T
	closed bool
}

// Add registers v under a tid of the table's own and returns it; the
// table is then the only source of tids for its requester. It ignores
// Close, for a requester that fails late entries by their own timeouts.
func (t *Table[T]) Add(v T) uint64 {
	tid := t.next.Add(1)
	t.mu.Lock()
	t.put(tid, v)
	t.mu.Unlock()
	return tid
}

// Put registers v under tid, which the caller makes unique. It is false,
// and registers nothing, once the table is closed.
func (t *Table[T]) Put(tid uint64, v T) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.put(tid, v)
	return true
}

// REQUIRES: t.mu held.
func (t *Table[T]) put(tid uint64, v T) {
	if t.m == nil {
		t.m = map[uint64]T{}
	}
	t.m[tid] = v
}

// Get returns the entry of tid, if still there, and leaves it there.
func (t *Table[T]) Get(tid uint64) (T, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[tid]
	return v, ok
}

// Len is how many entries wait.
func (t *Table[T]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// Take removes and returns the entry of tid.
func (t *Table[T]) Take(tid uint64) (T, bool) {
	return t.TakeIf(tid, nil)
}

// TakeIf is Take of an entry that match (nil: any) accepts; one it
// refuses stays.
func (t *Table[T]) TakeIf(tid uint64, match func(T) bool) (T, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[tid]
	if !ok || (match != nil && !match(v)) {
		var zero T
		return zero, false
	}
	delete(t.m, tid)
	return v, true
}

// FailIf removes the entries that match (nil: all) accepts, hands each to
// fail once the table is unlocked, and returns how many there were.
func (t *Table[T]) FailIf(match func(T) bool, fail func(T)) int {
	t.mu.Lock()
	var failed []T
	for tid, v := range t.m {
		if match == nil || match(v) {
			delete(t.m, tid)
			failed = append(failed, v)
		}
	}
	t.mu.Unlock()
	for _, v := range failed {
		fail(v)
	}
	return len(failed)
}

// Close fails every entry (FailIf) and refuses every later Put. It is
// false, and fails nothing, if the table was closed already.
func (t *Table[T]) Close(fail func(T)) bool {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return false
	}
	t.closed = true
	t.mu.Unlock()
	t.FailIf(nil, fail)
	return true
}
