package osd

import (
	"context"
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
	maxIdle int32

	work    chan func() // unbuffered: a send is taken only by an idle goroutine
	idle    atomic.Int32
	started atomic.Int64 // goroutines started, for tests
}

func newWaiters(ctx context.Context, wg *sync.WaitGroup, maxIdle int32) *waiters {
	return &waiters{ctx: ctx, wg: wg, maxIdle: maxIdle, work: make(chan func())}
}

// Go runs f on an idle goroutine, or on a new one when none is idle: f
// never waits for another function to return.
func (w *waiters) Go(f func()) {
	select {
	case w.work <- f:
	default:
		w.started.Add(1)
		w.wg.Go(func() { w.loop(f) })
	}
}

func (w *waiters) loop(f func()) {
	for {
		f()
		if w.idle.Add(1) > w.maxIdle {
			w.idle.Add(-1)
			return
		}
		select {
		case f = <-w.work:
			w.idle.Add(-1)
		case <-w.ctx.Done():
			w.idle.Add(-1)
			return
		}
	}
}
