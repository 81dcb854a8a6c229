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
// let go wakes it. While it waits, lent memory is not handed out, not
// even the region just given back and kept as a spare: the cache must not
// take back what it gave. Without this, a transfer waited for memory
// only the cache held until it gave up (2 s) and failed its link: gets
// under a small budget fell from hundreds of MB/s to tens, every one
// replayed. Holders are asked in turn, each for what the others have not
// given.
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
	// The rest of the budget is held, but for 8 MiB, in two parts: a
	// 24 MiB transfer fits only if the cache lets go.
	rest := int(budget - d.registered.Load() - 8<<20)
	hold, err := d.register(rest - 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.free()
	nudge, err := d.register(1 << 20)
	if err != nil {
		t.Fatal(err)
	}

	type ask struct {
		need        int64
		letGo       bool // the cache let its memory go
		lentRefused bool // AllocRegistered, just after it did
	}
	asked := make(chan ask, 64)
	letGo := make(chan struct{})
	stop := l.OnRegisteredPressure(func(need int64) int64 {
		select {
		case <-letGo:
		default:
			// A cache that keeps its memory, and asks for more.
			b, err := l.AllocRegistered(4096)
			if b != nil {
				b.Release()
			}
			asked <- ask{need: need, lentRefused: errors.Is(err, wire.ErrRegisteredPressure)}
			return 0
		}
		cached.Release() // kept as a spare region: registered still
		b, err := l.AllocRegistered(24 << 20)
		if b != nil {
			b.Release()
		}
		asked <- ask{need: need, letGo: true, lentRefused: errors.Is(err, wire.ErrRegisteredPressure)}
		return 24 << 20
	})
	// A second holder, asked only for what the first did not give.
	second := make(chan int64, 64)
	stop2 := l.OnRegisteredPressure(func(need int64) int64 {
		select {
		case second <- need:
		default:
		}
		return 0
	})
	next := func(what string) ask {
		t.Helper()
		select {
		case a := <-asked:
			return a
		case <-time.After(10 * time.Second):
			t.Fatalf("no holder was asked for memory: %s", what)
			return ask{}
		}
	}

	done := make(chan *region, 1)
	go func() {
		r, err := d.getSource(24<<20, nil)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	if a := next("the transfer's first try"); a.need != int64(largeSize(24<<20)) || !a.lentRefused {
		t.Fatalf("holders asked for %d bytes (lent memory refused meanwhile: %v), want the transfer's %d (true)", a.need, a.lentRefused, largeSize(24<<20))
	}
	if b, err := l.AllocRegistered(4096); !errors.Is(err, wire.ErrRegisteredPressure) {
		if b != nil {
			b.Release()
		}
		t.Fatalf("AllocRegistered while a transfer waits: %v; want ErrRegisteredPressure", err)
	}

	// The cache lets go at the transfer's next try (woken by 1 MiB
	// coming back): the transfer gets its memory, and the cache could
	// not take it back meanwhile.
	close(letGo)
	nudge.free()
	d.memReturned()
	a := next("after memory came back")
	for !a.letGo {
		a = next("after memory came back")
	}
	if !a.lentRefused {
		t.Fatal("the cache could take back at once the memory it let go for a waiting transfer")
	}
	var r *region
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the transfer was not woken when the cache let its memory go")
	}
	if r == nil {
		t.Fatal("the transfer failed after the cache let go")
	}
	d.putSource(r)
	if b, err := l.AllocRegistered(4096); err != nil {
		t.Fatalf("AllocRegistered once no transfer waits: %v", err)
	} else {
		b.Release()
	}
	select {
	case need := <-second:
		if need != int64(largeSize(24<<20)) {
			t.Fatalf("the second holder was asked for %d, want what the first did not give, %d", need, largeSize(24<<20))
		}
	default:
		t.Fatal("a holder that gave nothing left the second unasked")
	}

	// Stopped, holders are asked for nothing more.
	stop()
	stop2()
	d.trimLarge(budget) // r, cached, would fit
	hold2, err := d.register(int(budget - d.registered.Load()))
	if err != nil {
		t.Fatal(err)
	}
	defer hold2.free()
	short := false
	if _, wait, _ := d.tryLarge(24<<20, &short); wait == nil {
		t.Fatal("tryLarge fit a budget held whole")
	}
	d.endShort(&short)
	select {
	case a := <-asked:
		t.Fatalf("a stopped holder was asked for %d bytes", a.need)
	default:
	}
}
