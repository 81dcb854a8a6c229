//go:build rdma

package rdma

import (
	"sync/atomic"
	"time"
)

// spinSteps is how many halvings take a spin budget from its bound to
// zero: below bound/spinSteps a spin is too short to catch anything a
// sleep would not (a few CQ reads), so the budget drops to zero, and from
// zero it grows back to that step first.
const spinSteps = 16

// spinBudget is how long a domain's pollers (the poller and a reader
// polling for the domain) spin for the next completion before they sleep:
// between zero and Config.BusyPoll, adapted to whether spinning pays, in
// the spirit of adaptive interrupt moderation and DPDK's adaptive polling.
// Spinning pays when the next completion comes within the bound, so it
// learns from the gaps between CQ reads that found completions:
//
//   - a gap within the budget: the spin caught it; no change;
//   - a gap beyond the budget but within the bound: a longer spin would
//     have caught what a sleep's wake-up found: double it;
//   - a gap beyond the bound, or a sleep that lasted its whole bound and
//     found nothing: no spin up to the bound would have paid: halve it,
//     to zero below bound/spinSteps.
//
// A loaded domain (completions microseconds apart, as on a NIC or in a
// ping-pong) keeps the whole bound; an idle or sparse one stops spinning
// within a few gaps, so domains that share cores with the work (four in
// one process in a local cluster) do not take them from it.
//
// NB: updates are compare-and-swap, since a reader's poll and the poller's
// idle wake-up may race; a lost race loses one adjustment, never corrupts.
type spinBudget struct {
	bound time.Duration
	cur   atomic.Int64 // nanoseconds
	// grows and shrinks count the adjustments, for Stats and tests.
	grows, shrinks atomic.Uint64
}

func newSpinBudget(bound time.Duration) *spinBudget {
	b := &spinBudget{bound: bound}
	b.cur.Store(int64(bound))
	return b
}

// budget is how long to spin now.
func (b *spinBudget) budget() time.Duration { return time.Duration(b.cur.Load()) }

// found takes the gap between a CQ read that found completions and the
// one before it that did.
func (b *spinBudget) found(gap time.Duration) {
	cur := b.budget()
	switch {
	case gap <= cur:
	case gap <= b.bound:
		b.grow(cur)
	default:
		b.shrink(cur)
	}
}

// sleptIdle notes a sleep that lasted its whole bound and found nothing.
func (b *spinBudget) sleptIdle() { b.shrink(b.budget()) }

// step is the smallest budget but zero.
func (b *spinBudget) step() time.Duration { return max(b.bound/spinSteps, 1) }

func (b *spinBudget) grow(cur time.Duration) {
	next := min(b.bound, max(2*cur, b.step()))
	if next != cur && b.cur.CompareAndSwap(int64(cur), int64(next)) {
		b.grows.Add(1)
	}
}

func (b *spinBudget) shrink(cur time.Duration) {
	next := cur / 2
	if next < b.step() {
		next = 0
	}
	if next != cur && b.cur.CompareAndSwap(int64(cur), int64(next)) {
		b.shrinks.Add(1)
	}
}
