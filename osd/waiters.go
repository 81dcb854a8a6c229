package osd

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// waiters runs functions each on a goroutine of its own, as `go f()` does,
// but a goroutine whose function returned waits for the next one instead of
// ending, up to maxIdle of them. It carries whenDurable: three waits per
// 4 KiB put over three replicas, each of which, on a new goroutine, also
// grew its stack for the acknowledgement it sends (about 4% of the put's
// CPU in all); a kept goroutine has its stack grown already.
type waiters struct {
	ctx     context.Context // idle goroutines end when it does
	wg      *sync.WaitGroup // counts the goroutines
	maxIdle int

	// idle holds a channel for each goroutine parked for work: Go takes
	// one out and hands it f, so a goroutine counted idle is one Go can
	// use. (Counting a goroutine idle before it waited on a shared
	// channel let Go find nobody receiving and start another.) Each
	// channel has room for one function, so the hand-off never blocks.
	mu      sync.Mutex
	idle    []chan func()
	started atomic.Int64 // goroutines started, for tests
}

func newWaiters(ctx context.Context, wg *sync.WaitGroup, maxIdle int) *waiters {
	return &waiters{ctx: ctx, wg: wg, maxIdle: maxIdle}
}

// Go runs f on an idle goroutine, or on a new one when none is idle: f
// never waits for another function to return.
func (w *waiters) Go(f func()) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		work := w.idle[n-1] // the most recently parked: its stack is warm
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		work <- f
		return
	}
	w.mu.Unlock()
	w.started.Add(1)
	w.wg.Go(func() { w.loop(f) })
}

func (w *waiters) loop(f func()) {
	work := make(chan func(), 1)
	for {
		f()
		if !w.park(work) {
			return
		}
		select {
		case f = <-work:
		case <-w.ctx.Done():
			if w.unpark(work) {
				return
			}
			// Go took us out of idle just now and has handed us (or is
			// handing us) a function: it runs, as `go f()` would.
			f = <-work
		}
	}
}

// park counts the goroutine that owns work as idle; false when maxIdle
// are already or the context ended: the goroutine ends instead.
func (w *waiters) park(work chan func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.idle) >= w.maxIdle || w.ctx.Err() != nil {
		return false
	}
	w.idle = append(w.idle, work)
	return true
}

// unpark takes work out of idle; false if Go took it first.
func (w *waiters) unpark(work chan func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := slices.Index(w.idle, work)
	if i < 0 {
		return false
	}
	w.idle = slices.Delete(w.idle, i, i+1)
	return true
}

// idleCount is how many goroutines are parked for work.
func (w *waiters) idleCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle)
}
