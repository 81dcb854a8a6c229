//go:build rdma

package rdma

import (
	"testing"
)

// TestLentRegionsEndWithTheDomain: the transport's Close ends the
// registration of every lent region, spare or still held (a closed
// transport's Stats count nothing, so the domain's own counter is read),
// frees the spare ones, and leaves the held one mapped until its last
// Release, which unmaps it.
func TestLentRegionsEndWithTheDomain(t *testing.T) {
	tr, ln := testListener(t)
	l := ln.(*listener)
	d := l.d
	base := d.registered.Load()
	held, err := l.AllocRegistered(1 << 20)
	if err != nil {
		tr.Close()
		t.Fatal(err)
	}
	spare, err := l.AllocRegistered(2 << 20)
	if err != nil {
		tr.Close()
		t.Fatal(err)
	}
	hr, sr := held.Owner.(*region), spare.Owner.(*region)
	spare.Release()
	if got := d.registered.Load() - base; got != 3<<20 {
		t.Fatalf("%d bytes registered for 3 MiB lent", got)
	}
	for i := range held.B {
		held.B[i] = byte(i)
	}
	ln.Close()
	tr.Close()
	if got := d.registered.Load(); got != 0 {
		t.Fatalf("%d bytes registered after Close", got)
	}
	if !sr.unmapped || hr.unmapped {
		t.Fatalf("after Close: spare region unmapped %v, held region unmapped %v; want true, false", sr.unmapped, hr.unmapped)
	}
	for i, b := range held.B {
		if b != byte(i) {
			t.Fatalf("byte %d of memory still held changed at Close", i)
		}
	}
	held.Release()
	if !hr.unmapped {
		t.Fatal("a lent region outlived its last Release after Close")
	}
}
