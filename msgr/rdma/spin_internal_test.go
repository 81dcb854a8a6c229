//go:build rdma

package rdma

import (
	"testing"
	"time"
)

// TestSpinBudgetSteps walks a budget of 1.6 ms (steps of 100 µs) through
// each way a spin or a sleep can end, checking it after each.
func TestSpinBudgetSteps(t *testing.T) {
	const us = time.Microsecond
	b := newSpinBudget(1600 * us)
	empty := func(n int) func() {
		return func() {
			for range n {
				b.spunEmpty()
			}
		}
	}
	steps := []struct {
		what  string
		do    func()
		want  time.Duration
		grows uint64
	}{
		{"a wake-up that found work at the bound changes nothing", func() { b.woke(1600*us, true, false) }, 1600 * us, 0},
		{"seven empty spins change nothing", empty(spinMisses - 1), 1600 * us, 0},
		{"the eighth halves it", empty(1), 800 * us, 0},
		{"seven more and a catch change nothing", func() { empty(spinMisses - 1)(); b.caught() }, 800 * us, 0},
		{"eight more in a row after the catch halve it", empty(spinMisses), 400 * us, 0},
		{"a sleep of its whole bound that found nothing halves it", func() { b.woke(2*time.Millisecond, false, true) }, 200 * us, 0},
		{"a sleep that found work after the bound changes nothing", func() { b.woke(1601*us, true, false) }, 200 * us, 0},
		{"nor does one ended early with nothing (a goroutine wanted the token)", func() { b.woke(10*us, false, false) }, 200 * us, 0},
		{"halved below a sixteenth of the bound it is zero", func() { b.woke(time.Second, false, true); b.woke(time.Second, false, true) }, 0, 0},
		{"zero stays zero", func() { b.woke(time.Second, false, true); empty(spinMisses)() }, 0, 0},
		{"a wake-up that found work within the bound grows it to a step", func() { b.woke(1*us, true, false) }, 100 * us, 1},
		{"then doubles it", func() { b.woke(1600*us, true, false) }, 200 * us, 2},
		{"up to the bound", func() { b.woke(us, true, false); b.woke(us, true, false); b.woke(us, true, false) }, 1600 * us, 5},
		{"and no further", func() { b.woke(us, true, false) }, 1600 * us, 5},
	}
	for i, s := range steps {
		s.do()
		if got := b.budget(); got != s.want || b.grows.Load() != s.grows {
			t.Fatalf("step %d (%s): budget %v after %d grows, want %v after %d", i, s.what, got, b.grows.Load(), s.want, s.grows)
		}
	}
	if got := b.shrinks.Load(); got != 5 {
		t.Fatalf("%d shrinks counted, want 5", got)
	}
}

// TestSpinBudgetTinyBound: a bound below spinSteps nanoseconds still
// grows back from zero.
func TestSpinBudgetTinyBound(t *testing.T) {
	b := newSpinBudget(4)
	for range 3 { // 4, 2, 1, 0 ns
		b.woke(time.Second, false, true)
	}
	if b.budget() != 0 {
		t.Fatalf("budget %v after three idle sleeps, want 0", b.budget())
	}
	b.woke(2, true, false)
	if b.budget() == 0 {
		t.Fatal("a wake-up that found work within the bound left the budget at zero")
	}
}

// TestPollerTakesBackAStaleDuty: a reader that polled for its frame keeps
// the poll duty when it returns it; if it does not come back for the next
// (its session waits, the link goes quiet), the poller takes the duty
// back and sleeps, rather than poll without pause for as long as the
// reader stays away.
func TestPollerTakesBackAStaleDuty(t *testing.T) {
	tr, ln := testListener(t)
	defer tr.Close()
	defer ln.Close()
	d := ln.(*listener).d
	l, peer := testLink(t, tr, ln)
	defer peer.Close()
	defer l.Close()
	// As pollFor leaves it when it returns a frame.
	d.dutyPolled.Store(int64(time.Since(monoEpoch)))
	d.pollDuty.Store(l)
	// Each sleep is at most 2 ms (pollSleepMax) and is followed by a poll
	// or two; a poller that cannot sleep polls some hundred thousand
	// times a second.
	// A spin budget at its BusyPoll cap (50 µs of polls of about 1 µs)
	// polls some 50 times before each sleep, and a loaded host makes a
	// sleep's wake-up find work now and then, growing it: 1,214 polls
	// for 20 sleeps were seen so. A spinner polls thousands of times
	// between sleeps, if it sleeps at all.
	const sleeps, pollsPerSleep = 20, 200
	polls, slept := d.pollStats.polls.Load(), d.pollStats.blocked.Load()
	for deadline := time.Now().Add(10 * time.Second); d.pollStats.blocked.Load()-slept < sleeps; {
		if time.Now().After(deadline) {
			t.Fatalf("the poller slept %d times in 10 s with a stale duty, and polled %d times", d.pollStats.blocked.Load()-slept, d.pollStats.polls.Load()-polls)
		}
		time.Sleep(time.Millisecond) // polling the counter, not synchronising
	}
	if d.pollDuty.Load() != nil {
		t.Fatal("the poller sleeps with the duty still held")
	}
	if p, s := d.pollStats.polls.Load()-polls, d.pollStats.blocked.Load()-slept; p > pollsPerSleep*s {
		t.Fatalf("the poller polled %d times for %d sleeps with a stale duty: it spins", p, s)
	}
}
