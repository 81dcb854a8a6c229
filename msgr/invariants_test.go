package msgr

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/msgr/internal/invariants"
	"github.com/ospreystore/osprey/msgr/wire"
)

// The invariants build's assertions fire on what they guard against;
// without the tag they are compiled away and these tests skip.

func wantInvariantPanic(t *testing.T, want string, f func()) {
	t.Helper()
	if !invariants.Enabled {
		t.Skip("needs -tags invariants")
	}
	defer func() {
		t.Helper()
		r := recover()
		if r == nil || !strings.Contains(fmt.Sprint(r), want) {
			t.Fatalf("recovered %v, want a panic saying %q", r, want)
		}
	}()
	f()
}

func TestInvariantMessageReleasedOnce(t *testing.T) {
	m := NewMessage(1, []byte("front"), nil)
	m.Release() // never sent: back to the pool
	wantInvariantPanic(t, "released twice", m.Release)
}

// linkedEngine is an engine with a link of window 4 up, to which
// message seq 1 of one byte, f, has been delivered.
func linkedEngine(t *testing.T) (e *engine, f *wire.Frame) {
	e = new(engine)
	e.init(4, 1000, simClock)
	e.startLink(4, 0, 0, 1000, 4, 1000, 0, false)
	f = &wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: 1}, Front: []byte("x")}
	if _, v, _, err := e.onFrame(f, false, nil); err != nil || v != rxDeliver {
		t.Fatalf("seq 1: %v %v", v, err)
	}
	e.enqueue(&Message{}) // so collect stamps a grant
	return e, f
}

func TestInvariantGrantWithinWindow(t *testing.T) {
	e, _ := linkedEngine(t)
	e.cw.advertisedMsgs.Store(5) // consumed (0) + window (4) + 1
	wantInvariantPanic(t, "granted 5 messages", func() { e.collect(nil, maxBatchFrames, maxBatchBytes) })
}

func TestInvariantCreditReturnedOnce(t *testing.T) {
	e, _ := linkedEngine(t)
	e.onRelease(1)
	e.onRelease(1) // the same message's credit again
	wantInvariantPanic(t, "consumed 2 messages of 1 received", func() { e.collect(nil, maxBatchFrames, maxBatchBytes) })
}

func TestInvariantDeliveredOnce(t *testing.T) {
	e, f := linkedEngine(t)
	// The session forgets seq 1 (as a sequencing bug would) but the
	// dispatcher had it.
	e.sess.inSeq = 0
	wantInvariantPanic(t, "delivering seq 1 after 1", func() { e.onFrame(f, false, nil) })
}
