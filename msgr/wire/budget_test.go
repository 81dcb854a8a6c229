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
		var c Charge
		if b.Grow(&c, n, cancel) {
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
	var a Charge
	if !b.Grow(&a, 60, nil) {
		t.Fatal("first charge refused")
	}
	big := acquireAsync(b, 250, nil) // larger than the budget: waits for 0
	waitWaiting(t, b, 1)
	small := acquireAsync(b, 10, nil) // fits, but queues behind big
	waitWaiting(t, b, 2)
	if granted(big) || granted(small) {
		t.Fatal("charged over the budget, or out of order")
	}
	if st := b.Stats(); st.WaitEnded != 0 {
		t.Fatalf("no wait has ended, but WaitEnded is %d", st.WaitEnded)
	}
	before := time.Now().UnixNano()
	a.Release()
	c := <-big
	// The messenger's idle check reads WaitEnded: the granted reader has
	// not read its frame yet.
	if st := b.Stats(); st.WaitEnded < before {
		t.Fatalf("a wait ended at %d, but WaitEnded is %d", before, st.WaitEnded)
	}
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

// TestBudgetReserve: a reader that cannot block (an RDMA link's) queues
// its charge and goes on; the wait is ready once the bytes are its, and a
// wait given up after its grant gives them back.
func TestBudgetReserve(t *testing.T) {
	b := NewBudget(100)
	var a, c, d Charge
	if w := b.Reserve(&a, 80); w != nil {
		t.Fatal("a charge that fits waited")
	}
	wc := b.Reserve(&c, 40)
	if wc == nil {
		t.Fatal("a charge over the budget did not wait")
	}
	wd := b.Reserve(&d, 10) // fits, but queues behind c
	if wd == nil || b.Stats().Waiting != 2 {
		t.Fatalf("out of order: %+v", b.Stats())
	}
	a.Release()
	<-wc.Ready()
	<-wd.Ready()
	if c.Bytes() != 40 || d.Bytes() != 10 || b.Stats().InFlight != 50 {
		t.Fatalf("granted %d and %d: %+v", c.Bytes(), d.Bytes(), b.Stats())
	}
	wc.Cancel() // given up after its grant: its bytes go back
	d.Release()
	if st := b.Stats(); c.Bytes() != 0 || st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("after the cancel and the release: charge %d, %+v", c.Bytes(), st)
	}
}

// TestBudgetCancel: a waiter whose link closes charges nothing and lets
// the ones behind it go.
func TestBudgetCancel(t *testing.T) {
	b := NewBudget(100)
	var a Charge
	b.Grow(&a, 90, nil)
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
	var c Charge
	if ok := none.Grow(&c, 1<<40, nil); !ok || c.Bytes() != 0 {
		t.Fatal("a nil budget must admit everything and charge nothing")
	}
}

// TestStreamLinkChargesBeforeReading: a link with a budget charges a
// MESSAGE frame's segments, or a SEALED frame's (secure mode: most often
// a sealed MESSAGE), before reading them and stops reading while the
// budget is spent; closing the link ends the wait.
func TestStreamLinkChargesBeforeReading(t *testing.T) {
	for _, tag := range []Tag{TagMessage, TagSealed} {
		t.Run(tag.String(), func(t *testing.T) { testChargesBeforeReading(t, tag) })
	}
}

