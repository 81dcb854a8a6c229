package osd

import (
	"fmt"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
)

// TestPartHoldsByUpload: a reader's hold names one part and covers every
// part and piece of its upload, in its bucket only; the table takes no
// more than maxPartHolds, and lapsed holds make room again.
func TestPartHoldsByUpload(t *testing.T) {
	const id, other = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	var h partHolds
	up, ok := uploadOfPart(ops.PartKey(id, 1))
	if !ok || up != id {
		t.Fatalf("upload of a part key: %q, %v", up, ok)
	}
	if _, ok := uploadOfPart("photos/cat.jpg"); ok {
		t.Fatal("an ordinary key taken for a part")
	}
	if !h.hold("b", up, time.Minute) {
		t.Fatal("hold refused")
	}
	dropped := uploadsOf([]string{ops.PartKey(id, 2), ops.PieceKey(id, 3, "0badcafe", 1), ops.PartKey(id, 4), "not a part"})
	if len(dropped) != 1 || dropped[0] != id {
		t.Fatalf("uploads of a replaced manifest's parts: %q", dropped)
	}
	if !h.heldUntil("b", dropped).After(time.Now()) {
		t.Fatal("the other parts of a held upload are not held")
	}
	if !h.heldUntil("c", dropped).IsZero() || !h.heldUntil("b", []string{other}).IsZero() {
		t.Fatal("a hold covers another bucket or upload")
	}

	for i := 1; len(h.until) < maxPartHolds; i++ {
		h.hold("b", fmt.Sprint(i), time.Minute)
	}
	if h.hold("b", other, time.Minute) {
		t.Fatal("a hold past maxPartHolds taken")
	}
	if !h.hold("b", id, time.Minute) {
		t.Fatal("a held upload's renewal refused at the bound")
	}
	h.mu.Lock()
	for n := range h.until {
		h.until[n] = time.Now().Add(-time.Second) // all lapsed
	}
	h.pruneAt = 0
	h.mu.Unlock()
	if !h.hold("b", other, time.Minute) || len(h.until) != 1 {
		t.Fatalf("lapsed holds kept (%d) or a new one refused", len(h.until))
	}
}
