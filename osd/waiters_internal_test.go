package osd

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// TestWaitersReuseGoroutines: functions run one after another reuse one
// goroutine; a function that blocks does not hold up the next one; no more
// than maxIdle goroutines stay idle; they all end with the context.
func TestWaitersReuseGoroutines(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	const maxIdle = 4
	w := newWaiters(ctx, &wg, maxIdle)

	ran := 0
	for range 20 {
		done := make(chan struct{})
		w.Go(func() { ran++; close(done) })
		<-done
		msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
			return fmt.Sprintf("waiting for the goroutine to be idle again: %d idle, %d started", w.idleCount(), w.started.Load())
		}, func() bool { return w.idleCount() == 1 })
	}
	if ran != 20 || w.started.Load() != 1 {
		t.Fatalf("20 functions in turn: ran %d on %d goroutines, want 20 on 1", ran, w.started.Load())
	}

	// More blocked at once than may stay idle: the idle goroutine takes
	// the first, each other one gets a new goroutine, and the last runs
	// while the others still block.
	release := make(chan struct{})
	var running sync.WaitGroup
	for range maxIdle + 3 {
		running.Add(1)
		w.Go(func() { running.Done(); <-release })
	}
	running.Wait()
	if got := w.started.Load(); got != maxIdle+3 {
		t.Fatalf("%d blocked functions started %d goroutines in all, want %d", maxIdle+3, got, maxIdle+3)
	}
	close(release)
	msgrtest.Eventually(t, 10*time.Second, "maxIdle goroutines idle", func() bool { return w.idleCount() == maxIdle })

	cancel()
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("idle goroutines did not end with their context")
	}
}
