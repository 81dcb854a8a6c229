//go:build rdma

package rdma

import (
	"errors"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// testLink returns a link dialed from tr to ln, and the accepted end.
func testLink(t *testing.T, tr *Transport, ln wire.Listener) (*link, wire.Link) {
	d, a := LinkPair(t, tr, ln, wire.LinkOptions{RecvWindow: 8, Banner: wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}})
	return d.(*link), a
}

// TestCloseWaitsForReads: where the provider must not shut an endpoint
// down with a read's response part way in (readsBreakClose), Close waits
// for the link's reads in flight and closes the endpoint once the last
// completes; if one never does, Close returns after readDrainTimeout and
// leaves the endpoint parked, open and with its memory, until the domain
// closes, which closes it and frees everything.
func TestCloseWaitsForReads(t *testing.T) {
	tr, ln := testListener(t)
	d := ln.(*listener).d
	if !d.readsBreakClose {
		tr.Close()
		t.Skip("this libfabric's tcp provider shuts endpoints down with reads in flight safely")
	}

	// A read that completes while Close waits.
	l, peer := testLink(t, tr, ln)
	l.readsPosted.Store(1)
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for !l.draining.Load() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // polling for Close to start
		}
		l.complete(opRead, 0, 0, errors.New("cancelled"))
	}()
	l.Close()
	if !l.epClosed.Load() {
		t.Fatal("Close left the endpoint open after its read completed")
	}
	peer.Close()

	// One that never does.
	l, peer = testLink(t, tr, ln)
	defer peer.Close()
	l.readsPosted.Store(1)
	start := time.Now()
	l.Close()
	if took := time.Since(start); took < readDrainTimeout {
		t.Fatalf("Close returned after %v with a read in flight, before readDrainTimeout", took)
	}
	d.mu.Lock()
	parked := len(d.parked)
	d.mu.Unlock()
	if l.epClosed.Load() || parked != 1 {
		t.Fatalf("Close with a read in flight: endpoint closed %v, %d parked; want it parked", l.epClosed.Load(), parked)
	}
	if l.send.mr == nil {
		t.Fatal("a parked endpoint's send buffers were freed")
	}

	peer.Close()
	ln.Close()
	tr.Close()
	if !l.epClosed.Load() {
		t.Fatal("the domain closed without closing its parked endpoint")
	}
	if s := tr.Stats(); s.RegisteredBytes != 0 {
		t.Fatalf("%d bytes still registered after the transport closed", s.RegisteredBytes)
	}
}
