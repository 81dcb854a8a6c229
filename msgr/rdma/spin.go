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

// spinMisses is how many spins in a row must end empty before the budget
// halves. One catch in that many pays for the misses where a wake-up
// costs more than a spin: on tcp under load a request-reply spin that
// caught a third of the gaps still beat sleeping after each completion
// (three times the CPU per message when the budget followed every gap).
const spinMisses = 8

// spinBudget is how long a domain's poller spins for the next completion
// before it sleeps: between zero and Config.BusyPoll, adapted to whether
// spinning pays, in the spirit of adaptive interrupt moderation and DPDK's
// adaptive polling. The poller tells it how its spins and sleeps end:
//
//   - a spin after work that ended empty, spinMisses times with no catch
//     between: halve it (to zero below bound/spinSteps);
//   - a sleep that lasted its whole bound and found nothing: halve it;
//   - a wake-up that found work within the bound of the sleep's start,
//     which a spin of the whole bound would have caught: double it (from
//     zero to bound/spinSteps);
//   - a spin that found work: the misses start again from zero.
//
// So traffic whose gaps a spin bridges often enough (request and reply, a
// stream, anything on a NIC) keeps its budget, and gets it back within a
// few replies after a lull; a domain that goes idle, or sees a frame
// only now and then, stops spinning, and an idle domain costs a CQ read
// per sleep. Domains that share cores with the work (four in one local
// cluster) then leave them to it.
//
// REQUIRES: only the poller calls its methods but budget; Stats reads the
// budget from other goroutines.
type spinBudget struct {
	bound  time.Duration
	cur    atomic.Int64 // nanoseconds
	misses int          // empty spins since the last catch
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

// caught notes a spin that found work.
func (b *spinBudget) caught() { b.misses = 0 }

// spunEmpty notes a spin after work that ended without any.
func (b *spinBudget) spunEmpty() {
	if b.misses++; b.misses >= spinMisses {
		b.misses = 0
		b.shrink()
	}
}

// woke notes the end of a sleep of length slept: whether it found work,
// and whether it lasted its whole bound (a sleep ended for another
// reason, a goroutine wanting the token, teaches nothing).
func (b *spinBudget) woke(slept time.Duration, found, timedOut bool) {
	switch {
	case found && slept <= b.bound:
		b.grow()
	case !found && timedOut:
		b.shrink()
	}
}

// step is the smallest budget but zero.
func (b *spinBudget) step() time.Duration { return max(b.bound/spinSteps, 1) }

func (b *spinBudget) grow() {
	cur := b.budget()
	if next := min(b.bound, max(2*cur, b.step())); next != cur {
		b.cur.Store(int64(next))
		b.grows.Add(1)
	}
}

func (b *spinBudget) shrink() {
	cur := b.budget()
	next := cur / 2
	if next < b.step() {
		next = 0
	}
	if next != cur {
		b.cur.Store(int64(next))
		b.shrinks.Add(1)
	}
}
