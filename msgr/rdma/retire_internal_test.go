//go:build rdma

package rdma

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// testListener returns a fresh tcp transport and a listener of it; the
// caller closes them.
func testListener(t *testing.T) (*Transport, wire.Listener) {
	t.Helper()
	return testListenerWith(t, Config{})
}

// testListenerWith is testListener with cfg for the transport.
func testListenerWith(t *testing.T, cfg Config) (*Transport, wire.Listener) {
	t.Helper()
	tr := NewTransport("tcp", cfg)
	ln, err := tr.Listen(context.Background(), "127.0.0.1:0", wire.LinkOptions{
		RecvWindow: 8, Banner: wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures},
	})
	if err != nil {
		tr.Close()
		t.Fatal(err)
	}
	return tr, ln
}

// testDomain returns the domain of a fresh tcp transport, closed with the
// test.
func testDomain(t *testing.T) *domain {
	t.Helper()
	tr, ln := testListener(t)
	t.Cleanup(func() {
		ln.Close()
		tr.Close()
	})
	return ln.(*listener).d
}

// ageRetired makes every retired region of d look retired long ago, as
// if retireDelay had passed, without waiting for it.
func ageRetired(d *domain) {
	d.mu.Lock()
	for i := range d.retired {
		d.retired[i].at = time.Now().Add(-time.Hour)
	}
	d.mu.Unlock()
}

// TestRetiredDestinationOutlivesItsEndpoint: the destination of a read
// still in flight when the reader dropped it (a fault seen by ReadFrame
// before Close closed the endpoint) is not unmapped, however long
// retireDelay ago it was retired, until the endpoint is closed: the
// provider may still write into it, and mmap may hand its address to a
// new region, a rendezvous source whose peer then reads bytes that are
// not those its CRC was taken over (docs/known-issues.md used to list
// this as the PeerKilledMidTransfer corruption). Once the endpoint is
// closed it goes.
func TestRetiredDestinationOutlivesItsEndpoint(t *testing.T) {
	d := testDomain(t)
	l := &link{d: d} // an endpoint still open: epClosed unset
	before := d.registered.Load()
	r, err := d.getLarge(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	l.pend = append(l.pend, &pendingRead{r: r}) // a read in flight
	l.readsOut = 1
	d.transfers.Add(1)
	l.dropPending()

	ageRetired(d)
	d.reapRetired(false)
	if r.mr == nil || r.unmapped {
		t.Fatalf("the destination of a read in flight was freed before its endpoint closed (deregistered %v, unmapped %v)",
			r.mr == nil, r.unmapped)
	}

	// The domain's poller reaps too, and may be the one that frees it:
	// so r's own fields are not read after this, only what the domain
	// counts (atomically) once a region is deregistered.
	l.epClosed.Store(true) // what closeEndpoint does after fi_close
	d.reapRetired(false)
	d.mu.Lock()
	kept := slices.ContainsFunc(d.retired, func(rr retiredRegion) bool { return rr.r == r })
	d.mu.Unlock()
	if kept {
		t.Fatal("a retired destination outlived its delay and its endpoint")
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.registered.Load() != before {
		if time.Now().After(deadline) {
			t.Fatalf("the retired destination is still registered: %d bytes, %d before it", d.registered.Load(), before)
		}
		time.Sleep(time.Millisecond) // polling interval
	}
}
