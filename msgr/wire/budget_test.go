package wire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// acquireAsync starts an Acquire and returns a channel that yields its
// charge once granted.
func acquireAsync(b *Budget, n int64, cancel <-chan struct{}) <-chan Charge {
	ch := make(chan Charge, 1)
	go func() {
		c, ok := b.Acquire(n, cancel)
		if ok {
			ch <- c
		} else {
			close(ch)
		}
	}()
	return ch
}

func waitWaiting(t *testing.T, b *Budget, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); b.Stats().Waiting != n; {
		if time.Now().After(deadline) {
			t.Fatalf("want %d waiting: %+v", n, b.Stats())
		}
		time.Sleep(time.Millisecond) // polling
	}
}

func granted(ch <-chan Charge) bool {
	select {
	case _, ok := <-ch:
		return ok
	default:
		return false
	}
}

// TestBudgetWaitsFIFO: charges beyond the budget wait, in order, until
// bytes are released; a message larger than the whole budget goes alone.
func TestBudgetWaitsFIFO(t *testing.T) {
	b := NewBudget(100)
	a, ok := b.Acquire(60, nil)
	if !ok {
		t.Fatal("first charge refused")
	}
	big := acquireAsync(b, 250, nil) // larger than the budget: waits for 0
	waitWaiting(t, b, 1)
	small := acquireAsync(b, 10, nil) // fits, but queues behind big
	waitWaiting(t, b, 2)
	if granted(big) || granted(small) {
		t.Fatal("charged over the budget, or out of order")
	}
	a.Release()
	c := <-big
	if st := b.Stats(); st.InFlight != 250 || st.Peak != 250 || st.Stalls != 2 {
		t.Fatalf("with the oversized message alone: %+v", st)
	}
	waitWaiting(t, b, 1)
	c.Release()
	s := <-small
	s.Release()
	s.Release() // a second release does nothing
	if st := b.Stats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("after every release: %+v", st)
	}
}

// TestBudgetCancel: a waiter whose link closes charges nothing and lets
// the ones behind it go.
func TestBudgetCancel(t *testing.T) {
	b := NewBudget(100)
	a, _ := b.Acquire(90, nil)
	cancel := make(chan struct{})
	first := acquireAsync(b, 50, cancel)
	waitWaiting(t, b, 1)
	second := acquireAsync(b, 5, nil)
	waitWaiting(t, b, 2)
	close(cancel)
	if _, ok := <-first; ok {
		t.Fatal("a cancelled wait was charged")
	}
	s := <-second // fits once the one before it is gone
	s.Release()
	a.Release()
	if st := b.Stats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("%+v", st)
	}
	var none *Budget
	if c, ok := none.Acquire(1<<40, nil); !ok || c.Bytes() != 0 {
		t.Fatal("a nil budget must admit everything and charge nothing")
	}
}

// TestStreamLinkChargesBeforeReading: a link with a budget charges a
// MESSAGE frame's segments before reading them and stops reading while
// the budget is spent; closing the link ends the wait.
func TestStreamLinkChargesBeforeReading(t *testing.T) {
	b := NewBudget(1000)
	c1, c2 := net.Pipe()
	defer c2.Close()
	l := newStreamLink(c1, io.Discard, c1, 0, LinkOptions{Limits: testLimits, Budget: b})
	msg := func(seq uint64, n int) []byte {
		var out bytes.Buffer
		w := newStreamLink(nil, &out, nil, 0, LinkOptions{Limits: testLimits})
		if err := w.WriteFrames([]Frame{{Preamble: Preamble{Tag: TagMessage, Seq: seq}, Front: []byte("f"), Data: make([]byte, n)}}); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	go func() {
		c2.Write(msg(1, 700))
		c2.Write(msg(2, 700))
	}()
	var f1 Frame
	if err := l.ReadFrame(&f1); err != nil {
		t.Fatal(err)
	}
	if f1.Charge.Bytes() != 701 || b.Stats().InFlight != 701 {
		t.Fatalf("charge %d, budget %+v", f1.Charge.Bytes(), b.Stats())
	}
	read := make(chan error, 1)
	var f2 Frame
	go func() { read <- l.ReadFrame(&f2) }()
	waitWaiting(t, b, 1)
	f1.Release()
	if err := <-read; err != nil || f2.Charge.Bytes() != 701 {
		t.Fatalf("second frame: %v, charge %d", err, f2.Charge.Bytes())
	}
	// Over the budget again; a close ends the wait and charges nothing.
	go c2.Write(msg(3, 700))
	go func() { read <- l.ReadFrame(new(Frame)) }()
	waitWaiting(t, b, 1)
	l.Close()
	if err := <-read; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	f2.Release()
	if st := b.Stats(); st.InFlight != 0 || st.Waiting != 0 || st.Stalls != 2 {
		t.Fatalf("%+v", st)
	}
}
