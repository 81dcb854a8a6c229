//go:build rdma

package rdma

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// TestCQFullRefusesLink: a link whose completions could not fit any CQ of
// its domain is refused with a *CQFullError that says why, before it
// takes anything: one larger than a whole CQ at once, others once the
// domain has maxCQs open and full. A closed link's entries come back once
// its CQ was read empty, and the next link takes them without a new CQ.
func TestCQFullRefusesLink(t *testing.T) {
	srv, ln := testListener(t)
	defer srv.Close()
	defer ln.Close()
	opts := wire.LinkOptions{RecvWindow: 8, Banner: wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}}
	need := func(tr *Transport) int {
		d := ln.(*listener).d
		nctl := 0
		if d.rdvWrite {
			nctl = ctlSlots
		}
		return linkCQEntries(8+nctl+sessCtlRecvs, tr.cfg.SendSlots, nctl, d.rdvWrite)
	}
	dial := func(tr *Transport) (wire.Link, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return tr.Dial(ctx, ln.Addr(), opts)
	}
	wantFull := func(err error, wantNeed, wantEntries, wantCQs int) {
		t.Helper()
		var full *CQFullError
		if !errors.As(err, &full) || full.Need != wantNeed || full.Entries != wantEntries || full.CQs != wantCQs {
			t.Fatalf("dial: %v; want a CQFullError{Need %d, Entries %d, CQs %d}", err, wantNeed, wantEntries, wantCQs)
		}
	}

	// Larger than a CQ.
	n := need(srv)
	small := NewTransport("tcp", Config{CQEntries: n - 1})
	defer small.Close()
	_, err := dial(small)
	wantFull(err, n, n-1, 1)
	if st := small.Stats(); st.CQReserved != 0 || st.RegisteredBytes != 0 {
		t.Fatalf("a refused link left %d CQ entries reserved, %d bytes registered", st.CQReserved, st.RegisteredBytes)
	}

	// Two CQs of room for one link each.
	defer func(m int) { maxCQs = m }(maxCQs)
	maxCQs = 2
	tr := NewTransport("tcp", Config{CQEntries: n + n/2})
	defer tr.Close()
	var links []wire.Link
	for range 2 {
		d, a := LinkPair(t, tr, ln, opts)
		defer a.Close()
		links = append(links, d)
	}
	_, err = dial(tr)
	wantFull(err, n, n+n/2, 2)

	links[0].Close()
	d := links[0].(*link).d
	waitReserved := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for d.cqReserved() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d CQ entries reserved, want %d", d.cqReserved(), want)
			}
			time.Sleep(time.Millisecond) // polling for the poller's next empty read
		}
	}
	waitReserved(int64(n))
	again, a := LinkPair(t, tr, ln, opts)
	defer a.Close()
	if st := tr.Stats(); st.CQs != 2 || st.CQReserved != int64(2*n) {
		t.Fatalf("after a link closed and another opened: %d CQs, %d reserved; want 2, %d", st.CQs, st.CQReserved, 2*n)
	}
	d.cqs.mu.Lock()
	for i, q := range d.cqs.qs {
		if q.reserved > q.size {
			t.Errorf("CQ %d: %d entries reserved of %d", i, q.reserved, q.size)
		}
	}
	d.cqs.mu.Unlock()
	again.Close()
	links[1].Close()
	waitReserved(0)
}