func testChargesBeforeReading(t *testing.T, tag Tag) {
	b := NewBudget(1000)
	c1, c2 := net.Pipe()
	defer c2.Close()
	l := newStreamLink(c1, io.Discard, c1, 0, LinkOptions{Limits: testLimits, Budget: b})
	// A front a SEALED frame in two parts may have: its smallest.
	front := make([]byte, SealedOverhead)
	msg := func(seq uint64, n int) []byte {
		var out bytes.Buffer
		w := newStreamLink(nil, &out, nil, 0, LinkOptions{Limits: testLimits})
		if err := w.WriteFrames([]Frame{{Preamble: Preamble{Tag: tag, Seq: seq}, Front: front, Data: make([]byte, n)}}); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	const charged = SealedOverhead + 700
	go func() {
		c2.Write(msg(1, 700))
		c2.Write(msg(2, 700))
	}()
	var f1 Frame
	if err := l.ReadFrame(&f1); err != nil {
		t.Fatal(err)
	}
	if f1.Charge.Bytes() != charged || b.Stats().InFlight != charged {
		t.Fatalf("charge %d, budget %+v", f1.Charge.Bytes(), b.Stats())
	}
	read := make(chan error, 1)
	var f2 Frame
	go func() { read <- l.ReadFrame(&f2) }()
	waitWaiting(t, b, 1)
	f1.Release()
	if err := <-read; err != nil || f2.Charge.Bytes() != charged {
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

// TestStreamLinkGrowsUnderPressure: while the budget is more than half
// spent, a large frame is read into a buffer that starts small and grows,
// charged as it grows, even when the read chunk already holds more of it
// than the first buffer; and a frame that cannot grow because everything
// else charged waits too goes over the budget alone.
func TestStreamLinkGrowsUnderPressure(t *testing.T) {
	b := NewBudget(1 << 20)
	var held Charge
	b.Grow(&held, 900<<10, nil) // more than half spent
	var out bytes.Buffer
	w := newStreamLink(nil, &out, nil, 0, LinkOptions{Limits: testLimits})
	data := make([]byte, 200<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := w.WriteFrames([]Frame{{Preamble: Preamble{Tag: TagMessage, Seq: 1}, Front: []byte("front"), Data: data}}); err != nil {
		t.Fatal(err)
	}
	// The whole frame is there at once: the first read takes a chunk's
	// worth, more than the 64 KiB the body starts with.
	l := newStreamLink(bytes.NewReader(out.Bytes()), io.Discard, io.NopCloser(nil), 0, LinkOptions{Limits: testLimits, Budget: b})
	got := make(chan error, 1)
	var f Frame
	go func() { got <- l.ReadFrame(&f) }()
	// 124 KiB fit; the growth beyond waits until nothing but this frame
	// is held, then goes over the budget.
	waitWaiting(t, b, 1)
	held.Release()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if string(f.Front) != "front" || !bytes.Equal(f.Data, data) {
		t.Fatal("the frame read in growing buffers is corrupted")
	}
	if f.Charge.Bytes() != int64(len(data)+5) || b.Stats().InFlight != f.Charge.Bytes() {
		t.Fatalf("charge %d for %d bytes of segments, budget %+v", f.Charge.Bytes(), len(data)+5, b.Stats())
	}
	f.Release()
	if st := b.Stats(); st.InFlight != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestBudgetLeaderGoesOverAlone: two large frames grow while the budget
// runs out under them; once every charged byte belongs to a frame that
// waits, the first goes over the budget and completes, and the other waits
// until that message is released: never two over at once.
func TestBudgetLeaderGoesOverAlone(t *testing.T) {
	const limit, size = 300 << 10, 400 << 10
	b := NewBudget(limit)
	type result struct {
		f   *Frame
		err error
	}
	done := make(chan result, 2)
	for i := range 2 {
		var out bytes.Buffer
		w := newStreamLink(nil, &out, nil, 0, LinkOptions{Limits: testLimits})
		data := bytes.Repeat([]byte{byte(i + 1)}, size)
		if err := w.WriteFrames([]Frame{{Preamble: Preamble{Tag: TagMessage, Seq: 1}, Data: data}}); err != nil {
			t.Fatal(err)
		}
		l := newStreamLink(bytes.NewReader(out.Bytes()), io.Discard, io.NopCloser(nil), 0, LinkOptions{Limits: testLimits, Budget: b})
		go func() {
			f := new(Frame)
			done <- result{f, l.ReadFrame(f)}
		}()
	}
	first := <-done
	if first.err != nil || len(first.f.Data) != size {
		t.Fatalf("first frame: %v", first.err)
	}
	waitWaiting(t, b, 1) // the other cannot go over while the first is held
	select {
	case r := <-done:
		t.Fatalf("a second frame went over the budget while the first was held: %v", r.err)
	default:
	}
	firstByte := first.f.Data[0]
	first.f.Release()
	second := <-done
	if second.err != nil || len(second.f.Data) != size || second.f.Data[0] == firstByte {
		t.Fatalf("second frame: %v", second.err)
	}
	second.f.Release()
	if st := b.Stats(); st.InFlight != 0 || st.Peak > limit+size {
		t.Fatalf("%+v: over the budget plus one message", st)
	}
}
