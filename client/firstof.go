package client

import (
	"context"
	"errors"
	"sync"
	"time"
)

// seedStagger is how long a map fetch waits for one address before it
// also asks the next, as happy eyeballs does (RFC 8305): a seed that
// accepts and never answers costs this much, not the whole timeout.
const seedStagger = 250 * time.Millisecond

// firstOf runs try on candidates 0..n-1, starting the next one when the
// last one started has failed or stagger after it started, whichever comes
// first. It returns the first success, cancels the others and waits for
// them to end; the values of any others that succeeded meanwhile come back
// too, for the caller to dispose of. With no success (or ctx ended first)
// the error joins every candidate's, in order, and ctx's.
func firstOf[T any](ctx context.Context, n int, stagger time.Duration, try func(ctx context.Context, i int) (T, error)) (T, []T, error) {
	type result struct {
		v   T
		err error
		i   int
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan result, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	next, running := 0, 0
	timer := time.NewTimer(stagger)
	defer timer.Stop()
	start := func() {
		i := next
		next++
		running++
		wg.Go(func() {
			v, err := try(tctx, i)
			results <- result{v, err, i}
		})
		timer.Reset(stagger)
	}
	var win *result
	var ctxErr error
loop:
	for win == nil {
		if next < n && running == 0 {
			start()
		}
		if running == 0 {
			break // every candidate failed
		}
		select {
		case r := <-results:
			running--
			if r.err == nil {
				win = &r
			} else {
				errs[r.i] = r.err
				if next < n {
					start() // a failure need not wait out the stagger
				}
			}
		case <-timer.C:
			if next < n {
				start()
			}
		case <-ctx.Done():
			ctxErr = ctx.Err()
			break loop
		}
	}
	cancel()
	wg.Wait()
	close(results)
	var others []T
	for r := range results {
		if r.err == nil {
			others = append(others, r.v)
		} else {
			errs[r.i] = r.err
		}
	}
	if win != nil {
		return win.v, others, nil
	}
	var zero T
	return zero, others, errors.Join(append(errs, ctxErr)...)
}
