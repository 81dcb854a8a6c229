//go:build rdma

package rdma

import (
	"errors"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// TestTransferReclaimsLentMemory: a transfer that finds the budget spent
// while lent memory (an OSD's read cache) holds much of it asks the
// holders for its size back (OnRegisteredPressure), and the memory they
// let go wakes it. While it waits, lent memory is not handed out: the
// cache must not take back at once what it gave. Without this, a
// transfer waited for memory only the cache held until it gave up (2 s)
// and failed its link: gets under a small budget fell from hundreds of
// MB/s to tens, every one replayed.
func TestTransferReclaimsLentMemory(t *testing.T) {
	const budget = 64 << 20
	tr, ln := testListenerWith(t, Config{MemBudget: budget})
	defer func() { ln.Close(); tr.Close() }()
	l := ln.(*listener)
	d := l.d
	cached, err := l.AllocRegistered(24 << 20) // within the lent half
	if err != nil {
		t.Fatal(err)
	}
	// The rest of the budget is held, but for 8 MiB: a 24 MiB transfer
	// fits only if the cache lets go.
	hold, err := d.register(int(budget - d.registered.Load() - 8<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer hold.free()

	asked := make(chan int64, 4)
	var giveBack func() // the cache's answer, set below
	stop := l.OnRegisteredPressure(func(need int64) {
		asked <- need
		if giveBack != nil {
			giveBack()
			giveBack = nil
		}
	})

	// A cache that keeps its memory: the transfer is told to wait, and
	// lent memory is refused meanwhile with ErrRegisteredPressure.
	r, wait, err := d.tryLarge(24 << 20)
	if r != nil || wait == nil || err != nil {
		t.Fatalf("tryLarge with the budget held: region %v, wait %v, err %v; want a wait", r != nil, wait != nil, err)
	}
	if need := <-asked; need != int64(largeSize(24<<20)) {
		t.Fatalf("holders asked for %d bytes, want the transfer's %d", need, largeSize(24<<20))
	}
	if b, err := l.AllocRegistered(4096); !errors.Is(err, wire.ErrRegisteredPressure) {
		if b != nil {
			b.Release()
		}
		t.Fatalf("AllocRegistered while a transfer waits: %v; want ErrRegisteredPressure", err)
	}

	// A cache that lets go: the next try wakes once the memory is back,
	// and fits.
	giveBack = cached.Release
	if r, wait, err = d.tryLarge(24 << 20); err != nil {
		t.Fatal(err)
	}
	if r == nil {
		select {
		case <-wait:
		case <-time.After(10 * time.Second):
			t.Fatal("the transfer was not woken when the cache let its memory go")
		}
		if r, _, err = d.tryLarge(24 << 20); r == nil || err != nil {
			t.Fatalf("after the cache let go: region %v, err %v", r != nil, err)
		}
	}
	d.putLarge(r)
	<-asked // the second try's
	if b, err := l.AllocRegistered(4096); err != nil {
		t.Fatalf("AllocRegistered once no transfer waits: %v", err)
	} else {
		b.Release()
	}

	// Stopped, a holder is asked for nothing more.
	stop()
	d.trimLarge(budget) // r, cached, would fit
	hold2, err := d.register(int(budget - d.registered.Load()))
	if err != nil {
		t.Fatal(err)
	}
	defer hold2.free()
	if _, wait, _ := d.tryLarge(24 << 20); wait == nil {
		t.Fatal("tryLarge fit a budget held whole")
	}
	select {
	case need := <-asked:
		t.Fatalf("a stopped holder was asked for %d bytes", need)
	default:
	}
}
