//go:build rdma && invariants

package rdma

import (
	"strings"
	"testing"
)

// wantPanic runs f and fails unless it panics with a message holding
// want.
func wantPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		msg, _ := recover().(string)
		if !strings.Contains(msg, want) {
			t.Fatalf("panic %q, want one saying %q", msg, want)
		}
	}()
	f()
}

// TestLargePoolInvariants: in the invariants build a rendezvous region
// put back in the pool twice, or written to while there, panics, so that
// a buffer lent to two transfers at once is caught where it happens and
// not as a CRC mismatch on the peer. A region used as it should be goes
// round the pool freely, through its reused wrapper too.
func TestLargePoolInvariants(t *testing.T) {
	d := testDomain(t)
	r, err := d.getLarge(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	b := r.buffer(1 << 20)
	clear(b.B) // a payload that overwrites every canary
	b.Release()
	if again, err := d.getLarge(1 << 20); err != nil || again != r {
		t.Fatalf("getLarge after a clean put: %p, %v; want the cached region %p", again, err, r)
	}
	d.putLarge(r)

	t.Run("DoublePut", func(t *testing.T) {
		wantPanic(t, "put back in the pool twice", func() { d.putLarge(r) })
		d.inUse.Add(1) // the refused put's count
	})
	t.Run("WriteWhilePooled", func(t *testing.T) {
		r.mem[3*4096] ^= 1 // a transfer still writing into a buffer given back
		wantPanic(t, "written at offset 12288 while in the pool", func() { d.getLarge(1 << 20) })
		r.free() // taken off the pool by the refused getLarge
	})
}

// TestReceiveSlotInvariants: in the invariants build a receive buffer
// posted while it is posted already (a frame released twice, its second
// Release coming after the first reposted the buffer) panics, as does a
// completion for a buffer that is not posted.
func TestReceiveSlotInvariants(t *testing.T) {
	s := newSlotLedger(4)
	s.posting("a link", 2)
	s.completed("a link", 2)
	s.posting("a link", 2) // reposted once the frame in it was released
	wantPanic(t, "receive buffer 2 of a link posted while already posted", func() { s.posting("a link", 2) })
	wantPanic(t, "a receive completed in buffer 3 of a link, which was not posted", func() { s.completed("a link", 3) })
}
