package osd

import (
	"sync"
	"sync/atomic"
)

// pendingTable holds things waiting for a reply, by the tid the reply
// echoes.
type pendingTable[T any] struct {
	mu   sync.Mutex
	next atomic.Uint64
	m    map[uint64]T
}

func (t *pendingTable[T]) init() { t.m = map[uint64]T{} }

// add registers v and returns its tid.
func (t *pendingTable[T]) add(v T) uint64 {
	tid := t.next.Add(1)
	t.mu.Lock()
	t.m[tid] = v
	t.mu.Unlock()
	return tid
}

// get returns the entry of tid, if still there.
func (t *pendingTable[T]) get(tid uint64) (T, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[tid]
	return v, ok
}

// take removes and returns the entry of tid.
func (t *pendingTable[T]) take(tid uint64) (T, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[tid]
	delete(t.m, tid)
	return v, ok
}

// failAll removes every entry and hands each to fail.
func (t *pendingTable[T]) failAll(fail func(T)) {
	t.mu.Lock()
	m := t.m
	t.m = map[uint64]T{}
	t.mu.Unlock()
	for _, v := range m {
		fail(v)
	}
}
