//go:build rdma

package rdma_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/wire"
)

// spinLinkOptions are the links' options in these tests.
var spinLinkOptions = wire.LinkOptions{RecvWindow: 8, Limits: wire.Limits{MaxFront: 4 << 10, MaxData: 4 << 10},
	Banner: wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}}

// TestSpinBudgetFollowsTheTraffic drives a domain's production poller
// through idleness and traffic and reads how long it spins from Stats:
// idle, every sleep lasts its whole bound with nothing to find, and the
// budget halves to zero; with frames arriving within BusyPoll of each
// other, each wake-up that found one soon doubles it back to BusyPoll.
func TestSpinBudgetFollowsTheTraffic(t *testing.T) {
	// A bound well above the pacing's jitter, and below the poller's 2 ms
	// sleep, so a gap in the traffic is never an idle sleep.
	const bound = 1600 * time.Microsecond
	receiver := ownTransport(t, rdma.Config{BusyPoll: bound})
	sender := ownTransport(t, rdma.Config{})
	opts := spinLinkOptions
	ln, err := receiver.Listen(context.Background(), "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, r := rdma.LinkPair(t, sender, ln, opts)
	var wg sync.WaitGroup
	var ending atomic.Bool
	defer wg.Wait()
	defer r.Close()
	defer s.Close()
	defer ending.Store(true)
	wg.Go(func() {
		for {
			var f wire.Frame
			if err := r.ReadFrame(&f); err != nil {
				if !ending.Load() {
					t.Errorf("read: %v", err)
				}
				return
			}
			f.Release()
		}
	})
	waitStats := func(what string, ok func(rdma.Stats) bool) rdma.Stats {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; {
			st := receiver.Stats()
			if ok(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20 s: spin budget %v after %d grows and %d shrinks", what, st.SpinBudget, st.SpinGrows, st.SpinShrinks)
			}
			time.Sleep(time.Millisecond) // polling the counters, not synchronising
		}
	}
	// The domain starts at BusyPoll; on a loaded machine its poller may
	// have slept through halvings while the link was set up, so a budget
	// below it must come with a halving.
	if st := receiver.Stats(); st.SpinBudget > bound || st.SpinBudget < bound && st.SpinShrinks == 0 {
		t.Fatalf("spin budget %v after %d halvings at the start, want %v (less only after a halving)", st.SpinBudget, st.SpinShrinks, bound)
	}

	idle := waitStats("idle, the budget falls to zero", func(s rdma.Stats) bool { return s.SpinBudget == 0 })
	if idle.SpinShrinks < 5 { // 1600, 800, 400, 200, 100 µs, 0
		t.Fatalf("the budget fell to zero in %d halvings, want at least 5", idle.SpinShrinks)
	}
	// At zero the poller no longer spins after a wake-up: a poll or two
	// per sleep, where a spin of BusyPoll would be hundreds.
	const sleeps, pollsPerSleep = 20, 50
	zero := idle
	idle = waitStats("idle, the poller sleeps", func(s rdma.Stats) bool { return s.PollerSleeps-zero.PollerSleeps >= sleeps })
	if polls, slept := idle.CQPolls-zero.CQPolls, idle.PollerSleeps-zero.PollerSleeps; polls > pollsPerSleep*slept {
		t.Fatalf("idle at a budget of zero, the poller polled %d times for %d sleeps: it spins", polls, slept)
	}

	stop := make(chan struct{})
	wg.Go(func() {
		// Pacing the traffic, not synchronising: gaps of about half the
		// bound, so each spin on the way up ends empty and the sleep
		// after it wakes for the frame, well within the bound.
		tick := time.NewTicker(bound / 2)
		defer tick.Stop()
		for i := uint64(0); ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if s.WriteFrames([]wire.Frame{{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: i}, Data: []byte("spin")}}) != nil {
				return
			}
		}
	})
	busy := waitStats("under traffic, the budget grows back to BusyPoll", func(s rdma.Stats) bool { return s.SpinBudget == bound })
	close(stop)
	if grows := busy.SpinGrows - idle.SpinGrows; grows < 5 { // 0, 100, 200, 400, 800, 1600 µs
		t.Fatalf("the budget grew back to %v in %d doublings, want at least 5", bound, grows)
	}
}
