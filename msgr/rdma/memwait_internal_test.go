//go:build rdma

package rdma

import (
	"testing"
	"time"
)

// TestSourceShareGivenBackWakesItsWaiters: a copy of a payload being sent
// (getSource) that waits for room in the sources' share is woken when the
// source that held the share gives it back, here because its link closed
// while it waited for the budget. It was given back without a wake-up,
// and the waiter slept until some unrelated memory came back, if any
// (review of session 47).
func TestSourceShareGivenBackWakesItsWaiters(t *testing.T) {
	const budget = 64 << 20
	tr, ln := testListenerWith(t, Config{MemBudget: budget})
	defer func() { ln.Close(); tr.Close() }()
	d := ln.(*listener).d
	// Hold memory so that 40 MiB does not fit the budget but 4 MiB does.
	hold, err := d.register(int(budget - d.registered.Load() - 16<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer hold.free()

	closedA := make(chan struct{})
	doneA := make(chan error, 1)
	go func() {
		_, err := d.getSource(40<<20, closedA) // alone, it takes the share; the budget is short
		doneA <- err
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("A to wait for the budget", func() bool { return d.memw.waits.Load() >= 1 })
	doneB := make(chan *region, 1)
	go func() {
		r, err := d.getSource(4<<20, nil) // the share is A's: B waits for room in it
		if err != nil {
			t.Error(err)
		}
		doneB <- r
	}()
	waitFor("B to wait for the share", func() bool { return d.memw.waits.Load() >= 2 })
	close(closedA) // A's link closes: A gives the share back
	if err := <-doneA; err == nil {
		t.Fatal("A got its buffer although the budget had no room")
	}
	select {
	case r := <-doneB:
		if r != nil {
			d.putSource(r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("B still waits, 10 s after the share was given back, with room for it in the budget")
	}
}
