package msgrtest

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
)

// Recorder is a Dispatcher that checks what arrives: each message's front
// starts with (sender id uint32, per-sender counter uint64) and ends with a
// CRC32C of the data, so order, duplicates and corruption are all caught.
type Recorder struct {
	t        testing.TB
	mu       sync.Mutex
	next     map[uint32]uint64
	count    atomic.Int64
	bytes    atomic.Int64
	events   []msgr.Event
	hold     bool
	held     []*msgr.Message
	OnMsg    func(*msgr.Message) bool // if set and returns true, the recorder does not release
	errs     []error
	eventsCh chan msgr.Event
}

// NewRecorder returns a checking dispatcher.
func NewRecorder(t testing.TB) *Recorder {
	return &Recorder{t: t, next: map[uint32]uint64{}, eventsCh: make(chan msgr.Event, 1024)}
}

// Payload builds a message front for sender id, counter n and data.
func Payload(id uint32, n uint64, data []byte) []byte {
	front := make([]byte, 16)
	binary.LittleEndian.PutUint32(front, id)
	binary.LittleEndian.PutUint64(front[4:], n)
	binary.LittleEndian.PutUint32(front[12:], crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
	return front
}

func (r *Recorder) Dispatch(m *msgr.Message) {
	if r.OnMsg != nil && r.OnMsg(m) {
		r.count.Add(1)
		return
	}
	r.bytes.Add(m.Len())
	if !r.check(m) {
		m.Release()
	}
	r.count.Add(1)
}

// check verifies m's order and data and, if the recorder holds messages,
// keeps it; it reports whether it did. The message counts as arrived
// (Next) and is held under one lock, so a test that saw it arrive and
// then releases what is held never misses it.
func (r *Recorder) check(m *msgr.Message) (held bool) {
	var err error
	id, n := uint32(0), uint64(0)
	if len(m.Front) != 16 {
		err = fmt.Errorf("front of %d bytes", len(m.Front))
	} else {
		id, n = binary.LittleEndian.Uint32(m.Front), binary.LittleEndian.Uint64(m.Front[4:])
		if want := binary.LittleEndian.Uint32(m.Front[12:]); crc32.Checksum(m.Data, crc32.MakeTable(crc32.Castagnoli)) != want {
			err = fmt.Errorf("sender %d message %d: data corrupted", id, n)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, err)
	}
	if len(m.Front) == 16 {
		if want := r.next[id]; n != want {
			r.errs = append(r.errs, fmt.Errorf("sender %d: got message %d, want %d", id, n, want))
		}
		r.next[id] = n + 1
	}
	if r.hold {
		r.held = append(r.held, m) // from here the test may release it
	}
	return r.hold
}

func (r *Recorder) HandleEvent(ev msgr.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	select {
	case r.eventsCh <- ev:
	default:
	}
}

// Err returns the first check failure.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		return fmt.Errorf("%d errors, first: %w", len(r.errs), r.errs[0])
	}
	return nil
}

// Next returns how many messages of sender id arrived in order.
func (r *Recorder) Next(id uint32) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next[id]
}

// progress describes, for failure messages, the next message expected
// from each sender and how many are held.
func (r *Recorder) progress() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := slices.Sorted(maps.Keys(r.next))
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "sender %d: next expected %d; ", id, r.next[id])
	}
	fmt.Fprintf(&b, "%d held", len(r.held))
	return b.String()
}

// Hold makes the recorder keep messages instead of releasing them.
func (r *Recorder) Hold(on bool) {
	r.mu.Lock()
	r.hold = on
	r.mu.Unlock()
}

// ReleaseHeld releases every held message.
func (r *Recorder) ReleaseHeld() int {
	r.mu.Lock()
	held := r.held
	r.held = nil
	r.mu.Unlock()
	for _, m := range held {
		m.Release()
	}
	return len(held)
}

// Held is the number of messages held.
func (r *Recorder) Held() (n int, bytes int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.held {
		bytes += m.Len()
	}
	return len(r.held), bytes
}

// Events returns the events received so far, in order.
func (r *Recorder) Events() []msgr.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// WaitEvent waits for an event of kind k.
func (r *Recorder) WaitEvent(t testing.TB, k msgr.EventKind, timeout time.Duration) msgr.Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-r.eventsCh:
			if ev.Kind == k {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %v event within %v", k, timeout)
		}
	}
}

// Eventually polls cond until it holds or the deadline passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyDescribed(t, timeout, func() string { return "waiting for " + what }, cond)
}

// EventuallyDescribed is Eventually whose failure message is made at the
// timeout, so it can say what the state is then.
func EventuallyDescribed(t testing.TB, timeout time.Duration, describe func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v %s", timeout, describe())
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond) // polling interval, not synchronization
	}
}
